//! The fleet topology (eight PoPs in three regions, two core routers, WAN links to the
//! origin) brought up in network namespaces, as root: every region routes the anycast
//! VIP to its own PoPs, the origin is as far from each region as the topology says,
//! every region's sender is acknowledged by its own region's PoPs; a whole region's
//! edges killed moves its sender to another region and back; every PoP's backhaul keeps
//! up over its WAN and drains an origin outage's backlog fast. Every acknowledged event
//! is at the origin once. Prints what the fleet costs at rest.
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use lab::sender::Outcome;
use lab::timeline::Timeline;
use testkit::e2e::{Load, failures, now_ms};
use testkit::fleet::{Fleet, REGIONS, answered_per_second, timeline_path};

#[test]
fn the_fleet_over_the_wan() {
    lab::require_root!("network namespaces, BIRD, XDP");
    let before = Host::now();
    let fleet = Fleet::up();
    each_region_routes_to_its_own_pops_with_the_origin_a_wan_away(&fleet);
    let at_rest = Host::now().since(&before, Duration::from_secs(10));
    println!(
        "fleet at rest: {:.0} % of one core, {} MiB of memory, {} services (up in {:.1} s)",
        at_rest.cpu_percent,
        at_rest.memory_mib,
        at_rest.services,
        fleet.up_took.as_secs_f64()
    );
    let mut sent = each_region_sends_to_its_own_pops(&fleet);
    sent.extend(region_down(&fleet));
    guard_at_scale(&fleet);
    sent.extend(wan_backhaul_and_origin_outage(&fleet));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let arrivals = fleet.origin("client-eu").unwrap_or_default();
        let mut count: HashMap<&str, usize> = HashMap::new();
        arrivals
            .iter()
            .for_each(|a| *count.entry(a.id.as_str()).or_default() += 1);
        let acked = sent.iter().filter(|o| o.acked());
        let missing = acked.filter(|o| !count.contains_key(o.id.as_str())).count();
        let twice = count.values().filter(|n| **n > 1).count();
        if (missing == 0 && twice == 0) || Instant::now() > deadline {
            let copies: Vec<String> = arrivals
                .iter()
                .filter(|a| count[a.id.as_str()] > 1)
                .map(|a| format!("{} from {} at seq {}", a.id, a.pop, a.seq))
                .collect();
            assert_eq!(
                (missing, twice),
                (0, 0),
                "acked events missing, duplicated at the origin (copies: {copies:?})"
            );
            let acked = sent.iter().filter(|o| o.acked()).count();
            println!("fleet: all {acked} acknowledged events at the origin once");
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every region's router has its own PoPs, and only them, as the VIP's next hops; the
/// origin is 10, 80 and 180 ms (RTT) from eu, us and ap (ap's link: 5 ms jitter each way).
fn each_region_routes_to_its_own_pops_with_the_origin_a_wan_away(fleet: &Fleet) {
    for region in REGIONS {
        let took = fleet
            .wait_next_hops(&region.router(), region.pops, Duration::from_secs(60))
            .unwrap_or_else(|had| {
                panic!(
                    "{}: next hops {had:?}, want {:?}",
                    region.router(),
                    region.pops
                )
            });
        println!(
            "fleet: {} routes the VIP to its {} PoPs ({:.1} s after up)",
            region.router(),
            region.pops.len(),
            took.as_secs_f64()
        );
    }
    for (region, want_ms, slack_ms) in [("eu", 10.0, 4.0), ("us", 80.0, 6.0), ("ap", 180.0, 14.0)] {
        // ap's link loses 0.5 % of frames each way: a few lost pings are the WAN, not a fault.
        let times = fleet.ping_ms(&format!("client-{region}"), "10.0.3.2", 20);
        assert!(times.len() >= 16, "{region}: {times:?}");
        let median = times[times.len() / 2];
        assert!(
            (median - want_ms).abs() <= slack_ms,
            "{region} to the origin: median RTT {median} ms, want {want_ms} ± {slack_ms}: {times:?}"
        );
        println!("fleet: {region} to the origin: median RTT {median:.1} ms (want {want_ms})");
    }
}

/// Each region's sender is acknowledged by its own region's PoPs only.
fn each_region_sends_to_its_own_pops(fleet: &Fleet) -> Vec<Outcome> {
    let mut sent = Vec::new();
    for region in REGIONS {
        let prefix = format!("fleet-{}-", region.name);
        let outcomes = fleet.send(&region.client(), &prefix, 20, Duration::from_secs(2));
        assert!(
            outcomes.len() == 40 && outcomes.iter().all(|o| o.acked()),
            "{}: {:?}",
            region.client(),
            failures(&outcomes)
        );
        let pops: Vec<&str> = outcomes.iter().filter_map(|o| o.pop.as_deref()).collect();
        assert!(
            pops.iter().all(|pop| pop.contains(region.name)),
            "{} was answered outside its region: {pops:?}",
            region.client()
        );
        let mut per_pop: BTreeMap<&str, usize> = BTreeMap::new();
        pops.iter()
            .for_each(|pop| *per_pop.entry(pop).or_default() += 1);
        println!("fleet: {} acknowledged by {per_pop:?}", region.client());
        sent.extend(outcomes);
    }
    sent
}

/// kill -9 of every edge in ap under client-ap's load: another region answers within
/// 3 s; the edges restarted, ap takes its traffic back after the agents' hold-down.
fn region_down(fleet: &Fleet) -> Vec<Outcome> {
    let ap = REGIONS[2];
    let load = fleet.load(
        &ap.client(),
        "fleet-region-down-",
        20,
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_secs(3));
    let killed_ms = now_ms();
    for pop in AP_POPS {
        fleet
            .run(&["stop", pop, "edge", "--kill"])
            .unwrap_or_else(|e| panic!("kill {pop}'s edge: {e}"));
    }
    let gone = fleet
        .wait_next_hops_without(&ap.router(), ap.pops, Duration::from_secs(10))
        .unwrap_or_else(|had| panic!("{}: still {had:?}", ap.router()));
    std::thread::sleep(Duration::from_secs(3));
    let restarted_ms = now_ms();
    for pop in AP_POPS {
        fleet
            .run(&["start", pop, "edge"])
            .unwrap_or_else(|e| panic!("start {pop}'s edge: {e}"));
    }
    let back = fleet
        .wait_next_hops(&ap.router(), ap.pops, Duration::from_secs(30))
        .unwrap_or_else(|had| panic!("{}: ap PoPs not back: {had:?}", ap.router()));
    let back_ms = restarted_ms + back.as_millis() as u64;
    let outcomes = load.outcomes();
    draw(
        "region-down",
        Timeline {
            title: "region-down: client-ap's webhooks a second, by the PoP that acked them".into(),
            y_label: "webhooks/s".into(),
            series: answered_per_second(&outcomes),
            events: vec![
                (seconds(killed_ms), "ap's edges killed".into()),
                (
                    seconds(killed_ms) + gone.as_secs_f64(),
                    "ap's routes gone".into(),
                ),
                (seconds(restarted_ms), "ap's edges restarted".into()),
                (seconds(back_ms), "ap's routes back".into()),
            ],
        },
    );

    let elsewhere = |o: &&Outcome| o.acked() && o.pop.as_deref().is_some_and(|p| !p.contains("ap"));
    let first_elsewhere_ms = outcomes
        .iter()
        .filter(|o| o.sent_ms >= killed_ms)
        .filter(elsewhere)
        .map(|o| o.done_ms - killed_ms)
        .min()
        .expect("no request answered by another region");
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.acked()).collect();
    let gone_ms = killed_ms + gone.as_millis() as u64;
    // Sent to another region over the WAN and still in flight when ap's routes return:
    // their next packets reach ap's PoPs, which know nothing of them.
    let failed_once_gone: Vec<u64> = failed
        .iter()
        .filter(|o| o.sent_ms > gone_ms)
        .map(|o| o.sent_ms - killed_ms)
        .collect();
    let after_back: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.sent_ms > back_ms + 1_000)
        .collect();
    let regions_elsewhere: BTreeSet<&str> = outcomes
        .iter()
        .filter(elsewhere)
        .filter_map(|o| o.pop.as_deref())
        .collect();
    println!(
        "scenario region-down: ap's routes gone {} ms after the kill; client-ap first answered by another region {first_elsewhere_ms} ms after it ({regions_elsewhere:?}); {}/{} failed, {} of them after the routes had gone (sent {:?} to {:?} ms after the kill, in flight to another region when ap's routes came back); ap's PoPs back {} ms after their edges restarted ({} ms after the kill), then {} of {} requests answered in ap",
        gone.as_millis(),
        failed.len(),
        outcomes.len(),
        failed_once_gone.len(),
        failed_once_gone.iter().min(),
        failed_once_gone.iter().max(),
        back.as_millis(),
        back_ms - killed_ms,
        after_back
            .iter()
            .filter(|o| o.acked() && o.pop.as_deref().is_some_and(|p| p.contains("ap")))
            .count(),
        after_back.len(),
    );
    assert!(
        first_elsewhere_ms <= 3_000,
        "client-ap answered by another region only {first_elsewhere_ms} ms after the kill"
    );
    assert!(
        !after_back.is_empty()
            && after_back
                .iter()
                .all(|o| o.acked() && o.pop.as_deref().is_some_and(|p| p.contains("ap"))),
        "after ap's return: {:?}",
        after_back
            .iter()
            .map(|o| (&o.pop, o.status))
            .collect::<Vec<_>>()
    );
    outcomes
}

/// Every PoP's edge killed, one every 2 s across the regions, with the guard's
/// `min_other_pops_announcing: 3`: the fleet never has fewer than 3 PoPs announced, the
/// PoPs whose withdraw was refused say so on `/status` and raise the alert (and, their
/// degrade checks failing with their edges, announce a longer path); with their edges
/// back, every PoP is announced again.
fn guard_at_scale(fleet: &Fleet) {
    let pops: Vec<(String, &str)> = REGIONS.iter().flat_map(|r| r.pop_nodes()).collect();
    // Round the regions, so that no region is the first to go dark.
    let mut order: Vec<&(String, &str)> = Vec::new();
    for n in 1..=3 {
        order.extend(
            pops.iter()
                .filter(|(node, _)| node.ends_with(&n.to_string())),
        );
    }
    // Every count of announced PoPs taken, with its time: the scenario's timeline.
    let samples = std::cell::RefCell::new(Vec::new());
    let announced = || {
        let count = fleet.announcing_pops();
        samples.borrow_mut().push((seconds(now_ms()), count as f64));
        count
    };
    assert_eq!(announced(), 8, "every PoP announced before the failures");
    let mut fewest = 8;
    let mut events = Vec::new();
    for (node, _) in &order {
        fleet
            .run(&["stop", node, "edge", "--kill"])
            .unwrap_or_else(|e| panic!("kill {node}'s edge: {e}"));
        events.push((seconds(now_ms()), format!("{node} killed")));
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            fewest = fewest.min(announced());
        }
    }
    let settle = Instant::now() + Duration::from_secs(5);
    while Instant::now() < settle {
        fewest = fewest.min(announced());
    }
    let left = announced();
    let vetoing: Vec<&str> = pops
        .iter()
        .filter(|(node, address)| fleet.agent_status(node, address)["guard_vetoing"] == true)
        .map(|(node, _)| node.as_str())
        .collect();
    let started = Instant::now();
    let alerted = loop {
        let firing: BTreeSet<String> = fleet
            .alerts()
            .into_iter()
            .filter(|a| a.labels["alertname"] == "WebhookEdgeGuardVetoing" && a.state == "firing")
            .filter_map(|a| a.labels.get("pop").cloned())
            .collect();
        if vetoing.iter().all(|pop| firing.contains(*pop)) || started.elapsed() > ALERT_WAIT {
            break firing;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let alert_after = started.elapsed();
    for (node, _) in &pops {
        fleet
            .run(&["start", node, "edge"])
            .unwrap_or_else(|e| panic!("start {node}'s edge: {e}"));
    }
    events.push((seconds(now_ms()), "edges restarted".to_owned()));
    let started = Instant::now();
    while announced() < 8 && started.elapsed() < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let all_back = started.elapsed();
    draw(
        "guard-at-scale",
        Timeline {
            title: "guard-at-scale: PoPs announced (routers' RIBs), min_other_pops_announcing 3"
                .into(),
            y_label: "PoPs announced".into(),
            series: BTreeMap::from([("announced".to_owned(), samples.take())]),
            events,
        },
    );
    println!(
        "scenario guard-at-scale: 8 edges killed 2 s apart with min_other_pops_announcing 3: fewest announced {fewest}, {left} left announced, vetoing {vetoing:?} (alert firing for {alerted:?}, {:.1} s after the last check); every PoP announced again {:.1} s after the edges restarted",
        alert_after.as_secs_f64(),
        all_back.as_secs_f64()
    );
    assert_eq!(
        (fewest, left),
        (3, 3),
        "announced PoPs, fewest and at the end"
    );
    assert_eq!(vetoing.len(), 3, "PoPs whose withdraw the guard refused");
    assert!(
        vetoing.iter().all(|pop| alerted.contains(*pop)),
        "WebhookEdgeGuardVetoing firing for {alerted:?}, vetoing {vetoing:?}"
    );
    assert_eq!(announced(), 8, "every PoP announced again");
}

/// Steady webhooks into every region over keep-alive connections: for a minute with the
/// origin up (every PoP's backhaul keeps up over its WAN), then the origin stopped for
/// three minutes and started (every PoP's backlog drains at five times its arrival rate
/// or faster).
fn wan_backhaul_and_origin_outage(fleet: &Fleet) -> Vec<Outcome> {
    let loads: Vec<Load> = REGIONS
        .iter()
        .map(|region| {
            fleet.load_kept_alive(
                &region.client(),
                &format!("fleet-wan-{}-", region.name),
                WAN_RATE,
                WAN_CONNECTIONS,
                WARM_UP + MEASURED + SCRAPE + OUTAGE + DRAIN_WAIT,
            )
        })
        .collect();
    std::thread::sleep(WARM_UP + MEASURED + SCRAPE);
    wan_backhaul(fleet);
    let outage = origin_outage(fleet);
    let outcomes: Vec<Outcome> = loads.into_iter().flat_map(Load::outcomes).collect();
    let events = vec![
        (outage.stopped_s, "origin stopped".to_owned()),
        (outage.restarted_s, "origin started".to_owned()),
    ];
    draw(
        "wan-backhaul",
        Timeline {
            title: format!(
                "wan-backhaul, origin-outage-wan: webhooks a second acked by each PoP ({WAN_RATE}/s into each region)"
            ),
            y_label: "webhooks/s".into(),
            series: answered_per_second(&outcomes),
            events: events.clone(),
        },
    );
    draw(
        "origin-outage-wan",
        Timeline {
            title: "origin-outage-wan: each PoP's backlog (acked, not yet at the origin)".into(),
            y_label: "records".into(),
            series: outage.lag,
            events,
        },
    );
    outcomes
}

/// The minute just past of [`wan_backhaul_and_origin_outage`]'s load: each PoP's
/// delivery lag (receipt to the origin's ack) has a p99 of 2 s or less, and ap, 180 ms
/// and 0.5 % loss from the origin, delivers 90 % or more of what eu, 10 ms from it,
/// delivers at the same offered load.
fn wan_backhaul(fleet: &Fleet) {
    let window = format!("{}s", MEASURED.as_secs());
    let p99 = fleet.query_by(
        &format!(
            "histogram_quantile(0.99, sum by (pop, le) (increase(edge_backhaul_delivery_seconds_bucket[{window}])))"
        ),
        "pop",
    );
    let answered = fleet.query_by(
        &format!("sum by (region) (rate(edge_requests_total{{status=~\"2..\"}}[{window}]))"),
        "region",
    );
    let delivered = fleet.query_by(
        &format!("sum by (region) (rate(edge_backhaul_acks_total[{window}]))"),
        "region",
    );
    let rate = |of: &BTreeMap<String, f64>, region: &str| of.get(region).copied().unwrap_or(0.0);
    let ap_of_eu = 100.0 * rate(&delivered, "ap") / rate(&delivered, "eu").max(1.0);
    println!(
        "scenario wan-backhaul: {WAN_RATE} webhooks/s into each region over {WAN_CONNECTIONS} keep-alive connections, {} s measured: acked/s {}; delivered/s {}; ap delivers {ap_of_eu:.0} % of eu's rate; delivery p99 per PoP (s) {}",
        MEASURED.as_secs(),
        per_key(&answered, 0),
        per_key(&delivered, 0),
        per_key(&p99, 2),
    );
    assert_eq!(p99.len(), 8, "every PoP delivered: {p99:?}");
    assert!(
        p99.values().all(|p| *p <= 2.0),
        "delivery p99 over 2 s: {p99:?}"
    );
    assert!(
        rate(&delivered, "eu") >= 0.9 * f64::from(WAN_RATE),
        "eu delivered {delivered:?} of {WAN_RATE}/s offered"
    );
    assert!(ap_of_eu >= 90.0, "ap delivers {ap_of_eu:.0} % of eu's rate");
}

/// The origin's three servers stopped for [`OUTAGE`] under the load, then started: each
/// PoP's backlog (events acked, not yet at the origin) drains at five times the rate it
/// grew at, or faster.
fn origin_outage(fleet: &Fleet) -> Outage {
    let stopped_s = seconds(now_ms());
    fleet.stop_origin();
    std::thread::sleep(OUTAGE);
    let restarted_s = seconds(now_ms());
    fleet.start_origin();
    let until = Instant::now() + DRAIN_WAIT;
    while Instant::now() < until {
        let lag = fleet.query_by("edge_backhaul_lag_records", "pop");
        if lag.len() == 8 && lag.values().all(|records| *records <= f64::from(WAN_RATE)) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    std::thread::sleep(SCRAPE);
    let looked_back = seconds(now_ms()) - stopped_s + 10.0;
    let lag = fleet.samples_by(
        &format!("edge_backhaul_lag_records[{}s]", looked_back.ceil()),
        "pop",
    );
    let drains: BTreeMap<&str, Option<Drain>> = lag
        .iter()
        .map(|(pop, samples)| (pop.as_str(), Drain::of(samples, stopped_s)))
        .collect();
    let shown: Vec<String> = drains
        .iter()
        .map(|(pop, drain)| match drain {
            Some(d) => format!(
                "{pop} {:.0} events at {:.0}/s, resumed {:.1} s after the start, drained at {:.0}/s ({:.1}x) in {:.1} s",
                d.backlog,
                d.arrival_per_s,
                d.resumed_s - restarted_s,
                d.drain_per_s,
                d.drain_per_s / d.arrival_per_s,
                d.drained_s - d.resumed_s
            ),
            None => format!("{pop} not drained"),
        })
        .collect();
    println!(
        "scenario origin-outage-wan: origin stopped {} s under {WAN_RATE} webhooks/s per region, then started: {}",
        OUTAGE.as_secs(),
        shown.join("; ")
    );
    assert_eq!(drains.len(), 8, "every PoP's backlog: {drains:?}");
    for (pop, drain) in &drains {
        let drain = drain
            .as_ref()
            .unwrap_or_else(|| panic!("{pop}: backlog not drained"));
        assert!(
            drain.drain_per_s >= 5.0 * drain.arrival_per_s,
            "{pop}: drained at {:.0}/s, arrivals {:.0}/s",
            drain.drain_per_s,
            drain.arrival_per_s
        );
    }
    Outage {
        stopped_s,
        restarted_s,
        lag,
    }
}

/// When the origin was stopped and started, and every PoP's backlog samples.
struct Outage {
    stopped_s: f64,
    restarted_s: f64,
    lag: BTreeMap<String, Vec<(f64, f64)>>,
}

/// One PoP's backlog over an origin outage, from its `edge_backhaul_lag_records` samples
/// (a scrape every 2 s, so the times err by up to one scrape, each toward a slower drain).
#[derive(Debug)]
struct Drain {
    /// Records acked and not delivered at the peak.
    backlog: f64,
    /// The rate the backlog grew at, from the stop to the peak: the PoP's arrivals.
    arrival_per_s: f64,
    /// The last sample at the peak, before the backlog fell (unix seconds).
    resumed_s: f64,
    /// The first sample with under a second's arrivals left (unix seconds).
    drained_s: f64,
    /// Events delivered a second while draining: the backlog and what arrived meanwhile.
    drain_per_s: f64,
}

impl Drain {
    /// The drain in `samples` (unix seconds, lag records) of an outage begun at
    /// `stopped_s`; None if the backlog never grew or never fell below a second's
    /// arrivals.
    fn of(samples: &[(f64, f64)], stopped_s: f64) -> Option<Drain> {
        let before = samples.iter().rev().find(|(t, _)| *t <= stopped_s)?.1;
        let after: Vec<&(f64, f64)> = samples.iter().filter(|(t, _)| *t > stopped_s).collect();
        let (resumed_s, backlog) =
            after
                .iter()
                .fold(None, |peak: Option<(f64, f64)>, (t, lag)| match peak {
                    Some((_, most)) if most > *lag => peak,
                    _ => Some((*t, *lag)),
                })?;
        let arrival_per_s = (backlog - before) / (resumed_s - stopped_s);
        if arrival_per_s <= 0.0 {
            return None;
        }
        let (drained_s, left) = after
            .iter()
            .find(|(t, lag)| *t > resumed_s && *lag <= arrival_per_s)
            .map(|(t, lag)| (*t, *lag))?;
        let drain_per_s = (backlog - left) / (drained_s - resumed_s) + arrival_per_s;
        Some(Drain {
            backlog,
            arrival_per_s,
            resumed_s,
            drained_s,
            drain_per_s,
        })
    }
}

/// A backlog that grows 100/s for 180 s from 10 records, stays a scrape at its peak
/// while the origin elects its leaders, then falls 900/s net: 1,000 deliveries a second.
#[test]
fn a_drain_is_read_from_lag_samples() {
    let lag = |t: f64| match t {
        t if t <= 0.0 => 10.0,
        t if t <= 180.0 => 10.0 + 100.0 * t,
        t if t <= 182.0 => 18_010.0,
        t => (18_010.0 - 900.0 * (t - 182.0)).max(20.0),
    };
    let samples: Vec<(f64, f64)> = (-10..=260)
        .step_by(2)
        .map(|t| (f64::from(t), lag(f64::from(t))))
        .collect();
    let drain = Drain::of(&samples, 0.0).expect("a drain");
    assert_eq!((drain.backlog, drain.resumed_s), (18_010.0, 182.0));
    // Arrivals from the stop to the last sample at the peak: 18,000 in 182 s.
    assert!((drain.arrival_per_s - 98.9).abs() < 0.1, "{drain:?}");
    // The first sample at or under a second's arrivals: 182 + 18,000 / 900 = 202 s.
    assert_eq!(drain.drained_s, 202.0);
    assert!((drain.drain_per_s - 998.4).abs() < 0.1, "{drain:?}");
    assert!(
        Drain::of(&[(0.0, 5.0), (2.0, 5.0), (4.0, 5.0)], 1.0).is_none(),
        "no growth, no drain"
    );
    let never_drained: Vec<(f64, f64)> = samples.iter().map(|(t, l)| (*t, l.max(500.0))).collect();
    assert!(Drain::of(&never_drained, 0.0).is_none());
}

/// Draws `timeline` to `target/lab/NAME.png` and says where.
fn draw(name: &str, timeline: Timeline) {
    let path = timeline_path(name);
    timeline
        .draw(&path)
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
    println!("fleet: {name} timeline in {}", path.display());
}

/// Unix milliseconds as seconds.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1e3
}

/// `key value, …` with `decimals` places.
fn per_key(values: &BTreeMap<String, f64>, decimals: usize) -> String {
    values
        .iter()
        .map(|(key, value)| format!("{key} {value:.decimals$}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The host's CPU time and available memory, to put a price on the fleet at rest.
struct Host {
    busy_ticks: u64,
    total_ticks: u64,
    available_kib: u64,
}

/// What the fleet costs, from before it was up to a quiet window after.
struct Cost {
    cpu_percent: f64,
    memory_mib: u64,
    services: usize,
}

impl Host {
    fn now() -> Host {
        let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .expect("the cpu line")
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
        let total: u64 = ticks.iter().take(8).sum();
        let idle = ticks[3] + ticks[4];
        let meminfo = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
        let available_kib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("MemAvailable");
        Host {
            busy_ticks: total - idle,
            total_ticks: total,
            available_kib,
        }
    }

    /// Memory taken since `before`, and the CPU used (in % of one core) over a
    /// `window` measured from now.
    fn since(&self, before: &Host, window: Duration) -> Cost {
        let start = Host::now();
        std::thread::sleep(window);
        let end = Host::now();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let busy = (end.busy_ticks - start.busy_ticks) as f64;
        let total = (end.total_ticks - start.total_ticks) as f64;
        let services = std::fs::read_dir("/run/webhook-lab")
            .into_iter()
            .flatten()
            .filter_map(|node| std::fs::read_dir(node.ok()?.path().join("pids")).ok())
            .flat_map(|pids| pids.filter_map(Result::ok))
            .count();
        Cost {
            cpu_percent: 100.0 * cores * busy / total.max(1.0),
            memory_mib: before.available_kib.saturating_sub(self.available_kib) / 1024,
            services,
        }
    }
}

/// The ap region's PoPs, as nodes.
const AP_POPS: [&str; 2] = ["pop-ap1", "pop-ap2"];
/// How long the fleet Prometheus may take to fire an alert (2 s scrapes over the WAN).
const ALERT_WAIT: Duration = Duration::from_secs(30);
/// Webhooks a second into each region in the WAN scenarios, and over how many keep-alive
/// connections (enough that every PoP of a region holds some of them). Not the 200 the
/// issue asks: on 2 cores, with the origin's three servers fsyncing every message on one
/// disk, the fleet delivers about 550 a second in all, so 600 a second fell behind
/// (delivery p99 4 s in eu, 8–16 s in ap), and a drain at five times the arrivals needs
/// an origin six times as fast as the fleet's whole arrival rate.
const WAN_RATE: u32 = 30;
const WAN_CONNECTIONS: u32 = 24;
/// The WAN scenarios' load: a warm-up, the minute measured, the outage, and the longest
/// wait for the backlogs to drain (at five times the arrival rate, 180 s of backlog is
/// gone 45 s after the origin's return).
const WARM_UP: Duration = Duration::from_secs(5);
const MEASURED: Duration = Duration::from_secs(60);
const OUTAGE: Duration = Duration::from_secs(180);
const DRAIN_WAIT: Duration = Duration::from_secs(60);
/// One scrape of the fleet's Prometheus and a little more.
const SCRAPE: Duration = Duration::from_secs(3);
