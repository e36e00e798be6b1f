//! The fleet topology (`lab/fleet.clab.yml`) driven through the `lab` binary, as
//! [`crate::e2e`] drives the small one: up for the value's lifetime, its regions'
//! routers, senders and the origin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab::origin::Arrival;
use lab::prometheus::{self, Alert};
use lab::runner::next_hops_in;
use lab::sender::Outcome;

use crate::e2e::{Load, ORIGIN_SERVERS, VIP, lab_bin, send_args, stdout_of, url};

/// One region of the fleet.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    /// `eu`, `us` or `ap`.
    pub name: &'static str,
    /// Its PoPs' addresses on their links to the region's router.
    pub pops: &'static [&'static str],
}

impl Region {
    /// The region's router node.
    pub fn router(&self) -> String {
        format!("rtr-{}", self.name)
    }

    /// The region's sender node.
    pub fn client(&self) -> String {
        format!("client-{}", self.name)
    }

    /// Its PoPs' nodes with their link addresses (`pop-eu1`, `10.11.1.2`), in order.
    pub fn pop_nodes(&self) -> Vec<(String, &'static str)> {
        (1..)
            .zip(self.pops)
            .map(|(n, address)| (format!("pop-{}{n}", self.name), *address))
            .collect()
    }
}

/// The fleet, up from [`Fleet::up`] until dropped (then `lab down`).
pub struct Fleet {
    /// How long `lab up` took.
    pub up_took: Duration,
}

impl Fleet {
    /// `lab --topology lab/fleet.clab.yml up`: every node, service and BGP session.
    pub fn up() -> Fleet {
        let started = Instant::now();
        run(&["up"]).unwrap_or_else(|e| panic!("fleet up: {e}"));
        Fleet {
            up_took: started.elapsed(),
        }
    }

    /// `lab ARGS` on the fleet: its stdout, or its output when it fails.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        run(args)
    }

    /// The anycast VIP's next hops at `router` now.
    pub fn next_hops(&self, router: &str) -> Vec<String> {
        let routes = self
            .run(&["exec", router, "--", "ip", "-4", "route", "show", VIP])
            .unwrap_or_default();
        next_hops_in(&routes)
    }

    /// How many PoPs announce the VIP now: the paths the region routers' BIRD holds
    /// from their PoPs, best or not (a degraded PoP's longer path may lose to another
    /// region's, yet it is announced).
    pub fn announcing_pops(&self) -> usize {
        REGIONS
            .iter()
            .map(|region| {
                let paths = self
                    .run(&[
                        "exec",
                        &region.router(),
                        "--",
                        "birdc",
                        "-s",
                        "/run/bird.ctl",
                        "show",
                        "route",
                        &format!("{VIP}/32"),
                    ])
                    .unwrap_or_default();
                paths.matches("unicast [pop_").count()
            })
            .sum()
    }

    /// Waits until `router`'s next hops for the VIP are exactly `hops` (any order);
    /// returns how long that took, or what it had at the timeout.
    pub fn wait_next_hops(
        &self,
        router: &str,
        hops: &[&str],
        timeout: Duration,
    ) -> Result<Duration, Vec<String>> {
        let mut want: Vec<&str> = hops.to_vec();
        want.sort_unstable();
        self.wait_until_next_hops(router, timeout, |now| {
            let mut now: Vec<&str> = now.iter().map(String::as_str).collect();
            now.sort_unstable();
            now == want
        })
    }

    /// Waits until `router` has next hops for the VIP and none is one of `hops`;
    /// returns how long that took, or what it had at the timeout.
    pub fn wait_next_hops_without(
        &self,
        router: &str,
        hops: &[&str],
        timeout: Duration,
    ) -> Result<Duration, Vec<String>> {
        self.wait_until_next_hops(router, timeout, |now| {
            !now.is_empty() && now.iter().all(|hop| !hops.contains(&hop.as_str()))
        })
    }

    /// Round-trip times in ms of `count` pings from `node` to `address`, sorted.
    pub fn ping_ms(&self, node: &str, address: &str, count: u32) -> Vec<f64> {
        let count = count.to_string();
        let out = self
            .run(&[
                "exec", node, "--", "ping", "-n", "-c", &count, "-i", "0.2", address,
            ])
            .unwrap_or_else(|e| panic!("ping {address} from {node}: {e}"));
        let mut times: Vec<f64> = out
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("time=")?.parse().ok())
            .collect();
        times.sort_by(f64::total_cmp);
        times
    }

    /// Signed webhooks from `client` to the VIP at `rate` per second for `duration`.
    pub fn send(&self, client: &str, prefix: &str, rate: u32, duration: Duration) -> Vec<Outcome> {
        self.load(client, prefix, rate, duration).outcomes()
    }

    /// Starts `client`'s sender in the background (see [`Fleet::send`]), a new
    /// connection for each webhook.
    pub fn load(&self, client: &str, prefix: &str, rate: u32, duration: Duration) -> Load {
        self.sender(client, prefix, rate, duration, 0)
    }

    /// Starts `client`'s sender in the background over `connections` keep-alive
    /// connections: a steady load whose cost is the webhooks, not TLS handshakes.
    pub fn load_kept_alive(
        &self,
        client: &str,
        prefix: &str,
        rate: u32,
        connections: u32,
        duration: Duration,
    ) -> Load {
        self.sender(client, prefix, rate, duration, connections)
    }

    /// Stops every server of the origin's NATS cluster.
    pub fn stop_origin(&self) {
        for server in ORIGIN_SERVERS {
            self.run(&["stop", "origin", server])
                .unwrap_or_else(|e| panic!("stop the origin's {server}: {e}"));
        }
    }

    /// Starts the origin's servers again.
    pub fn start_origin(&self) {
        for server in ORIGIN_SERVERS {
            self.run(&["start", "origin", server])
                .unwrap_or_else(|e| panic!("start the origin's {server}: {e}"));
        }
    }

    /// A PromQL instant query at the fleet's Prometheus whose result is a vector: each
    /// series' `label` with its value.
    pub fn query_by(&self, expr: &str, label: &str) -> BTreeMap<String, f64> {
        prometheus::values_by(&self.query(expr), label)
    }

    /// A PromQL range-vector query (`metric[5m]`) at the fleet's Prometheus: each series'
    /// `label` with its samples as (unix seconds, value), oldest first.
    pub fn samples_by(&self, expr: &str, label: &str) -> BTreeMap<String, Vec<(f64, f64)>> {
        prometheus::samples_by(&self.query(expr), label)
    }

    /// The fleet Prometheus's alerts, pending and firing.
    pub fn alerts(&self) -> Vec<Alert> {
        self.run(&["alerts"])
            .unwrap_or_else(|e| panic!("fleet alerts: {e}"))
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
            .collect()
    }

    /// What the agent of the PoP `node` (at `address`) says on `/status`.
    pub fn agent_status(&self, node: &str, address: &str) -> serde_json::Value {
        let url = format!("http://{address}:9181/status");
        let body = self
            .run(&["exec", node, "--", "curl", "-s", "-m", "2", &url])
            .unwrap_or_else(|e| panic!("{node}: {url}: {e}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{node}: {body}: {e}"))
    }

    /// Every event at the origin, read as its administrator from `node`.
    pub fn origin(&self, node: &str) -> Result<Vec<Arrival>, String> {
        let lines = self.run(&["exec", node, "--", lab_bin(), "origin"])?;
        lines
            .lines()
            .map(|line| serde_json::from_str(line).map_err(|e| e.to_string()))
            .collect()
    }

    fn sender(
        &self,
        client: &str,
        prefix: &str,
        rate: u32,
        duration: Duration,
        connections: u32,
    ) -> Load {
        let child = command()
            .args(["exec", client, "--", lab_bin()])
            .args(send_args(&url(VIP), prefix, rate, duration, connections))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("lab: {e}"));
        Load { child }
    }

    fn query(&self, expr: &str) -> serde_json::Value {
        let data = self
            .run(&["query", expr])
            .unwrap_or_else(|e| panic!("fleet query {expr}: {e}"));
        serde_json::from_str(&data).unwrap_or_else(|e| panic!("{expr}: {data}: {e}"))
    }

    fn wait_until_next_hops(
        &self,
        router: &str,
        timeout: Duration,
        done: impl Fn(&[String]) -> bool,
    ) -> Result<Duration, Vec<String>> {
        let started = Instant::now();
        loop {
            let now = self.next_hops(router);
            if done(&now) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                return Err(now);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = run(&["down"]);
    }
}

/// Where a fleet scenario's timeline goes: `target/lab/NAME.png` (made if missing).
pub fn timeline_path(name: &str) -> PathBuf {
    let release = Path::new(crate::built_binary("lab"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let dir = release.parent().unwrap_or(&release).join("lab");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir.join(format!("{name}.png"))
}

/// Webhooks acknowledged each second by each PoP, and those that failed (as `failed`),
/// from a load's outcomes: (unix second, count), a zero for each second without one.
pub fn answered_per_second(outcomes: &[Outcome]) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut counts: BTreeMap<String, BTreeMap<u64, u32>> = BTreeMap::new();
    for outcome in outcomes {
        let series = match (&outcome.pop, outcome.acked()) {
            (Some(pop), true) => pop.clone(),
            _ => "failed".to_owned(),
        };
        *counts
            .entry(series)
            .or_default()
            .entry(outcome.done_ms / 1000)
            .or_default() += 1;
    }
    let seconds = outcomes.iter().map(|o| o.done_ms / 1000);
    let (Some(first), Some(last)) = (seconds.clone().min(), seconds.max()) else {
        return BTreeMap::new();
    };
    counts
        .into_iter()
        .map(|(series, per_second)| {
            let samples = (first..=last)
                .map(|s| {
                    (
                        s as f64,
                        f64::from(per_second.get(&s).copied().unwrap_or(0)),
                    )
                })
                .collect();
            (series, samples)
        })
        .collect()
}

/// `lab --topology <fleet> ARGS`.
fn run(args: &[&str]) -> Result<String, String> {
    stdout_of(command().args(args))
}

/// `lab --topology <fleet>`, for arguments to be added.
fn command() -> Command {
    let topology = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fleet.clab.yml");
    let mut command = Command::new(lab_bin());
    command.arg("--topology").arg(topology);
    command
}

/// The fleet's regions: each one's name and its PoPs' link addresses.
pub const REGIONS: [Region; 3] = [
    Region {
        name: "eu",
        pops: &["10.11.1.2", "10.11.2.2", "10.11.3.2"],
    },
    Region {
        name: "us",
        pops: &["10.12.1.2", "10.12.2.2", "10.12.3.2"],
    },
    Region {
        name: "ap",
        pops: &["10.13.1.2", "10.13.2.2"],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(pop: Option<&str>, status: Option<u16>, done_ms: u64) -> Outcome {
        Outcome {
            id: String::new(),
            sent_ms: done_ms,
            done_ms,
            status,
            pop: pop.map(str::to_owned),
            error: None,
        }
    }

    #[test]
    fn answers_are_counted_per_pop_and_second_with_the_failures_apart() {
        let outcomes = [
            outcome(Some("pop-ap1"), Some(202), 10_100),
            outcome(Some("pop-ap1"), Some(202), 10_900),
            outcome(None, None, 11_500),
            outcome(Some("pop-eu1"), Some(202), 12_000),
            outcome(Some("pop-eu1"), Some(503), 12_300),
        ];
        let per_second = answered_per_second(&outcomes);
        assert_eq!(
            per_second["pop-ap1"],
            [(10.0, 2.0), (11.0, 0.0), (12.0, 0.0)]
        );
        assert_eq!(
            per_second["pop-eu1"],
            [(10.0, 0.0), (11.0, 0.0), (12.0, 1.0)]
        );
        assert_eq!(
            per_second["failed"],
            [(10.0, 0.0), (11.0, 1.0), (12.0, 1.0)]
        );
        assert!(answered_per_second(&[]).is_empty());
    }
}
