//! `edge dead-letter list|show|retry|purge`: the events the origin refused for good.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use super::{print_json, record_json};
use crate::spool::dead_letters::{self, DeadLetter, Selection};

/// What to do with the dead letters.
#[derive(clap::Subcommand)]
pub enum Action {
    /// One JSON line per dead letter: its event, when it was kept, whether it is queued
    /// for retry (bodies are left out; see `show`).
    List(Target),
    /// Each selected dead letter with its headers and body.
    Show(Target),
    /// Queue the selected dead letters for delivery again, under their original ids (the
    /// origin still drops what it already has). The edge running on this spool stores
    /// them in the spool again within a second; with none running, at its next start.
    Retry(Target),
    /// Delete the selected dead letters: their events are given up.
    Purge(Target),
}

/// Which spool and which of its dead letters.
#[derive(clap::Args)]
pub struct Target {
    /// The spool directory (`spool.dir`).
    #[arg(long)]
    dir: PathBuf,
    /// Only these sequence numbers (as `list` shows them).
    seqs: Vec<u64>,
    /// Only those of this route.
    #[arg(long)]
    route: Option<String>,
    /// Every dead letter (what `retry` and `purge` need when no number is given).
    #[arg(long, conflicts_with = "seqs")]
    all: bool,
}

/// Runs `action`. Exit 1 when nothing was selected or a letter could not be acted on.
pub fn run(action: Action) -> anyhow::Result<ExitCode> {
    match action {
        Action::List(target) => {
            for letter in selected(&target)? {
                print_json(&letter_json(&letter, false))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Show(target) => {
            let letters = selected(&target)?;
            for letter in &letters {
                print_json(&letter_json(letter, true))?;
            }
            Ok(found_any(letters.len()))
        }
        Action::Retry(target) => act_on(&target, "queued for retry", |letter| {
            dead_letters::queue_retry(&target.dir, letter)
        }),
        Action::Purge(target) => act_on(&target, "purged", dead_letters::purge),
    }
}

/// The dead letters `target` selects.
fn selected(target: &Target) -> anyhow::Result<Vec<DeadLetter>> {
    let selection = Selection {
        seqs: (!target.seqs.is_empty())
            .then(|| target.seqs.iter().copied().collect::<BTreeSet<_>>()),
        route: target.route.clone(),
    };
    let mut letters = dead_letters::list(&target.dir)
        .with_context(|| format!("{}: dead letters", target.dir.display()))?;
    letters.retain(|letter| selection.selects(letter));
    Ok(letters)
}

/// Applies `act` to each selected letter; a JSON line for each, a summary on stderr.
fn act_on(
    target: &Target,
    done: &str,
    act: impl Fn(&DeadLetter) -> std::io::Result<()>,
) -> anyhow::Result<ExitCode> {
    if target.seqs.is_empty() && target.route.is_none() && !target.all {
        anyhow::bail!("name the dead letters (sequence numbers, --route) or pass --all");
    }
    let letters = selected(target)?;
    let mut failed = 0;
    for letter in &letters {
        let line = match act(letter) {
            Ok(()) => serde_json::json!({ "seq": letter.seq, "done": done }),
            Err(e) => {
                failed += 1;
                serde_json::json!({ "seq": letter.seq, "failed": e.to_string() })
            }
        };
        print_json(&line)?;
    }
    let acted = letters.len() - failed;
    eprintln!("{acted} dead letters {done}, {failed} failed");
    if done == "queued for retry" && acted > 0 {
        let running = crate::spool::in_use(&target.dir).unwrap_or(false);
        eprintln!(
            "{}",
            if running {
                "the edge running on this spool stores them again within a second"
            } else {
                "no edge runs on this spool now: they are stored again when it starts"
            }
        );
    }
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        found_any(letters.len())
    })
}

fn found_any(count: usize) -> ExitCode {
    if count == 0 {
        eprintln!("no dead letter matches");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn letter_json(letter: &DeadLetter, contents: bool) -> serde_json::Value {
    let mut line = match &letter.record {
        Ok(record) => record_json(record, contents),
        Err(why) => serde_json::json!({ "seq": letter.seq, "damaged": why }),
    };
    line["file"] = letter.path.display().to_string().into();
    line["stored_ms"] = letter.stored_ms.into();
    line["queued_for_retry"] = letter.queued_for_retry.into();
    line
}
