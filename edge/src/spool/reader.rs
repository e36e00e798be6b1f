//! Sequential reader of durable records, for the backhaul. It reads the segment files
//! itself (no coordination with the writer beyond the durable position it publishes),
//! and never returns a record that is not yet durable.
//!
//! It never stalls on damage: a frame that fails its check is skipped to where whole
//! frames resume (`scan::resume_after`), the region is counted and logged, and every
//! sequence number it never returns (damaged, or in a segment moved to quarantine) is
//! reported as lost, so that delivery can account for it and go on. A sealed segment
//! the disk will not read (EIO on a bad sector) is given up after a few attempts: its
//! unread records are lost, named and counted, and the file goes to quarantine once
//! delivery passes it; the newest segment is not (the writer's own I/O decides there).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::metrics::SpoolMetrics;
use super::record::{
    FRAME_HEADER_LEN, Record, SegmentFormat, decode_by_payload, decode_frame, frame_len,
};
use super::scan::resume_after;
use super::segments::{list_segments, segment_path};
use super::shared::Shared;

/// Reads stored records in order, from the checkpoint on, for the backhaul.
pub struct SpoolReader {
    shared: Arc<Shared>,
    metrics: SpoolMetrics,
    next_seq: u64,
    /// The segment being read: its first sequence number, the offset of the next frame,
    /// and how its frames are checked.
    position: Option<(u64, u64, SegmentFormat)>,
    /// The segment whose file was opened last (the one a failed read was in).
    opened: Option<u64>,
    /// Reads failed in a row at one place: the segment, the next sequence number, and
    /// how many times.
    failed_reads: Option<(u64, u64, u32)>,
}

/// What one read returns: durable records in order, and the sequence numbers skipped
/// before them because their records are lost.
#[derive(Debug, Default)]
pub struct Batch {
    /// Whole records, in sequence order.
    pub records: Vec<Record>,
    /// Sequence numbers lost to damage: nothing to deliver for them.
    pub lost: Vec<RangeInclusive<u64>>,
}

impl SpoolReader {
    pub(super) fn new(shared: Arc<Shared>, metrics: SpoolMetrics) -> Self {
        let next_seq = shared.checkpoint.load(Ordering::Acquire) + 1;
        Self {
            shared,
            metrics,
            next_seq,
            position: None,
            opened: None,
            failed_reads: None,
        }
    }

    /// The sequence number the next record returned will have at least.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Up to `max` durable records from the current position, in order; empty when the
    /// reader has caught up. Blocking file I/O: call it from a blocking context.
    ///
    /// A failure after some records were read returns those records (the reader has
    /// moved past them, so dropping them would skip them for good); the failure comes
    /// back on the next call if it lasts. The `UNREADABLE_AFTER`th failure in a row
    /// in one sealed segment gives it up: the batch reports its unread records lost.
    pub fn read_batch(&mut self, max: usize) -> io::Result<Batch> {
        let mut batch = Batch::default();
        match self.fill(&mut batch, max) {
            Err(e) if batch.records.is_empty() && batch.lost.is_empty() => {
                self.give_up_if_unreadable(e, &mut batch)?;
                Ok(batch)
            }
            _ => {
                self.failed_reads = None;
                Ok(batch)
            }
        }
    }

    /// Counts a failed read; at the `UNREADABLE_AFTER`th in a row at the same place
    /// in a sealed segment, moves past that segment and reports what was left unread
    /// lost. Else the error goes back to the caller, who retries.
    fn give_up_if_unreadable(&mut self, error: io::Error, batch: &mut Batch) -> io::Result<()> {
        let Some(first) = self.opened else {
            return Err(error);
        };
        if first == self.shared.durable_end().0 {
            return Err(error);
        }
        let attempts = match self.failed_reads {
            Some((segment, seq, n)) if segment == first && seq == self.next_seq => n + 1,
            _ => 1,
        };
        self.failed_reads = Some((first, self.next_seq, attempts));
        if attempts < UNREADABLE_AFTER {
            return Err(error);
        }
        let Some(next) = list_segments(&self.shared.dir)?
            .into_iter()
            .map(|(f, _)| f)
            .find(|f| *f > first)
        else {
            return Err(error);
        };
        let path = segment_path(&self.shared.dir, first);
        tracing::error!(segment = %path.display(), %error, attempts, "spool segment unreadable: its unread records are lost, and it goes to quarantine once delivery passes it");
        self.shared.mark_damaged(first);
        if self.next_seq < next {
            self.lost(batch, self.next_seq..=next - 1);
            self.next_seq = next;
        }
        self.position = None;
        self.failed_reads = None;
        Ok(())
    }

    fn fill(&mut self, batch: &mut Batch, max: usize) -> io::Result<()> {
        let durable = self.shared.durable_seq.load(Ordering::Acquire);
        while batch.records.len() < max && self.next_seq <= durable {
            let (first, offset, format) = match self.position {
                Some(position) => position,
                None => match self.locate()? {
                    Some(position) => position,
                    None => break,
                },
            };
            let (active_first, active_end) = self.shared.durable_end();
            let path = segment_path(&self.shared.dir, first);
            self.opened = Some(first);
            let mut file = File::open(&path)?;
            let file_len = file.metadata()?.len();
            let end = if first == active_first {
                active_end.min(file_len)
            } else {
                file_len
            };
            file.seek(SeekFrom::Start(offset))?;
            let mut reading = BufReader::with_capacity(READ_BUFFER, file);
            let mut offset = offset;
            let mut caught_up = false;
            while batch.records.len() < max && offset + FRAME_HEADER_LEN as u64 <= end {
                let (record, len) = match read_frame(&mut reading, offset, end, &format)? {
                    Some(whole) => whole,
                    None => match self.damaged_frame(&path, first, offset, end, &format)? {
                        AfterDamage::Repaired(record, len) => {
                            reading.seek(SeekFrom::Start(offset + len))?;
                            (record, len)
                        }
                        AfterDamage::ResumeAt(at) => {
                            offset = at;
                            reading.seek(SeekFrom::Start(offset))?;
                            continue;
                        }
                    },
                };
                if record.seq > durable {
                    caught_up = true;
                    break;
                }
                offset += len;
                if record.seq >= self.next_seq {
                    if record.seq > self.next_seq {
                        self.lost(batch, self.next_seq..=record.seq - 1);
                    }
                    self.next_seq = record.seq + 1;
                    batch.records.push(record);
                }
            }
            self.position = Some((first, offset, format));
            if caught_up || batch.records.len() >= max {
                break;
            }
            if first == active_first {
                // Read to the durable end, which was published before `durable`: numbers
                // up to it that no frame holds were lost (a damaged tail cut at start-up).
                if offset + FRAME_HEADER_LEN as u64 > end && self.next_seq <= durable {
                    self.lost(batch, self.next_seq..=durable);
                    self.next_seq = durable + 1;
                }
                break;
            }
            // A sealed segment read to its end: on to the next one.
            match self.segment_after(first)? {
                Some(next) => self.position = Some(next),
                None => break,
            }
        }
        Ok(())
    }

    /// The frame at `offset` failed its check: read at its payload's own length when only
    /// its length field is damaged, else skipped to where whole frames resume (or the end
    /// of what is durable), the region counted and logged.
    fn damaged_frame(
        &self,
        path: &std::path::Path,
        first: u64,
        offset: u64,
        end: u64,
        format: &SegmentFormat,
    ) -> io::Result<AfterDamage> {
        let mut rest = vec![0u8; (end - offset) as usize];
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(&mut rest)?;
        if let Some((record, len)) = decode_by_payload(&rest, format) {
            tracing::error!(segment = %path.display(), offset, seq = record.seq, "spool frame's length field damaged: read at its payload's own length, which its check confirms; no record lost");
            return Ok(AfterDamage::Repaired(record.to_owned_record(), len as u64));
        }
        let last = self.next_seq.checked_sub(1).filter(|&seq| seq >= first);
        let resume =
            resume_after(&rest, 0, rest.len(), last, format).map_or(rest.len(), |(at, _)| at);
        self.metrics.damaged_bytes.inc_by(resume as u64);
        self.shared.mark_damaged(first);
        tracing::error!(segment = %path.display(), offset, bytes = resume, "spool region damaged: skipped; the records in it are lost and counted, delivery goes on");
        Ok(AfterDamage::ResumeAt(offset + resume as u64))
    }

    /// Accounts for sequence numbers that will never be returned.
    fn lost(&self, batch: &mut Batch, seqs: RangeInclusive<u64>) {
        let count = seqs.end() - seqs.start() + 1;
        self.metrics.damaged_records.inc_by(count);
        tracing::error!(
            from = seqs.start(),
            to = seqs.end(),
            count,
            "spool records lost to damage or quarantine: accounted for, not delivered"
        );
        batch.lost.push(seqs);
    }

    /// The segment that holds `next_seq` (the newest whose first sequence is not after
    /// it), at its first frame.
    fn locate(&mut self) -> io::Result<Option<(u64, u64, SegmentFormat)>> {
        match self.holding()? {
            Some(first) => self.start_of(first),
            None => Ok(None),
        }
    }

    /// The first sequence number of the newest segment whose first is not after
    /// `next_seq` (else the oldest segment).
    fn holding(&self) -> io::Result<Option<u64>> {
        let segments = list_segments(&self.shared.dir)?;
        Ok(segments
            .iter()
            .rev()
            .find(|(first, _)| *first <= self.next_seq)
            .or(segments.first())
            .map(|(first, _)| *first))
    }

    /// The segment after `first`, at its first frame.
    fn segment_after(&mut self, first: u64) -> io::Result<Option<(u64, u64, SegmentFormat)>> {
        let segments = list_segments(&self.shared.dir)?;
        match segments.into_iter().map(|(f, _)| f).find(|f| *f > first) {
            Some(next) => self.start_of(next),
            None => Ok(None),
        }
    }

    /// Where the frames of segment `first` start, from its header. A header damaged
    /// since recovery makes the whole segment unreadable: its records are lost, counted
    /// when the reader reaches the next one.
    fn start_of(&mut self, first: u64) -> io::Result<Option<(u64, u64, SegmentFormat)>> {
        let path = segment_path(&self.shared.dir, first);
        self.opened = Some(first);
        let mut start = Vec::new();
        File::open(&path)?
            .take(HEADER_READ)
            .read_to_end(&mut start)?;
        match SegmentFormat::detect(&start) {
            Ok((format, _)) => Ok(Some((first, format.header_len() as u64, format))),
            Err(error) => {
                self.shared.mark_damaged(first);
                tracing::error!(segment = %path.display(), %error, "spool segment header damaged since start: its records cannot be read");
                let after = self.segment_after(first)?;
                Ok(after)
            }
        }
    }
}

/// What reading goes on with after a frame that failed its check.
enum AfterDamage {
    /// The frame, read at its payload's own length, and that length.
    Repaired(Record, u64),
    /// Where whole frames resume.
    ResumeAt(u64),
}

/// The whole frame at `offset`, or `None` when it fails its check (or overruns `end`).
fn read_frame(
    file: &mut BufReader<File>,
    offset: u64,
    end: u64,
    format: &SegmentFormat,
) -> io::Result<Option<(Record, u64)>> {
    let mut header = [0u8; FRAME_HEADER_LEN];
    file.read_exact(&mut header)?;
    let Ok(len) = frame_len(&header) else {
        return Ok(None);
    };
    if offset + len as u64 > end {
        return Ok(None);
    }
    let mut frame = vec![0u8; len];
    frame[..FRAME_HEADER_LEN].copy_from_slice(&header);
    file.read_exact(&mut frame[FRAME_HEADER_LEN..])?;
    Ok(decode_frame(&frame, format)
        .ok()
        .map(|(record, _)| (record.to_owned_record(), len as u64)))
}

const READ_BUFFER: usize = 256 * 1024;
/// Failed reads in a row at one place of a sealed segment before it is given up (the
/// backhaul retries a failed read once a second).
pub(super) const UNREADABLE_AFTER: u32 = 3;
/// Enough of a segment to read its header, or to find its seed again from its frames.
const HEADER_READ: u64 = 2 << 20;
