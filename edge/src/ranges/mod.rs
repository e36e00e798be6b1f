//! Providers' published egress ranges, kept current: `edge ranges update` fetches each
//! configured source, checks it ([`edge_kit::ranges`]), and replaces the stored copy only with a
//! good list, durably; a failed fetch keeps the last good one and says how old it is.
//! The running edge re-reads the stored lists ([`trusted`]) and trusts their addresses
//! as it trusts `connections.trusted`.

mod fetch;
mod metrics;
pub(crate) mod trusted;

use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

pub use edge_kit::ranges::{ListError, RangeList};
pub use metrics::RangesMetrics;

use crate::config::{RangeSource, RangesSettings};
use crate::spool::durable::{create_dir_durably, replace_durably};

/// What `edge ranges update` did with one source.
#[derive(Debug)]
pub enum Outcome {
    /// A good list was fetched and stored (possibly the same nets, fetched anew).
    Stored {
        /// The source's name.
        source: String,
        /// Entries in the list, aggregated.
        entries: usize,
        /// Nets the stored list lacked.
        added: usize,
        /// Nets the stored list had and this one lacks.
        removed: usize,
    },
    /// Nothing stored: the last good list (if any) stays.
    Kept {
        /// The source's name.
        source: String,
        /// Why the fetch or the list was refused.
        error: String,
        /// How old the list still in use is; `None` when there is none.
        last_good_age: Option<Duration>,
    },
}

impl Outcome {
    /// One JSON line for the operator or the timer's journal.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Outcome::Stored {
                source,
                entries,
                added,
                removed,
            } => serde_json::json!({
                "source": source, "outcome": "stored",
                "entries": entries, "added": added, "removed": removed,
            }),
            Outcome::Kept {
                source,
                error,
                last_good_age,
            } => serde_json::json!({
                "source": source, "outcome": "kept_last_good", "error": error,
                "last_good_age_seconds": last_good_age.map(|age| age.as_secs()),
            }),
        }
    }

    /// Whether the source failed to give a good list.
    pub fn failed(&self) -> bool {
        matches!(self, Outcome::Kept { .. })
    }
}

/// Fetches every source of `settings`, one after the other, and stores each good list.
pub async fn update(settings: &RangesSettings) -> io::Result<Vec<Outcome>> {
    create_dir_durably(&settings.dir)?;
    let mut outcomes = Vec::with_capacity(settings.sources.len());
    for source in &settings.sources {
        outcomes.push(update_one(settings, source).await?);
    }
    Ok(outcomes)
}

/// The stored list of `source`, if there is a readable one.
pub fn stored(settings: &RangesSettings, source: &str) -> Option<RangeList> {
    let text = std::fs::read_to_string(stored_path(settings, source)).ok()?;
    RangeList::read(&text).ok()
}

/// Where `source`'s last good list is kept.
pub fn stored_path(settings: &RangesSettings, source: &str) -> PathBuf {
    settings.dir.join(format!("{source}.txt"))
}

async fn update_one(settings: &RangesSettings, source: &RangeSource) -> io::Result<Outcome> {
    let last_good = stored(settings, &source.name);
    let fetched = fetch::fetch(&source.location).await.and_then(|body| {
        edge_kit::ranges::parse(
            &body,
            source.pointer.as_deref(),
            settings.max_entries,
            SystemTime::now(),
        )
        .map_err(|e| e.to_string())
    });
    let list = match fetched {
        Ok(list) => list,
        Err(error) => {
            return Ok(Outcome::Kept {
                source: source.name.clone(),
                error,
                last_good_age: last_good.map(|list| list.age(SystemTime::now())),
            });
        }
    };
    let origin = match &source.pointer {
        Some(pointer) => format!("{} {pointer}", source.location.describe()),
        None => source.location.describe(),
    };
    let name = format!("{}.txt", source.name);
    let temp = format!(".{}.txt.tmp", source.name);
    replace_durably(&settings.dir, &name, &temp, list.render(&origin).as_bytes())?;
    let (added, removed) = last_good.map_or((list.nets.len(), 0), |old| list.changes_from(&old));
    Ok(Outcome::Stored {
        source: source.name.clone(),
        entries: list.nets.len(),
        added,
        removed,
    })
}
