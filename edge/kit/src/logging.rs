//! Logs go to stderr (stdout is the ExaBGP API for the agent, and data for the CLIs),
//! filtered by `RUST_LOG` (default `info`), coloured only on a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber; call once, first thing in `main`.
pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
