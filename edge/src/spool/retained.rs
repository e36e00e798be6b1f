//! Delivered segments kept for `edge replay` (`spool.retain_delivered`). A segment the
//! checkpoint has passed moves to `<spool.dir>/delivered/` instead of being deleted, and
//! goes once it was delivered longer ago than the retention, or sooner, oldest first,
//! when undelivered events need its room under `max_bytes`. Only delivered segments come
//! here, so pruning never deletes an undelivered event.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use super::durable::{create_dir_durably, sync_dir};
use super::segments::list_segments;

/// Moves the delivered segment at `path` into `delivered/` (the caller syncs the spool
/// directory).
pub(super) fn keep(spool_dir: &Path, path: &Path) -> io::Result<()> {
    let dir = spool_dir.join(DIR);
    if !dir.is_dir() {
        create_dir_durably(&dir)?;
    }
    // Retention counts from delivery.
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .set_modified(std::time::SystemTime::now())?;
    fs::rename(path, dir.join(path.file_name().unwrap_or_default()))?;
    sync_dir(&dir)
}

/// Deletes the retained segments past `retain` at `now_ms`, then the oldest until the
/// rest fit in `room` bytes; returns the bytes still retained.
pub(super) fn prune(spool_dir: &Path, retain: Duration, room: u64, now_ms: u64) -> io::Result<u64> {
    let dir = spool_dir.join(DIR);
    let segments = match list_segments(&dir) {
        Ok(segments) => segments,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut sized = Vec::with_capacity(segments.len());
    for (_, path) in &segments {
        let meta = fs::metadata(path)?;
        let modified_ms = meta
            .modified()?
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        sized.push(RetainedSegment {
            bytes: meta.len(),
            modified_ms,
        });
    }
    let expired = expired_prefix(&sized, retain.as_millis() as u64, room, now_ms);
    for (_, path) in &segments[..expired] {
        fs::remove_file(path)?;
    }
    if expired > 0 {
        sync_dir(&dir)?;
    }
    Ok(sized[expired..].iter().map(|s| s.bytes).sum())
}

/// A retained segment's size and when it was delivered (its modification time).
#[derive(Clone, Copy, Debug)]
struct RetainedSegment {
    bytes: u64,
    modified_ms: u64,
}

/// How many of `segments` (oldest first) go: every one delivered `retain_ms` ago or
/// more, and after those the oldest until the rest fit in `room`. A prefix, so
/// what is retained is always one unbroken stretch of the newest deliveries.
fn expired_prefix(segments: &[RetainedSegment], retain_ms: u64, room: u64, now_ms: u64) -> usize {
    let too_old = segments
        .iter()
        .rposition(|s| now_ms.saturating_sub(s.modified_ms) >= retain_ms)
        .map_or(0, |last| last + 1);
    let mut kept: u64 = segments[too_old..].iter().map(|s| s.bytes).sum();
    let mut expired = too_old;
    while kept > room && expired < segments.len() {
        kept -= segments[expired].bytes;
        expired += 1;
    }
    expired
}

/// Where delivered segments are retained, under the spool directory.
pub(crate) const DIR: &str = "delivered";

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(list: &[(u64, u64)]) -> Vec<RetainedSegment> {
        list.iter()
            .map(|&(bytes, modified_ms)| RetainedSegment { bytes, modified_ms })
            .collect()
    }

    #[test]
    fn segments_go_by_age_then_oldest_first_for_room() {
        let list = segments(&[(10, 1_000), (10, 2_000), (10, 3_000), (10, 4_000)]);
        // Retention 2 s at 4.5 s: the first two are 2 s old or more.
        assert_eq!(expired_prefix(&list, 2_000, 100, 4_500), 2);
        assert_eq!(expired_prefix(&list, 2_000, 10, 4_500), 3);
        assert_eq!(expired_prefix(&list, 2_000, 0, 4_500), 4);
        assert_eq!(expired_prefix(&list, 60_000, 40, 4_500), 0);
        assert_eq!(expired_prefix(&list, 60_000, 39, 4_500), 1);
        // Retention off: everything goes.
        assert_eq!(expired_prefix(&list, 0, u64::MAX, 4_500), 4);
        assert_eq!(expired_prefix(&[], 0, 0, 0), 0);
    }

    #[test]
    fn an_old_segment_behind_a_newer_one_still_takes_the_prefix_with_it() {
        // A clock step back: the second segment looks older than the third. The stretch
        // kept stays unbroken.
        let list = segments(&[(10, 5_000), (10, 1_000), (10, 6_000)]);
        assert_eq!(expired_prefix(&list, 2_000, 100, 6_500), 2);
    }

    #[test]
    fn pruning_deletes_from_the_directory_and_reports_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join(DIR);
        fs::create_dir(&kept).unwrap();
        for first in [1u64, 11, 21] {
            fs::write(kept.join(format!("{first:020}.seg")), vec![0u8; 100]).unwrap();
        }
        let now_ms = edge_kit::clock::unix_ms();
        assert_eq!(
            prune(dir.path(), Duration::from_secs(3600), 1_000, now_ms).unwrap(),
            300
        );
        assert_eq!(
            prune(dir.path(), Duration::from_secs(3600), 250, now_ms).unwrap(),
            200
        );
        assert!(!kept.join(format!("{:020}.seg", 1)).exists());
        assert_eq!(prune(dir.path(), Duration::ZERO, 1_000, now_ms).unwrap(), 0);
        assert_eq!(fs::read_dir(&kept).unwrap().count(), 0);
        let missing = tempfile::tempdir().unwrap();
        assert_eq!(prune(missing.path(), Duration::ZERO, 0, now_ms).unwrap(), 0);
    }
}
