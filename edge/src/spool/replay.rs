//! Replay: delivered events sent to the origin again, because it lost or mishandled a
//! time range. `edge replay` reads the delivered records (segments kept under
//! `spool.retain_delivered`, and the delivered part of the live ones), picks those a
//! [`ReplayFilter`] selects, and writes them durably to `<spool.dir>/replay/` in files
//! of at most [`QUEUE_FILE_BYTES`]. The running edge stores each queued event in the
//! spool again, marked `Edge-Replay: true` (a header the backhaul passes to the origin
//! with the others), then removes the file. A replay is at least once: a file cut short
//! by a crash is stored again whole.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use edge_kit::clock::unix_ms;

use super::append::{AppendError, NewEvent};
use super::blocking::{Stop, blocking};
use super::checkpoint;
use super::durable::{create_dir_durably, owned_like, remove_durably, sync_dir};
use super::record::{RecordView, SegmentFormat};
use super::scan::scan_segment;
use super::segments::{list_segments, new_segment_format};
use super::{Spool, quarantine, retained};

/// Which delivered events a replay sends again.
#[derive(Clone, Debug, Default)]
pub struct ReplayFilter {
    /// Received at or after this (Unix milliseconds).
    pub since_ms: u64,
    /// Received before this (`None`: up to now).
    pub until_ms: Option<u64>,
    /// Of this route only.
    pub route: Option<String>,
    /// Whose event id starts with this.
    pub id_prefix: Option<String>,
}

impl ReplayFilter {
    /// Whether `record` is to be sent again.
    pub fn selects(&self, record: &RecordView) -> bool {
        record.received_ms >= self.since_ms
            && self.until_ms.is_none_or(|until| record.received_ms < until)
            && self
                .route
                .as_deref()
                .is_none_or(|route| record.route == route)
            && self
                .id_prefix
                .as_deref()
                .is_none_or(|prefix| record.event_id.starts_with(prefix))
    }
}

/// What [`queue`] found and queued.
#[derive(Debug, Default, serde::Serialize)]
pub struct Queued {
    /// Delivered events the filter selected (queued unless a dry run).
    pub events: u64,
    /// Their bodies' bytes.
    pub body_bytes: u64,
    /// Segment files read.
    pub segments_read: usize,
    /// The oldest delivery still on disk (Unix milliseconds): a range that starts
    /// before it is replayed only from it on.
    pub oldest_kept_ms: Option<u64>,
    /// Damaged regions skipped in the segments read (`edge spool-verify` names them).
    pub damaged_regions: usize,
    /// The queue files written.
    pub files: Vec<PathBuf>,
}

/// Finds the delivered events under `spool_dir` that `filter` selects and, unless
/// `dry_run`, queues them for the running edge (or its next start) to store again.
/// Reads only; writes nothing but the queue files, so it is safe beside the writer.
pub fn queue(spool_dir: &Path, filter: &ReplayFilter, dry_run: bool) -> io::Result<Queued> {
    let delivered_through = checkpoint::read(spool_dir)?.unwrap_or(0);
    let mut queued = Queued::default();
    let mut out = QueueWriter::new(spool_dir, dry_run)?;
    for path in delivered_segments(spool_dir)? {
        // A live segment may move to `delivered/` between the listing and the read.
        let bytes = match fs::read(&path).or_else(|e| match e.kind() {
            io::ErrorKind::NotFound => fs::read(retained_twin(spool_dir, &path)),
            _ => Err(e),
        }) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let scan = scan_segment(&bytes);
        queued.segments_read += 1;
        queued.damaged_regions += scan.damaged.len() + usize::from(scan.tail.is_some());
        for scanned in scan
            .records
            .iter()
            .filter(|s| s.record.seq <= delivered_through)
        {
            let record = &scanned.record;
            queued.oldest_kept_ms = Some(
                queued
                    .oldest_kept_ms
                    .map_or(record.received_ms, |oldest| oldest.min(record.received_ms)),
            );
            if filter.selects(record) {
                queued.events += 1;
                queued.body_bytes += record.body.len() as u64;
                out.push(record)?;
            }
        }
    }
    queued.files = out.finish()?;
    Ok(queued)
}

/// One pass over `replay/`: each queued event stored again marked as a replay, then its
/// file removed. A file with damage is moved to quarantine once its whole records are
/// stored. When the spool refuses an event, the file stays queued and a note says how
/// many of its events are stored: the next pass goes on from there.
pub(super) async fn replay_once(spool: &Arc<Spool>) -> Result<(), Stop> {
    let dir = spool.shared.dir.join(DIR);
    let files = blocking(move || queue_files(&dir)).await?;
    for path in files {
        if replay_file(spool, path).await? == Replayed::Waits {
            return Ok(());
        }
    }
    Ok(())
}

/// How far one file of `replay/` went.
#[derive(Debug, PartialEq)]
enum Replayed {
    /// All its events are stored again; the file is gone (or in quarantine).
    Whole,
    /// The spool refused one: the file stays queued, its progress noted.
    Waits,
}

/// Stores the events of the replay file `path` again, from where an earlier pass left
/// off, then retires the file.
async fn replay_file(spool: &Arc<Spool>, path: PathBuf) -> Result<Replayed, Stop> {
    let read_path = path.clone();
    let bytes = blocking(move || fs::read(read_path)).await?;
    let scan = scan_segment(&bytes);
    let damage = scan.damaged.first().or(scan.tail.as_ref());
    let damage = match (&scan.format, damage) {
        (Err(e), _) => Some(format!("unreadable header: {e}")),
        (Ok(_), Some(damage)) => Some(format!("{}; names {:?}", damage.error, damage.named)),
        (Ok(_), None) => None,
    };
    let progress = progress_name(&path);
    let dir = spool.shared.dir.join(DIR);
    let progress_dir = dir.clone();
    let name = progress.clone();
    let stored_before = blocking(move || checkpoint::read_seq(&progress_dir, &name))
        .await?
        .unwrap_or(0) as usize;
    let events: Vec<NewEvent> = scan
        .records
        .iter()
        .skip(stored_before)
        .map(|scanned| replayed(&scanned.record))
        .collect();
    let count = events.len() as u64;
    let mut stored = stored_before;
    for chunk in chunked(events, APPENDS_AT_ONCE) {
        let outcomes =
            futures::future::join_all(chunk.into_iter().map(|event| spool.append(event))).await;
        if let Some(refused) = outcomes.iter().position(Result::is_err) {
            stored += refused;
            spool
                .metrics
                .replayed
                .inc_by((stored - stored_before) as u64);
            if outcomes[refused] == Err(AppendError::Closed) {
                return Err(Stop::Closed);
            }
            // The next pass starts after what is stored, so a spool near full is not
            // filled with copies.
            let temp = format!("{progress}.tmp");
            blocking(move || checkpoint::write_seq(&dir, &progress, &temp, stored as u64)).await?;
            tracing::warn!(path = %path.display(), stored, error = ?outcomes[refused], "a replay waits: the spool refused an event; the next pass goes on from it");
            return Ok(Replayed::Waits);
        }
        stored += outcomes.len();
    }
    retire_file(spool, path, damage, count).await?;
    Ok(Replayed::Whole)
}

/// Removes a replay file whose `count` events are all stored again, with its progress
/// note; one that held `damage` goes to quarantine instead.
async fn retire_file(
    spool: &Arc<Spool>,
    path: PathBuf,
    damage: Option<String>,
    count: u64,
) -> Result<(), Stop> {
    let spool_dir = spool.shared.dir.clone();
    let done = path.clone();
    let why = damage.clone();
    let progress = spool.shared.dir.join(DIR).join(progress_name(&path));
    blocking(move || {
        match why {
            Some(why) => quarantine::move_in(&spool_dir, &done, &format!("replay queue: {why}"))?,
            None => remove_durably(&done)?,
        }
        remove_durably(&progress)
    })
    .await?;
    spool.metrics.replayed.inc_by(count);
    let shared = Arc::clone(&spool.shared);
    blocking(move || {
        shared.kept.remeasure(&shared.dir);
        Ok(())
    })
    .await?;
    match damage {
        Some(why) => {
            tracing::error!(path = %path.display(), replayed = count, why = %why, "a replay file held damage: its whole events were stored again, the file moved to quarantine")
        }
        None => {
            tracing::info!(path = %path.display(), replayed = count, "replay stored for delivery")
        }
    }
    Ok(())
}

/// The file that counts how many of a queue file's events are stored, once a pass was
/// cut short.
fn progress_name(queue_file: &Path) -> String {
    let name = queue_file.file_name().unwrap_or_default().to_string_lossy();
    format!("{name}.stored")
}

/// The event of a replayed record: stored as it arrived, with `Edge-Replay: true`.
fn replayed(record: &RecordView) -> NewEvent {
    let mut event = NewEvent::again(record.to_owned_record());
    event
        .headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case(MARK_HEADER));
    event
        .headers
        .push((MARK_HEADER.to_owned(), b"true".to_vec()));
    event
}

fn chunked<T>(items: Vec<T>, size: usize) -> Vec<Vec<T>> {
    let mut chunks = Vec::new();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        chunks.push(items.by_ref().take(size).collect());
    }
    chunks
}

/// The spool's segment files whose records may be delivered, oldest first: the
/// retained ones, then the live ones.
fn delivered_segments(spool_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let retained = match list_segments(&spool_dir.join(retained::DIR)) {
        Ok(list) => list,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut all = retained;
    all.extend(list_segments(spool_dir)?);
    all.sort();
    all.dedup_by_key(|(first, _)| *first);
    Ok(all.into_iter().map(|(_, path)| path).collect())
}

/// Where a live segment goes when it is delivered and retained.
fn retained_twin(spool_dir: &Path, path: &Path) -> PathBuf {
    spool_dir
        .join(retained::DIR)
        .join(path.file_name().unwrap_or_default())
}

/// The queue files in `dir`, oldest first (none when it does not exist).
fn queue_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "seg") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Writes selected records into queue files of at most [`QUEUE_FILE_BYTES`], each
/// durable before it appears under its name.
struct QueueWriter {
    dir: PathBuf,
    spool_dir: PathBuf,
    dry_run: bool,
    started_ms: u64,
    format: SegmentFormat,
    buf: Vec<u8>,
    written: Vec<PathBuf>,
}

impl QueueWriter {
    fn new(spool_dir: &Path, dry_run: bool) -> io::Result<Self> {
        let format = new_segment_format()?;
        Ok(Self {
            dir: spool_dir.join(DIR),
            spool_dir: spool_dir.to_owned(),
            dry_run,
            started_ms: unix_ms(),
            buf: format.header(),
            format,
            written: Vec::new(),
        })
    }

    fn push(&mut self, record: &RecordView) -> io::Result<()> {
        if self.dry_run {
            return Ok(());
        }
        record
            .encode_frame(&self.format, &mut self.buf)
            .map_err(io::Error::other)?;
        if self.buf.len() >= QUEUE_FILE_BYTES {
            self.write_file()?;
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<Vec<PathBuf>> {
        if !self.dry_run && self.buf.len() > self.format.header_len() {
            self.write_file()?;
        }
        Ok(self.written)
    }

    fn write_file(&mut self) -> io::Result<()> {
        if !self.dir.is_dir() {
            create_dir_durably(&self.dir)?;
            owned_like(&self.dir, &self.spool_dir)?;
        }
        let name = format!("{:020}-{:06}.seg", self.started_ms, self.written.len());
        let temp = self.dir.join(format!("{name}.tmp"));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(&self.buf)?;
        file.sync_all()?;
        owned_like(&temp, &self.spool_dir)?;
        let path = self.dir.join(name);
        fs::rename(&temp, &path)?;
        sync_dir(&self.dir)?;
        self.written.push(path);
        self.buf.truncate(self.format.header_len());
        Ok(())
    }
}

/// Where `edge replay` queues events, under the spool directory.
pub(crate) const DIR: &str = "replay";
/// The header that marks a replayed event for the origin.
pub const MARK_HEADER: &str = "Edge-Replay";
/// A queue file's size: what a crash or a full spool may make the edge store twice.
const QUEUE_FILE_BYTES: usize = 16 << 20;
/// Appends a replay pass has waiting at once (they share group commits).
const APPENDS_AT_ONCE: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::record::Record;
    use crate::spool::record::tests::sample;

    fn record(seq: u64, received_ms: u64, route: &str, id: &str) -> Record {
        Record {
            received_ms,
            route: route.to_owned(),
            ..sample(seq, id)
        }
    }

    #[test]
    fn a_filter_selects_by_half_open_time_range_route_and_id_prefix() {
        let filter = ReplayFilter {
            since_ms: 1_000,
            until_ms: Some(2_000),
            route: Some("github".into()),
            id_prefix: Some("ab".into()),
        };
        let selects = |r: Record| filter.selects(&r.view());
        assert!(selects(record(1, 1_000, "github", "abc")));
        assert!(selects(record(1, 1_999, "github", "ab")));
        assert!(!selects(record(1, 999, "github", "abc")));
        assert!(!selects(record(1, 2_000, "github", "abc")));
        assert!(!selects(record(1, 1_500, "stripe", "abc")));
        assert!(!selects(record(1, 1_500, "github", "xabc")));
        let open = ReplayFilter::default();
        assert!(open.selects(&record(1, 0, "any", "").view()));
    }

    #[test]
    fn a_replayed_event_is_marked_once() {
        let mut stored = record(7, 5, "github", "id-1");
        stored
            .headers
            .push(("Edge-Replay".into(), b"true".to_vec()));
        let event = replayed(&stored.view());
        let marks: Vec<_> = event
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(MARK_HEADER))
            .collect();
        assert_eq!(marks.len(), 1);
        assert!(event.resend);
        assert_eq!((event.received_ms, event.event_id.as_str()), (5, "id-1"));
    }

    #[test]
    fn chunks_keep_every_item_in_order() {
        let chunks = chunked((0..7).collect(), 3);
        assert_eq!(chunks, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
        assert!(chunked(Vec::<u8>::new(), 3).is_empty());
    }
}
