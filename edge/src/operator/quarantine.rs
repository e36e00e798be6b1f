//! `edge quarantine list|show|export`: what the spool kept but will not deliver from.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::{print_json, record_json};
use crate::spool::quarantine::{self, Contents};

/// What to look at.
#[derive(clap::Subcommand)]
pub enum Action {
    /// One JSON line per kept file: why it is there, its size, how many whole records it
    /// still holds and how many more its damaged frames name.
    List {
        /// The spool directory (`spool.dir`).
        #[arg(long)]
        dir: PathBuf,
    },
    /// What one kept file holds: a JSON line per whole record, then one per record its
    /// damaged frames still name (unchecked, no body).
    Show {
        /// The spool directory (`spool.dir`).
        #[arg(long)]
        dir: PathBuf,
        /// The file's name, as `list` shows it.
        name: String,
        /// Include each whole record's headers and body.
        #[arg(long)]
        bodies: bool,
    },
    /// Every whole record in quarantine, with headers and body, as JSON lines (each
    /// with the file it came from): what can still be sent again by other means.
    Export {
        /// The spool directory (`spool.dir`).
        #[arg(long)]
        dir: PathBuf,
    },
}

/// Runs `action`.
pub fn run(action: Action) -> anyhow::Result<ExitCode> {
    match action {
        Action::List { dir } => {
            for (path, why) in listed(&dir)? {
                let contents = read(&path)?;
                print_json(&serde_json::json!({
                    "file": file_name(&path),
                    "why": why,
                    "bytes": std::fs::metadata(&path)?.len(),
                    "whole_records": contents.records.len(),
                    "named": contents.named.len(),
                    "unreadable": contents.unreadable,
                }))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Show { dir, name, bodies } => {
            let Some((path, _)) = listed(&dir)?
                .into_iter()
                .find(|(path, _)| file_name(path) == name)
            else {
                anyhow::bail!("{}: no file {name} in quarantine", dir.display());
            };
            let contents = read(&path)?;
            for record in &contents.records {
                print_json(&record_json(record, bodies))?;
            }
            for (seq, event_id) in &contents.named {
                print_json(
                    &serde_json::json!({ "seq": seq, "event_id": event_id, "whole": false }),
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Export { dir } => {
            let mut exported = 0;
            for (path, _) in listed(&dir)? {
                for record in read(&path)?.records {
                    let mut line = record_json(&record, true);
                    line["file"] = file_name(&path).into();
                    print_json(&line)?;
                    exported += 1;
                }
            }
            eprintln!("{exported} whole records exported");
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn listed(dir: &Path) -> anyhow::Result<Vec<(PathBuf, String)>> {
    quarantine::list(dir).with_context(|| format!("{}: quarantine", dir.display()))
}

fn read(path: &Path) -> anyhow::Result<Contents> {
    quarantine::contents(path).with_context(|| path.display().to_string())
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
