//! The fleet topology (`lab/fleet.clab.yml`) driven through the `lab` binary, as
//! [`crate::e2e`] drives the small one: up for the value's lifetime, its regions'
//! routers, senders and the origin.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab::origin::Arrival;
use lab::prometheus::Alert;
use lab::runner::next_hops_in;
use lab::sender::Outcome;

use crate::e2e::{Load, VIP, lab_bin, send_args, stdout_of, url};

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

    /// Starts `client`'s sender in the background (see [`Fleet::send`]).
    pub fn load(&self, client: &str, prefix: &str, rate: u32, duration: Duration) -> Load {
        let child = command()
            .args(["exec", client, "--", lab_bin()])
            .args(send_args(&url(VIP), prefix, rate, duration, 0))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("lab: {e}"));
        Load { child }
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
