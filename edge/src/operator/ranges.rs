//! `edge ranges update`: fetch every provider list of `ranges.sources`, store each good
//! one and keep the last good one where a fetch fails; what the systemd timer runs. The
//! running edge picks the new lists up by itself (`ranges.reload_every`).

use std::path::PathBuf;
use std::process::ExitCode;

use super::print_json;

/// What to do with the provider lists.
#[derive(clap::Subcommand)]
pub enum Action {
    /// Fetch and store every source's list: a JSON line per source on stdout; exit 1
    /// when any source kept its last good list (or had none).
    Update {
        /// The edge's config file (its `ranges` section).
        #[arg(long, short)]
        config: PathBuf,
    },
}

/// Runs `action` on `runtime`.
pub fn run(action: Action, runtime: &tokio::runtime::Runtime) -> anyhow::Result<ExitCode> {
    match action {
        Action::Update { config } => {
            let settings = crate::config::load(&config)?;
            let outcomes = runtime.block_on(crate::ranges::update(&settings.ranges))?;
            for outcome in &outcomes {
                print_json(&outcome.to_json())?;
            }
            let failed = outcomes.iter().filter(|o| o.failed()).count();
            eprintln!(
                "{} of {} provider lists stored, {failed} kept the last good one",
                outcomes.len() - failed,
                outcomes.len()
            );
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
