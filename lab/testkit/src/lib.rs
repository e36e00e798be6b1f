//! What the tests and benchmarks of every crate share, in one place: the `edge` binary
//! run on loopback with a certificate and signed webhooks (`edge`), the agent's BIRD
//! and ExaBGP namespaces (`bgp`), the XDP filter's veth pair and crafted packets (`xdp`,
//! `packets`), and the `lab` binary driven as a user would, on the small topology (`e2e`)
//! and on the fleet (`fleet`).

#![allow(
    clippy::unwrap_used,
    reason = "test support: a failed step stops its test at the line"
)]
#![allow(
    clippy::expect_used,
    reason = "test fixtures: a failed one stops the test where it says"
)]

pub mod bgp;
pub mod e2e;
pub mod edge;
pub mod fleet;
pub mod packets;
pub mod xdp;

/// What the product crates' tests use of the lab runner, so that they depend on the
/// testkit alone.
pub use lab::{netns, origin, readme, require_root};

use std::path::PathBuf;

/// A binary of the workspace, as cargo built it for the running test or benchmark:
/// next to the test's own executable (`target/release/deps/…` → `target/release/`).
/// A `&'static str`, as `env!("CARGO_BIN_EXE_…")` was (a few bytes kept per call).
pub fn built_binary(name: &str) -> &'static str {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let binary = dir.join(name);
    assert!(
        binary.exists(),
        "{} is not built: run the tests through cargo",
        binary.display()
    );
    let binary = binary.to_string_lossy().into_owned();
    Box::leak(binary.into_boxed_str())
}
