//! Looking at a spool directory without changing it or taking its lock, so it is safe
//! while the edge runs: every whole record (`edge spool-dump`), and what is damaged
//! (`edge spool-verify`).

use std::io;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::record::{FrameError, Record};
use super::scan::{Damage, highest_seq_named, named_without_header, scan_segment};
use super::segments::list_segments;
use super::{checkpoint, quarantine};

/// Every whole record in the spool directory, oldest first.
pub fn dump(dir: &Path) -> io::Result<Vec<Record>> {
    let mut records = Vec::new();
    for (_, path) in list_segments(dir)? {
        let bytes = std::fs::read(&path)?;
        records.extend(
            scan_segment(&bytes)
                .records
                .iter()
                .map(|scanned| scanned.record.to_owned_record()),
        );
    }
    Ok(records)
}

/// What `edge spool-verify` found.
#[derive(Debug, Default)]
pub struct Inspection {
    /// Segment files read.
    pub segments: usize,
    /// Whole records found.
    pub records: u64,
    /// Damaged regions, oldest first.
    pub damaged: Vec<DamagedRegion>,
    /// Segments whose header cannot be read (recovery moves them to quarantine).
    pub unreadable: Vec<UnreadableSegment>,
    /// Segments whose header is damaged but whose seed was found again from the frames.
    pub recovered_headers: Vec<PathBuf>,
    /// Frames whose length field is damaged, read whole at their payload's own length
    /// (recovery writes it back): the segment, the frame's offset and its record's
    /// sequence number.
    pub repairable: Vec<(PathBuf, usize, u64)>,
    /// Sequence numbers no segment holds though segments after them do: a segment file
    /// gone.
    pub missing: Vec<RangeInclusive<u64>>,
    /// Bytes after the newest segment's last record that are the end of a write that
    /// never finished: a write in progress while the edge runs, a tail recovery cuts (and
    /// keeps in quarantine) after a crash. Not damage.
    pub open_tail: Option<(PathBuf, usize, usize)>,
    /// The newest segment, and the sequence number of its last whole record.
    pub newest: Option<(PathBuf, Option<u64>)>,
    /// What is already in `quarantine/`, with each note.
    pub quarantined: Vec<(PathBuf, String)>,
}

/// One damaged region and the records it cost.
#[derive(Debug)]
pub struct DamagedRegion {
    /// The segment file.
    pub segment: PathBuf,
    /// Where the region starts.
    pub offset: usize,
    /// Its length.
    pub bytes: usize,
    /// Why its first frame failed.
    pub error: FrameError,
    /// The sequence numbers whose records were in it (`None` when the segment gives no
    /// bound).
    pub lost: Option<RangeInclusive<u64>>,
    /// Sequence numbers and event ids its frames still name, unchecked.
    pub named: Vec<(u64, String)>,
}

/// A segment with no readable header and no frame to find its seed from again.
#[derive(Debug)]
pub struct UnreadableSegment {
    /// The segment file.
    pub segment: PathBuf,
    /// Why its header cannot be read.
    pub why: String,
    /// Its sequence numbers, from its name to the next segment's (for the newest, to the
    /// highest its frames still name).
    pub lost: RangeInclusive<u64>,
    /// Sequence numbers and event ids its frames still name, unchecked.
    pub named: Vec<(u64, String)>,
}

impl Inspection {
    /// Whether anything was damaged or unreadable.
    pub fn is_damaged(&self) -> bool {
        !self.damaged.is_empty()
            || !self.unreadable.is_empty()
            || !self.recovered_headers.is_empty()
            || !self.repairable.is_empty()
            || !self.missing.is_empty()
    }
}

/// Reads every segment and lists what is damaged.
pub fn inspect(dir: &Path) -> io::Result<Inspection> {
    let mut found = Inspection {
        quarantined: quarantine::list(dir)?,
        ..Default::default()
    };
    let segments = list_segments(dir)?;
    // The first number not yet seen held by a segment: a segment starting after it
    // means the numbers between are in no file.
    let mut expected = checkpoint::read(dir)?.unwrap_or(0) + 1;
    for (index, (first, path)) in segments.iter().enumerate() {
        if *first > expected {
            found.missing.push(expected..=first - 1);
        }
        let next_first = segments.get(index + 1).map(|(next, _)| *next);
        let bytes = std::fs::read(path)?;
        let scan = scan_segment(&bytes);
        found.segments += 1;
        if let Err(error) = scan.format {
            let lost = *first..=match next_first {
                Some(next) => next.saturating_sub(1).max(*first),
                None => highest_seq_named(&bytes, *first).unwrap_or(*first),
            };
            expected = expected.max(lost.end() + 1);
            found.unreadable.push(UnreadableSegment {
                segment: path.clone(),
                why: error.to_string(),
                lost,
                named: named_without_header(&bytes),
            });
            continue;
        }
        found.records += scan.records.len() as u64;
        if scan.header_recovered {
            found.recovered_headers.push(path.clone());
        }
        found.repairable.extend(
            scan.records
                .iter()
                .filter(|scanned| scanned.repaired)
                .map(|scanned| (path.clone(), scanned.offset, scanned.record.seq)),
        );
        if let Some(last) = scan.records.last() {
            expected = expected.max(last.record.seq + 1);
        }
        let region = |damage: &Damage| DamagedRegion {
            segment: path.clone(),
            offset: damage.offset,
            bytes: damage.len,
            error: damage.error,
            lost: lost_seqs(*first, damage, next_first),
            named: damage.named.clone(),
        };
        found.damaged.extend(scan.damaged.iter().map(region));
        match &scan.tail {
            Some(tail) if let Some(next) = next_first => {
                expected = expected.max(next);
                found.damaged.push(region(tail));
            }
            Some(tail) if tail.unfinished => {
                found.open_tail = Some((path.clone(), tail.offset, tail.len));
            }
            // Written whole, so maybe acknowledged: lost, up to what it may have held.
            Some(tail) => {
                let lost_to = tail.last_seq_held(*first);
                expected = expected.max(lost_to + 1);
                found.damaged.push(DamagedRegion {
                    lost: lost_seqs(*first, tail, Some(lost_to + 1)),
                    ..region(tail)
                });
            }
            None => {}
        }
        if next_first.is_none() {
            let last = scan.records.last().map(|r| r.record.seq);
            found.newest = Some((path.clone(), last.or(first.checked_sub(1))));
        }
    }
    Ok(found)
}

/// The sequence numbers a damaged region held: after the last whole record before it
/// (or from the segment's first), before the first whole record after it (or the next
/// segment's first).
fn lost_seqs(first: u64, damage: &Damage, next_first: Option<u64>) -> Option<RangeInclusive<u64>> {
    let from = damage.after_seq.map_or(first, |seq| seq + 1);
    let to = damage.before_seq.or(next_first)?.checked_sub(1)?;
    (from <= to).then_some(from..=to)
}
