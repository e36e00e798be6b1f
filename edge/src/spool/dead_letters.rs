//! Events the origin refused for good are kept, not dropped: one file per event under
//! `<spool.dir>/dead-letter/`, in the spool's record format, written durably. Once the
//! cause is fixed an operator queues them for retry (`edge dead-letter retry`): the file
//! moves to `dead-letter/retry/`, and the running edge (or its next start) stores each
//! such event in the spool again, under its original id, so the origin still drops a
//! copy it already has. Only then is the file removed. The command never writes a
//! segment, so it is safe beside the writer.

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use super::append::{AppendError, NewEvent};
use super::blocking::{Stop, blocking};
use super::durable::{create_dir_durably, owned_like, remove_durably, sync_dir};
use super::record::Record;
use super::scan::{named_without_header, scan_segment};
use super::segments::new_segment_format;
use super::{Spool, quarantine};

/// A dead letter on disk.
#[derive(Debug)]
pub struct DeadLetter {
    /// The sequence number its event had in the spool (from its file's name).
    pub seq: u64,
    /// Its file.
    pub path: PathBuf,
    /// Queued by `edge dead-letter retry`, not yet stored again.
    pub queued_for_retry: bool,
    /// When the file was written (Unix milliseconds).
    pub stored_ms: u64,
    /// The event, or why the file cannot be read (with what it still names).
    pub record: Result<Record, String>,
}

/// Which dead letters a command acts on.
#[derive(Debug, Default)]
pub struct Selection {
    /// These sequence numbers only (`None`: all).
    pub seqs: Option<BTreeSet<u64>>,
    /// Those of this route only.
    pub route: Option<String>,
}

impl Selection {
    /// Whether `letter` is selected. A letter that cannot be read has no known route, so
    /// a route filter leaves it out.
    pub fn selects(&self, letter: &DeadLetter) -> bool {
        let seq_ok = self
            .seqs
            .as_ref()
            .is_none_or(|seqs| seqs.contains(&letter.seq));
        let route_ok = self.route.as_ref().is_none_or(|route| {
            letter
                .record
                .as_ref()
                .is_ok_and(|record| &record.route == route)
        });
        seq_ok && route_ok
    }
}

/// Every dead letter under `spool_dir` (queued ones too), oldest sequence number first.
pub fn list(spool_dir: &Path) -> io::Result<Vec<DeadLetter>> {
    let dir = spool_dir.join(DIR);
    let mut letters = read_dir_letters(&dir, false)?;
    letters.extend(read_dir_letters(&dir.join(RETRY_DIR), true)?);
    letters.sort_by_key(|letter| (letter.seq, letter.queued_for_retry));
    Ok(letters)
}

/// Queues `letter` for retry: its file moves to `dead-letter/retry/`, durably. A letter
/// whose file cannot be read is refused (it would be stored damaged).
pub fn queue_retry(spool_dir: &Path, letter: &DeadLetter) -> io::Result<()> {
    if let Err(why) = &letter.record {
        return Err(io::Error::new(io::ErrorKind::InvalidData, why.clone()));
    }
    if letter.queued_for_retry {
        return Ok(());
    }
    let dir = spool_dir.join(DIR);
    let queue = dir.join(RETRY_DIR);
    if !queue.is_dir() {
        create_dir_durably(&queue)?;
        owned_like(&queue, &dir)?;
    }
    let name = letter.path.file_name().unwrap_or_default();
    fs::rename(&letter.path, queue.join(name))?;
    sync_dir(&queue)?;
    sync_dir(&dir)
}

/// Deletes `letter`'s file, durably: the operator gives the event up.
pub fn purge(letter: &DeadLetter) -> io::Result<()> {
    remove_durably(&letter.path)
}

/// Stores `record` as a dead letter; returns its path and its size on disk.
pub(super) fn store(spool_dir: &Path, record: &Record) -> io::Result<(PathBuf, u64)> {
    let dir = spool_dir.join(DIR);
    create_dir_durably(&dir)?;
    let path = dir.join(file_name(record.seq));
    // A spool segment of one frame, readable by `edge spool-dump`.
    let format = new_segment_format()?;
    let mut frame = format.header();
    record
        .view()
        .encode_frame(&format, &mut frame)
        .map_err(io::Error::other)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    file.write_all(&frame)?;
    file.sync_all()?;
    sync_dir(&dir)?;
    Ok((path, frame.len() as u64))
}

/// One pass over `dead-letter/retry/`: each event stored again (then its file removed),
/// each unreadable file moved to quarantine. An event the spool has no room for stays
/// queued for the next pass.
pub(super) async fn resend_once(spool: &Arc<Spool>) -> Result<(), Stop> {
    let queue = spool.shared.dir.join(DIR).join(RETRY_DIR);
    let letters = blocking(move || read_dir_letters(&queue, true)).await?;
    if letters.is_empty() {
        return Ok(());
    }
    let outcome = resend_letters(spool, letters).await;
    // Once per pass, not per letter: a big retry would read the directories n times.
    let shared = Arc::clone(&spool.shared);
    blocking(move || {
        shared.kept.remeasure(&shared.dir);
        Ok(())
    })
    .await?;
    outcome
}

async fn resend_letters(spool: &Arc<Spool>, letters: Vec<DeadLetter>) -> Result<(), Stop> {
    for DeadLetter { path, record, .. } in letters {
        let record = match record {
            Ok(record) => record,
            Err(why) => {
                let why = format!("a dead letter queued for retry cannot be read: {why}");
                tracing::error!(path = %path.display(), why = %why, "dead letter moved to quarantine");
                let dir = spool.shared.dir.clone();
                blocking(move || quarantine::move_in(&dir, &path, &why)).await?;
                continue;
            }
        };
        let (seq, event_id, route) = (record.seq, record.event_id.clone(), record.route.clone());
        match spool.append(NewEvent::again(record)).await {
            Ok(appended) => {
                blocking(move || remove_durably(&path)).await?;
                spool.metrics.dead_letters_resent.inc();
                tracing::info!(dead_letter_seq = seq, event_id = %event_id, route = %route, appended = ?appended, "dead letter stored again for delivery");
            }
            Err(AppendError::Closed) => return Err(Stop::Closed),
            Err(e) => {
                tracing::warn!(dead_letter_seq = seq, error = %e, "a dead letter queued for retry waits: the spool refused it");
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The dead letters directly in `dir` (none when it does not exist).
fn read_dir_letters(dir: &Path, queued_for_retry: bool) -> io::Result<Vec<DeadLetter>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut letters = Vec::new();
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let Some(seq) = seq_of(&path) else {
            continue;
        };
        let stored_ms = entry
            .metadata()?
            .modified()?
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        let record = read_record(&fs::read(&path)?);
        letters.push(DeadLetter {
            seq,
            path,
            queued_for_retry,
            stored_ms,
            record,
        });
    }
    Ok(letters)
}

/// The one record a dead letter's bytes hold, or why not.
fn read_record(bytes: &[u8]) -> Result<Record, String> {
    let scan = scan_segment(bytes);
    if let Err(e) = &scan.format {
        return Err(format!(
            "unreadable header ({e}); names {:?}",
            named_without_header(bytes)
        ));
    }
    match (
        scan.records.first(),
        scan.damaged.first().or(scan.tail.as_ref()),
    ) {
        (Some(scanned), None) => Ok(scanned.record.to_owned_record()),
        (_, Some(damage)) => Err(format!("{}; names {:?}", damage.error, damage.named)),
        (None, None) => Err("empty".to_owned()),
    }
}

fn file_name(seq: u64) -> String {
    format!("{seq:020}.rec")
}

fn seq_of(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(".rec")?
        .parse()
        .ok()
}

/// Where events the origin refused for good are kept, under the spool directory.
pub(crate) const DIR: &str = "dead-letter";
/// Where `edge dead-letter retry` queues them, under [`DIR`].
pub(crate) const RETRY_DIR: &str = "retry";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::record::tests::sample;

    #[test]
    fn letters_are_listed_selected_queued_and_purged() {
        let dir = tempfile::tempdir().unwrap();
        let mut other_route = sample(9, "evt-9");
        other_route.route = "stripe".into();
        for record in [sample(3, "evt-3"), sample(5, "evt-5"), other_route] {
            store(dir.path(), &record).unwrap();
        }
        let letters = list(dir.path()).unwrap();
        assert_eq!(seqs(&letters), [3, 5, 9]);
        assert_eq!(letters[1].record.as_ref().unwrap(), &sample(5, "evt-5"));

        let by_route = Selection {
            route: Some("stripe".into()),
            ..Selection::default()
        };
        let by_seq = Selection {
            seqs: Some(BTreeSet::from([3, 9])),
            ..Selection::default()
        };
        let selected = |selection: &Selection| {
            let letters = list(dir.path()).unwrap();
            seqs(
                &letters
                    .into_iter()
                    .filter(|l| selection.selects(l))
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(selected(&by_route), [9]);
        assert_eq!(selected(&by_seq), [3, 9]);
        assert_eq!(selected(&Selection::default()), [3, 5, 9]);

        queue_retry(dir.path(), &letters[0]).unwrap();
        assert!(
            dir.path()
                .join(DIR)
                .join(RETRY_DIR)
                .join(file_name(3))
                .exists()
        );
        let letters = list(dir.path()).unwrap();
        assert!(letters[0].queued_for_retry && !letters[1].queued_for_retry);
        queue_retry(dir.path(), &letters[0]).unwrap();

        purge(&letters[1]).unwrap();
        purge(&letters[1]).unwrap();
        assert_eq!(seqs(&list(dir.path()).unwrap()), [3, 9]);
    }

    #[test]
    fn a_damaged_letter_is_listed_with_what_it_names_and_never_queued() {
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = store(dir.path(), &sample(7, "evt-7")).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        bytes[len as usize - 1] ^= 0x40;
        fs::write(&path, bytes).unwrap();
        let letters = list(dir.path()).unwrap();
        let why = letters[0].record.as_ref().unwrap_err();
        assert!(why.contains("evt-7"), "{why}");
        let refused = queue_retry(dir.path(), &letters[0]).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidData);
        assert!(path.exists(), "still where it was");
    }

    fn seqs(letters: &[DeadLetter]) -> Vec<u64> {
        letters.iter().map(|letter| letter.seq).collect()
    }
}
