//! `edge backhaul pause|resume|status`: hold deliveries to the origin (an origin deploy,
//! a backlog to let in slowly) without stopping the PoP from taking webhooks.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use edge_kit::clock::unix_ms;

use super::print_json;
use crate::spool::backhaul_pause::{self, BackhaulPause};

/// What to do with the backhaul.
#[derive(clap::Subcommand)]
pub enum Action {
    /// Hold deliveries: the edge running on this spool stops starting them within a
    /// second (those in flight finish) and keeps storing and acknowledging webhooks; the
    /// pause outlives restarts.
    Pause {
        /// The spool directory (`spool.dir`).
        #[arg(long)]
        dir: PathBuf,
        /// End the pause by itself after this long (e.g. `10m`); without it, it lasts
        /// until `resume`.
        #[arg(long = "for", value_parser = humantime_serde::re::humantime::parse_duration)]
        lasting: Option<Duration>,
        /// Why, for the log and `status`.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Deliver again (within a second).
    Resume {
        /// The spool directory (`spool.dir`).
        #[arg(long)]
        dir: PathBuf,
    },
    /// Whether a pause holds, since when, until when and why, as a JSON line.
    Status {
        /// The spool directory (`spool.dir`).
        #[arg(long)]
        dir: PathBuf,
    },
}

/// Runs `action`.
pub fn run(action: Action) -> anyhow::Result<ExitCode> {
    match action {
        Action::Pause {
            dir,
            lasting,
            reason,
        } => {
            let since_ms = unix_ms();
            let pause = BackhaulPause {
                since_ms,
                until_ms: lasting.map(|d| since_ms + d.as_millis() as u64),
                reason,
            };
            backhaul_pause::set(&dir, &pause).with_context(|| dir.display().to_string())?;
            print_status(&dir)
        }
        Action::Resume { dir } => {
            backhaul_pause::clear(&dir).with_context(|| dir.display().to_string())?;
            print_status(&dir)
        }
        Action::Status { dir } => print_status(&dir),
    }
}

fn print_status(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    let pause = backhaul_pause::read(dir).with_context(|| dir.display().to_string())?;
    let running = crate::spool::in_use(dir).with_context(|| dir.display().to_string())?;
    let mut line = serde_json::json!({
        "paused": pause.as_ref().is_some_and(|p| p.holds(unix_ms())),
        "edge_running": running,
    });
    if let Some(pause) = pause {
        line["since_ms"] = pause.since_ms.into();
        line["until_ms"] = pause.until_ms.into();
        line["reason"] = pause.reason.into();
    }
    print_json(&line)?;
    Ok(ExitCode::SUCCESS)
}
