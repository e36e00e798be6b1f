//! What the lab's end-to-end tests share: the `lab` binary driven as a user would, the
//! client's load, the router's next hops, the origin's count and the lab Prometheus's
//! alerts.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lab::origin::{Arrival, Probe, Replication};
use lab::prometheus::Alert;
use lab::runner::next_hops_in;
use lab::sender::Outcome;

/// The `lab` binary, with the topology up for the test's lifetime.
pub struct LabCli {
    /// Every outcome of every load, for the final zero-loss check.
    all: std::cell::RefCell<Vec<Outcome>>,
}

impl LabCli {
    /// `lab up`, waiting until the router has both PoPs as next hops.
    pub fn up() -> LabCli {
        let lab = LabCli::started(&["up"]);
        lab.wait_next_hops(2, Duration::from_secs(30));
        lab
    }

    /// The topology with `machines` (comma-separated nodes) left to booted machines:
    /// their namespaces, links and addresses, none of their services.
    pub fn up_for_machines(machines: &str) -> LabCli {
        LabCli::started(&["up", "--machines", machines])
    }

    fn started(up: &[&str]) -> LabCli {
        let lab = LabCli {
            all: Default::default(),
        };
        lab.run(up);
        lab
    }

    /// Runs `lab ARGS` and returns its stdout; panics with its stderr on failure.
    pub fn run(&self, args: &[&str]) -> String {
        self.try_run(args)
            .unwrap_or_else(|e| panic!("lab {args:?}: {e}"))
    }

    /// `lab ARGS`: its stdout, or its output when it fails.
    pub fn try_run(&self, args: &[&str]) -> Result<String, String> {
        stdout_of(Command::new(lab_bin()).args(args))
    }

    /// Starts every service `lab status` reports stopped, naming each; so that a
    /// scenario that failed halfway (its victim still down) does not fail the ones after it.
    pub fn start_stopped_services(&self) {
        for (node, service, _) in self.services().iter().filter(|(.., pid)| pid.is_none()) {
            match self.try_run(&["start", node, service]) {
                Ok(_) => println!("lab: started {node}/{service}, left stopped by the failure"),
                Err(e) => println!("lab: could not start {node}/{service}: {e}"),
            }
        }
    }

    /// A running service's PID, as `lab status` reports it.
    pub fn service_pid(&self, node: &str, service: &str) -> i32 {
        let services = self.services();
        let (.., pid) = services
            .iter()
            .find(|(n, s, _)| n == node && s == service)
            .unwrap_or_else(|| panic!("no {service} on {node} in {services:?}"));
        pid.unwrap_or_else(|| panic!("{service} on {node} is not running"))
    }

    /// Every service in `lab status`'s table (`node up|down name(pid|stopped) ...`):
    /// node, name and PID, none when stopped.
    fn services(&self) -> Vec<(String, String, Option<i32>)> {
        let status = self.run(&["status"]);
        let mut services = Vec::new();
        for line in status.lines().take_while(|l| !l.is_empty()) {
            let mut words = line.split_whitespace();
            let Some(node) = words.next() else { continue };
            for word in words {
                if let Some((name, state)) = word.strip_suffix(')').and_then(|w| w.split_once('('))
                {
                    services.push((node.to_owned(), name.to_owned(), state.parse().ok()));
                }
            }
        }
        services
    }

    /// Starts `lab ARGS` without waiting.
    pub fn spawn(&self, args: &[&str]) -> Child {
        Command::new(lab_bin())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Starts the client's sender in the background, to the IPv4 anycast address.
    pub fn load(&self, prefix: &str, rate: u32, duration: Duration) -> Load {
        self.load_to(&url(VIP), prefix, rate, duration)
    }

    /// Starts the client's sender in the background, to `url`.
    pub fn load_to(&self, url: &str, prefix: &str, rate: u32, duration: Duration) -> Load {
        self.sender(url, prefix, rate, duration, 0)
    }

    /// Starts the client's sender in the background, to the IPv4 anycast address over
    /// `connections` keep-alive connections (long-lived flows through the router).
    pub fn load_kept_alive(
        &self,
        prefix: &str,
        rate: u32,
        connections: u32,
        duration: Duration,
    ) -> Load {
        self.sender(&url(VIP), prefix, rate, duration, connections)
    }

    fn sender(
        &self,
        url: &str,
        prefix: &str,
        rate: u32,
        duration: Duration,
        connections: u32,
    ) -> Load {
        let child = Command::new(lab_bin())
            .args(client_lab())
            .args(send_args(url, prefix, rate, duration, connections))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Load { child }
    }

    /// The router's next hops for the VIP now.
    pub fn next_hops(&self) -> Vec<String> {
        router_next_hops()
    }

    /// Waits until the router has `count` next hops for the IPv4 VIP; returns how long
    /// it took.
    pub fn wait_next_hops(&self, count: usize, timeout: Duration) -> Duration {
        self.wait_next_hops_for(VIP, count, timeout)
    }

    /// Waits until the router has `count` next hops for `vip`.
    pub fn wait_next_hops_for(&self, vip: &str, count: usize, timeout: Duration) -> Duration {
        self.wait_router(vip, &format!("{count} next hops"), timeout, |hops| {
            hops.len() == count
        })
    }

    /// Waits until the router's next hops for the IPv4 VIP are exactly `hops`.
    pub fn wait_next_hops_exactly(&self, hops: &[&str], timeout: Duration) -> Duration {
        self.wait_router(VIP, &format!("next hops {hops:?}"), timeout, |now| {
            now == hops
        })
    }

    fn wait_router(
        &self,
        vip: &str,
        what: &str,
        timeout: Duration,
        reached: impl Fn(&[String]) -> bool,
    ) -> Duration {
        let started = Instant::now();
        while !reached(&router_next_hops_for(vip)) {
            assert!(
                started.elapsed() < timeout,
                "router never reached {what} for {vip}: {}",
                self.run(&["status"])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        started.elapsed()
    }

    /// The alerts the lab's Prometheus holds, pending and firing.
    pub fn alerts(&self) -> Vec<Alert> {
        self.run(&["alerts"])
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Polls the lab's alerts until `reached` holds for them; returns how long it took.
    pub fn wait_alerts(
        &self,
        what: &str,
        timeout: Duration,
        reached: impl Fn(&[Alert]) -> bool,
    ) -> Duration {
        let started = Instant::now();
        loop {
            let alerts = self.alerts();
            if reached(&alerts) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < timeout,
                "{what} not reached in {timeout:?}; alerts: {alerts:#?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until no alert is firing; returns how long it took.
    pub fn wait_no_alert_firing(&self, timeout: Duration) -> Duration {
        self.wait_alerts("no alert firing", timeout, |alerts| {
            !alerts.iter().any(Alert::firing)
        })
    }

    /// A PromQL instant query at the lab's Prometheus: its `data`, or why it failed.
    pub fn query(&self, expr: &str) -> Result<serde_json::Value, String> {
        let data = self.try_run(&["query", expr])?;
        serde_json::from_str(&data).map_err(|e| e.to_string())
    }

    /// Stops every server of the origin's NATS cluster.
    pub fn stop_origin(&self) {
        for server in ORIGIN_SERVERS {
            self.run(&["stop", "origin", server]);
        }
    }

    /// Starts the three origin servers again.
    pub fn start_origin(&self) {
        for server in ORIGIN_SERVERS {
            self.run(&["start", "origin", server]);
        }
    }

    /// The origin stream's replication (leader and peers), or why it could not be read
    /// (no leader at the moment, say).
    pub fn origin_replication(&self) -> Result<Replication, String> {
        let line = self.try_run(&[&client_lab()[..], &["origin", "--replication"]].concat())?;
        serde_json::from_str(&line).map_err(|e| e.to_string())
    }

    /// Every message in the origin's stream, or why it could not be read (a cluster
    /// still electing its leaders, say).
    /// What `pop`'s own origin identity (the nkey in its edge.yaml) may do: look the
    /// stream up, publish to `subject`, delete the stream.
    pub fn origin_probe(&self, pop: &str, subject: &str, other_pop: &str) -> Probe {
        let config: serde_yaml::Value = serde_yaml::from_str(
            &std::fs::read_to_string(lab_dir().join(pop).join("edge.yaml")).unwrap(),
        )
        .unwrap();
        let seed = config["backhaul"]["nats"]["nkey"]
            .as_str()
            .unwrap_or_else(|| panic!("{pop}/edge.yaml has no backhaul.nats.nkey"));
        let seed_file = std::env::temp_dir().join(format!("lab-{pop}.nk"));
        std::fs::write(&seed_file, seed).unwrap();
        let line = self
            .try_run(
                &[
                    &client_lab()[..],
                    &["origin", "--probe", subject, "--as-seed-file"],
                    &[seed_file.to_str().unwrap()],
                    &["--as-inbox", &format!("_INBOX.{pop}")],
                    &["--peek-inbox", &format!("_INBOX.{other_pop}")],
                ]
                .concat(),
            )
            .unwrap();
        let _ = std::fs::remove_file(&seed_file);
        serde_json::from_str(line.trim()).unwrap()
    }

    /// Every event at the origin, or why it cannot be read.
    pub fn origin(&self) -> Result<Vec<Arrival>, String> {
        let lines = self.try_run(&[&client_lab()[..], &["origin"]].concat())?;
        lines
            .lines()
            .map(|line| serde_json::from_str(line).map_err(|e| e.to_string()))
            .collect()
    }

    /// Waits until every acked outcome is at the origin, then asserts that none is
    /// missing and none arrived twice, naming the ids that did not.
    pub fn assert_at_origin_once(&self, outcomes: &[Outcome], timeout: Duration) {
        let started = Instant::now();
        loop {
            let arrivals = match self.origin() {
                Ok(arrivals) => arrivals,
                Err(e) => {
                    assert!(started.elapsed() < timeout, "reading the origin: {e}");
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
            };
            let mut count: HashMap<String, usize> = HashMap::new();
            for arrival in arrivals {
                *count.entry(arrival.id).or_default() += 1;
            }
            let missing: Vec<&Outcome> = outcomes
                .iter()
                .filter(|o| o.acked() && !count.contains_key(&o.id))
                .collect();
            if missing.is_empty() || started.elapsed() > timeout {
                let duplicated: Vec<&String> = count
                    .iter()
                    .filter(|(_, n)| **n > 1)
                    .map(|(id, _)| id)
                    .collect();
                assert!(
                    missing.is_empty() && duplicated.is_empty(),
                    "at the origin {} s after the check began: {} acked events missing {:?}, {} duplicated {:?}",
                    started.elapsed().as_secs(),
                    missing.len(),
                    &missing[..missing.len().min(20)],
                    duplicated.len(),
                    &duplicated[..duplicated.len().min(20)],
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Every request of `outcomes` was acked, and every one is at the origin once.
    pub fn assert_all_acked_and_at_origin(&self, outcomes: &[Outcome], timeout: Duration) {
        assert!(
            outcomes.iter().all(|o| o.acked()),
            "{:?}",
            failures(outcomes)
        );
        self.assert_at_origin_once(outcomes, timeout);
    }

    /// Every acknowledged webhook of every load is at the origin exactly once.
    pub fn verify_origin_has_every_ack(&self) {
        let all = self.all.borrow();
        self.assert_at_origin_once(&all, Duration::from_secs(30));
        let acked = all.iter().filter(|o| o.acked()).count();
        println!(
            "lab: {acked} acknowledged webhooks over all scenarios, none missing or duplicated at the origin"
        );
    }

    /// `down` (twice: it must be idempotent) stops every service and removes every
    /// namespace and the state directory.
    pub fn down_leaves_nothing(&self) {
        let status = self.run(&["status"]);
        let pids: Vec<i32> = status
            .split(['(', ')'])
            .filter_map(|part| part.parse().ok())
            .collect();
        assert!(pids.len() >= 9, "services before down: {status}");
        self.run(&["down"]);
        self.run(&["down"]);
        let namespaces = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let namespaces = String::from_utf8_lossy(&namespaces.stdout);
        assert!(!namespaces.contains("lab-"), "{namespaces}");
        for pid in &pids {
            assert!(
                !std::path::Path::new(&format!("/proc/{pid}")).exists()
                    || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .is_ok_and(|stat| stat.contains(") Z ")),
                "service {pid} still running after down"
            );
        }
        assert!(!std::path::Path::new(lab::DEFAULT_STATE_DIR).exists());
        println!(
            "lab: down stopped {} services and removed every namespace",
            pids.len()
        );
    }

    /// Packets the PoPs' XDP programs dropped, all reasons.
    pub fn xdp_drops(&self) -> f64 {
        self.xdp_packets(r#"action="drop""#)
    }

    /// Packets both PoPs' XDP programs counted on series whose labels include `label`.
    pub fn xdp_packets(&self, label: &str) -> f64 {
        POPS.iter()
            .map(|pop| {
                self.xdp_metrics(pop)
                    .lines()
                    .filter(|l| l.starts_with("xdp_packets_total") && l.contains(label))
                    .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                    .sum::<f64>()
            })
            .sum()
    }

    /// `pop`'s XDP loader's `/metrics`.
    pub fn xdp_metrics(&self, pop: &str) -> String {
        let address = if pop == "pop-a" {
            POP_A_ADDR
        } else {
            POP_B_ADDR
        };
        self.run(&[
            "exec",
            pop,
            "--",
            "curl",
            "-s",
            &format!("{address}:9182/metrics"),
        ])
    }

    /// The router's BIRD has a route to the VIP from the PoP at `address` (best or not).
    pub fn router_has_path_via(&self, address: &str) -> bool {
        self.router_routes().contains(&format!("via {address}"))
    }

    /// The router's BIRD holds a path to the anycast address tagged GRACEFUL_SHUTDOWN.
    pub fn router_has_graceful_shutdown_path(&self) -> bool {
        self.router_routes().contains("(65535,0)")
    }

    /// `birdc show route VIP/32 all` at the router: every path it has, with attributes.
    fn router_routes(&self) -> String {
        self.router_birdc(&["show", "route", &format!("{VIP}/32"), "all"])
    }

    /// `birdc` at the router, with `args`.
    fn router_birdc(&self, args: &[&str]) -> String {
        let birdc = ["exec", "rtr", "--", "birdc", "-s", "/run/bird.ctl"];
        self.run(&[&birdc[..], args].concat())
    }

    /// Updates plus withdraws the router received from pop-a's session.
    pub fn route_changes_from_pop_a(&self) -> u64 {
        let text = self.router_birdc(&["show", "protocols", "all", "pop_a"]);
        let received = |label: &str| -> u64 {
            text.lines()
                .find(|l| l.trim_start().starts_with(label))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        received("Import updates:") + received("Import withdraws:")
    }
}

impl Drop for LabCli {
    fn drop(&mut self) {
        let _ = Command::new(lab_bin()).arg("down").status();
    }
}

/// A `lab send` running in the client.
pub struct Load {
    pub(crate) child: Child,
}

impl Load {
    /// Waits for the load to end and returns its outcomes.
    pub fn finish(self, lab: &LabCli) -> Vec<Outcome> {
        let outcomes = self.outcomes();
        lab.all.borrow_mut().extend(outcomes.iter().cloned());
        outcomes
    }

    /// Waits for the load to end and returns its outcomes (at least one).
    pub fn outcomes(self) -> Vec<Outcome> {
        let output = self.child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "lab send failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let outcomes: Vec<Outcome> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert!(!outcomes.is_empty());
        outcomes
    }
}

/// Runs `command`: its stdout, or its stdout and stderr when it fails.
pub(crate) fn stdout_of(command: &mut Command) -> Result<String, String> {
    let output = command.output().map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// `send` and its flags: `rate` signed webhooks a second to `url` for `duration`, ids
/// from `prefix`, over `connections` keep-alive connections (0: a new one each).
pub(crate) fn send_args(
    url: &str,
    prefix: &str,
    rate: u32,
    duration: Duration,
    connections: u32,
) -> Vec<String> {
    [
        "send".to_owned(),
        "--url".to_owned(),
        url.to_owned(),
        "--rate".to_owned(),
        rate.to_string(),
        "--duration".to_owned(),
        format!("{}ms", duration.as_millis()),
        "--id-prefix".to_owned(),
        prefix.to_owned(),
        "--connections".to_owned(),
        connections.to_string(),
    ]
    .into()
}

/// The router's next hops for the IPv4 VIP (one per announcing PoP).
pub fn router_next_hops() -> Vec<String> {
    router_next_hops_for(VIP)
}

/// The router's next hops for `vip`, IPv4 or IPv6 (one per announcing PoP): those of
/// BIRD's route, which the resilient-ECMP mirror copies when it runs.
pub fn router_next_hops_for(vip: &str) -> Vec<String> {
    let family = if vip.contains(':') { "-6" } else { "-4" };
    let output = Command::new(lab_bin())
        .args([
            "exec", "rtr", "--", "ip", family, "route", "show", vip, "proto", "bird",
        ])
        .output()
        .unwrap();
    next_hops_in(&String::from_utf8_lossy(&output.stdout))
}

/// The router's next hops for the anycast address, sampled every ~20 ms on a thread
/// until `stop`.
pub struct RouterWatch {
    watching: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<Vec<(u64, Vec<String>)>>,
}

/// At 50 webhooks/s of a few ms each, about one connection is open at any instant: at
/// most this many may be reset by one change of the router's ECMP set.
pub const MAX_REHASHED_PER_CHANGE: usize = 2;

/// How long after BIRD's route changes the kernel may still forward by the old set: the
/// mirror (a bash script woken by `ip monitor route`) runs a few `ip` commands per change,
/// tens of ms on an idle machine and hundreds under the suite's load. Two single resets
/// seen in CI just after a change's window (drain, SIGSTOP of an agent) fit this lag.
pub const FORWARDING_LAG_MS: u64 = 1000;

/// What a `RouterWatch` saw: every sample, time-stamped in Unix ms.
pub struct RouterLog {
    samples: Vec<(u64, Vec<String>)>,
}

impl RouterWatch {
    /// Starts sampling the router's next hops every 20 ms.
    pub fn start() -> RouterWatch {
        use std::sync::atomic::{AtomicBool, Ordering};
        let watching = std::sync::Arc::new(AtomicBool::new(true));
        let sampler = {
            let watching = std::sync::Arc::clone(&watching);
            std::thread::spawn(move || {
                let mut samples = Vec::new();
                // One sample after `stop`: what the caller just waited for (say two
                // paths) is then in the log even if it came between two samples.
                loop {
                    let stopping = !watching.load(Ordering::Relaxed);
                    samples.push((now_ms(), router_next_hops()));
                    if stopping {
                        break samples;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        RouterWatch { watching, sampler }
    }

    /// Stops sampling and returns what was seen.
    pub fn stop(self) -> RouterLog {
        self.watching
            .store(false, std::sync::atomic::Ordering::Relaxed);
        RouterLog {
            samples: self.sampler.join().unwrap(),
        }
    }
}

impl RouterLog {
    /// The fewest next hops any sample had.
    pub fn fewest_paths(&self) -> usize {
        self.samples
            .iter()
            .map(|(_, hops)| hops.len())
            .min()
            .unwrap_or(0)
    }

    /// When the set of next hops changed: from the last sample with the old set to the
    /// first with the new one.
    pub fn changes(&self) -> Vec<(u64, u64)> {
        self.samples
            .windows(2)
            .filter(|pair| pair[0].1 != pair[1].1)
            .map(|pair| (pair[0].0, pair[1].0))
            .collect()
    }

    /// When the first sample after `after_ms` had `hop` among the next hops.
    pub fn first_with(&self, hop: &str, after_ms: u64) -> Option<u64> {
        self.first_after(after_ms, |hops| hops.iter().any(|h| h == hop))
    }

    /// When the first sample after `after_ms` did not have `hop` among the next hops.
    pub fn first_without(&self, hop: &str, after_ms: u64) -> Option<u64> {
        self.first_after(after_ms, |hops| hops.iter().all(|h| h != hop))
    }

    fn first_after(&self, after_ms: u64, matches: impl Fn(&[String]) -> bool) -> Option<u64> {
        self.samples
            .iter()
            .find(|(at, hops)| *at > after_ms && matches(hops))
            .map(|(at, _)| *at)
    }

    /// A request that got no answer while the router's ECMP set changed under it: its
    /// packets were hashed to the other PoP mid-connection and reset there. The watch
    /// samples BIRD's route; the kernel forwards by the resilient group that
    /// `lab/rtr/resilient-ecmp.sh` mirrors from it, up to [`FORWARDING_LAG_MS`] later.
    pub fn rehashed(&self, outcome: &Outcome) -> bool {
        outcome.status.is_none()
            && self.changes().iter().any(|&(from, to)| {
                outcome.sent_ms <= to + FORWARDING_LAG_MS && from <= outcome.done_ms
            })
    }
}

/// The first few webhooks that were not acknowledged, for a message.
pub fn failures(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|o| !o.acked())
        .take(5)
        .map(|o| format!("{} {:?} {:?}", o.id, o.status, o.error))
        .collect()
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The anycast VIP.
pub const VIP: &str = "192.0.2.10";
/// The anycast VIP, IPv6.
pub const VIP6: &str = "2001:db8:a::10";

/// The lab's GitHub webhook route at `vip`.
pub fn url(vip: &str) -> String {
    if vip.contains(':') {
        format!("https://[{vip}]/hooks/github")
    } else {
        format!("https://{vip}/hooks/github")
    }
}

/// The lab's folder in this checkout.
fn lab_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `lab exec client -- lab`: the `lab` binary run in the client's namespace.
fn client_lab() -> [&'static str; 4] {
    ["exec", "client", "--", lab_bin()]
}

/// The `lab` binary.
pub fn lab_bin() -> &'static str {
    crate::built_binary("lab")
}

/// The origin's NATS servers: lab services named as the servers name themselves.
pub const ORIGIN_SERVERS: [&str; 3] = ["nats-1", "nats-2", "nats-3"];

/// The PoPs' addresses on their links to the router (the router's next hops).
pub const POP_A_ADDR: &str = "10.0.1.2";
/// The lab's PoPs.
pub const POPS: [&str; 2] = ["pop-a", "pop-b"];
/// PoP b's address on its link to the router.
pub const POP_B_ADDR: &str = "10.0.2.2";
