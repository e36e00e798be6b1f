//! The fleet topology (eight PoPs in three regions, two core routers, WAN links to the
//! origin) brought up in network namespaces, as root: every region routes the anycast
//! VIP to its own PoPs, the origin is as far from each region as the topology says,
//! every region's sender is acknowledged by its own region's PoPs; a whole region's
//! edges killed moves its sender to another region and back. Every acknowledged event
//! is at the origin once. Prints what the fleet costs at rest.
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use lab::sender::Outcome;
use testkit::e2e::{failures, now_ms};
use testkit::fleet::{Fleet, REGIONS};

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
            assert_eq!(
                (missing, twice),
                (0, 0),
                "acked events missing, duplicated at the origin"
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
        let times = fleet.ping_ms(&format!("client-{region}"), "10.0.3.2", 10);
        assert!(times.len() >= 9, "{region}: {times:?}");
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
    let announced = || fleet.announcing_pops();
    assert_eq!(announced(), 8, "every PoP announced before the failures");
    let mut fewest = 8;
    for (node, _) in &order {
        fleet
            .run(&["stop", node, "edge", "--kill"])
            .unwrap_or_else(|e| panic!("kill {node}'s edge: {e}"));
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
    let started = Instant::now();
    while announced() < 8 && started.elapsed() < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let all_back = started.elapsed();
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
