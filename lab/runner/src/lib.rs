//! The lab: `topology` reads the containerlab file, `netns` and `runner` build it from
//! network namespaces and run its services, `machine` boots Debian PoP machines into
//! it, `sender` is the client's webhook load, `origin` reads what reached the origin
//! queue, `prometheus` what the lab's Prometheus sees and `dashboard` the fleet's Grafana
//! dashboard as queries; `regions` is `lab status` of a fleet, region by region;
//! `timeline` draws a scenario as a PNG; `readme` hands the README's example configs to
//! the tests; `wan` is a long-haul link with delay and loss; `h2_load` is the
//! benchmarks' HTTP/2 load.

pub mod dashboard;
pub mod h2_load;
pub mod machine;
pub mod netns;
pub mod origin;
pub mod prometheus;
pub mod readme;
pub mod regions;
pub mod runner;
pub mod sender;
pub mod timeline;
pub mod topology;
pub mod wan;

use std::io::Write;
use std::path::PathBuf;

/// The workspace's release directory: where this binary and its siblings live.
pub fn bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target/release"))
}

/// `lab/topology.clab.yml` of the workspace this binary was built in.
pub fn default_topology() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../topology.clab.yml")
}

/// Whether a root-only test can run here: true as root. Without root it is false,
/// except in CI (which runs as root), where a missing root fails the test at once.
pub fn has_root(test: &str, why: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root ({why}), and CI runs as root"
    );
    false
}

/// Says on stderr that `test` was skipped for want of root. libtest counts a test that
/// returns as passed; `lab/test.sh` counts these lines as skipped instead.
pub fn report_root_skip(test: &str, why: &str) {
    // Straight to stderr (the test harness captures eprintln! of a passing test), in one
    // write so that tests skipped in parallel do not interleave their lines.
    let line = format!("skipped {test}: needs root ({why})\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Returns from the test at once, reported as skipped, when it cannot run without root
/// (see [`has_root`]); `why` names what needs root.
#[macro_export]
macro_rules! require_root {
    ($why:expr) => {
        let test = std::thread::current()
            .name()
            .unwrap_or("this test")
            .to_owned();
        if !$crate::has_root(&test, $why) {
            $crate::report_root_skip(&test, $why);
            return;
        }
    };
}

/// Where `lab up` keeps per-node directories, pidfiles and logs.
pub const DEFAULT_STATE_DIR: &str = "/run/webhook-lab";
/// The lab origin's NATS servers, comma-separated.
pub const ORIGIN_SERVERS: &str = "nats://10.0.3.2:4222,nats://10.0.3.3:4222,nats://10.0.3.4:4222";
