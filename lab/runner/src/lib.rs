//! The lab: `topology` reads the containerlab file, `netns` and `runner` build it from
//! network namespaces and run its services, `machine` boots Debian PoP machines into
//! it, `sender` is the client's webhook load and `origin` reads what reached the origin
//! queue.

pub mod machine;
pub mod netns;
pub mod origin;
pub mod runner;
pub mod sender;
pub mod topology;

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

pub const DEFAULT_STATE_DIR: &str = "/run/webhook-lab";
