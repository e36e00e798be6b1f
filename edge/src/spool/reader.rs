//! Sequential reader of durable records, for the backhaul. It reads the segment files
//! itself (no coordination with the writer beyond the published durable sequence), and
//! never returns a record that is not yet durable.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::record::{
    FRAME_HEADER_LEN, Record, SEGMENT_MAGIC, decode_frame, frame_len, is_unwritten,
};
use super::{Shared, list_segments, segment_path};

pub struct SpoolReader {
    shared: Arc<Shared>,
    next_seq: u64,
    /// The segment being read (its first sequence number) and the offset of the next frame.
    position: Option<(u64, u64)>,
}

impl SpoolReader {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let next_seq = shared.checkpoint.load(Ordering::Acquire) + 1;
        Self {
            shared,
            next_seq,
            position: None,
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
    /// back on the next call if it lasts.
    pub fn read_batch(&mut self, max: usize) -> io::Result<Vec<Record>> {
        let mut out = Vec::new();
        match self.fill(&mut out, max) {
            Err(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }

    fn fill(&mut self, out: &mut Vec<Record>, max: usize) -> io::Result<()> {
        let durable = self.shared.durable_seq.load(Ordering::Acquire);
        while out.len() < max && self.next_seq <= durable {
            let (first, offset) = match self.position {
                Some(position) => position,
                None => match self.locate()? {
                    Some(first) => (first, SEGMENT_MAGIC.len() as u64),
                    None => break,
                },
            };
            let mut file = File::open(segment_path(&self.shared.dir, first))?;
            let end = file.metadata()?.len();
            file.seek(SeekFrom::Start(offset))?;
            let mut file = BufReader::with_capacity(READ_BUFFER, file);
            let mut offset = offset;
            let mut reached_unsynced = false;
            while out.len() < max && offset + FRAME_HEADER_LEN as u64 <= end {
                let mut header = [0u8; FRAME_HEADER_LEN];
                // Preallocated room the writer has not reached, or a segment cut to its
                // records by a roll since we measured it: nothing more here yet.
                let nothing_more = match file.read_exact(&mut header) {
                    Ok(()) => is_unwritten(&header),
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => true,
                    Err(e) => return Err(e),
                };
                if nothing_more {
                    reached_unsynced = true;
                    break;
                }
                let len = frame_len(&header).map_err(invalid)?;
                if offset + len as u64 > end {
                    // The writer is still writing this frame; it is not durable yet.
                    reached_unsynced = true;
                    break;
                }
                let mut frame = vec![0u8; len];
                frame[..FRAME_HEADER_LEN].copy_from_slice(&header);
                file.read_exact(&mut frame[FRAME_HEADER_LEN..])?;
                let (record, _) = decode_frame(&frame).map_err(invalid)?;
                if record.seq > durable {
                    reached_unsynced = true;
                    break;
                }
                offset += len as u64;
                if record.seq >= self.next_seq {
                    self.next_seq = record.seq + 1;
                    out.push(record.to_owned_record());
                }
            }
            self.position = Some((first, offset));
            if reached_unsynced || out.len() >= max {
                break;
            }
            // This segment is exhausted as far as we measured it; move on if a newer one
            // exists. The writer rolls only after the last flush into this one, so once
            // the next exists this one's length is final, but it may have grown since we
            // measured it (a flush, then a roll, while we read): then read the rest first,
            // or those records would be skipped.
            match self.segment_after(first)? {
                Some(_)
                    if std::fs::metadata(segment_path(&self.shared.dir, first))?.len() > end => {}
                Some(next) => self.position = Some((next, SEGMENT_MAGIC.len() as u64)),
                None => break,
            }
        }
        Ok(())
    }

    /// The segment that holds `next_seq`: the newest whose first sequence is not after it.
    fn locate(&self) -> io::Result<Option<u64>> {
        let segments = list_segments(&self.shared.dir)?;
        let holding = segments
            .iter()
            .rev()
            .find(|(first, _)| *first <= self.next_seq);
        Ok(holding.or(segments.first()).map(|(first, _)| *first))
    }

    fn segment_after(&self, first: u64) -> io::Result<Option<u64>> {
        let segments = list_segments(&self.shared.dir)?;
        Ok(segments.into_iter().map(|(f, _)| f).find(|f| *f > first))
    }
}

fn invalid(error: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error.to_string())
}

const READ_BUFFER: usize = 256 * 1024;
