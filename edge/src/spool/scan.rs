//! Reading one segment: the records that are whole, the damaged regions between them
//! (skipped, each with the sequence numbers around it and what its frames still name),
//! and where the written part ends. Pure, so torn tails and flipped bytes are tested on
//! byte buffers.
//!
//! A frame that fails its check is first read at the length its payload's own fields
//! give (a damaged length field costs nothing: the check decides). Failing that, the
//! scan resynchronises: first where the damaged
//! frame's own length says the next one starts, else at the next offset where a frame
//! of this segment's seed begins with a greater sequence number. Only damage with no
//! whole record after it, up to the end of the written bytes, is a tail (on the newest
//! segment: a write that never finished).

use super::record::{
    FRAME_HEADER_LEN, FrameError, HeaderError, RecordView, SegmentFormat, decode_by_payload,
    decode_frame, is_unfinished_write, may_start_frame, salvage,
};

/// What one segment file holds: its format, its whole records and its damage.
#[derive(Debug)]
pub struct SegmentScan<'a> {
    /// How the segment's frames are checked; an error when its header is unreadable and
    /// its seed cannot be found again (then nothing else is read).
    pub format: Result<SegmentFormat, HeaderError>,
    /// The header was damaged and the seed found again from the frames.
    pub header_recovered: bool,
    /// Every whole record, in file order.
    pub records: Vec<Scanned<'a>>,
    /// Damaged regions with whole records after them.
    pub damaged: Vec<Damage>,
    /// Damage with no whole record after it, to the end of the written bytes.
    pub tail: Option<Damage>,
    /// Where the kept bytes end (after the last whole record or damaged region): where
    /// appends would continue once a tail is cut.
    pub end: usize,
}

/// A whole record and where its frame is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scanned<'a> {
    /// The record.
    pub record: RecordView<'a>,
    /// Where its frame starts.
    pub offset: usize,
    /// The frame's length.
    pub len: usize,
    /// Its stored length was damaged: it was read at its payload's own length, which
    /// its check confirmed.
    pub repaired: bool,
}

/// A region of a segment that holds no whole record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Where the region starts.
    pub offset: usize,
    /// Its length.
    pub len: usize,
    /// Why the first frame in it failed.
    pub error: FrameError,
    /// The sequence number of the last whole record before it, if any in the segment.
    pub after_seq: Option<u64>,
    /// The sequence number of the first whole record after it, if any in the segment.
    pub before_seq: Option<u64>,
    /// What damaged frames in it still say (sequence number, event id), unchecked.
    pub named: Vec<(u64, String)>,
    /// A tail that is the end of a write that never finished, so never acknowledged
    /// ([`is_unfinished_write`]); false for a frame written whole, which may have been.
    pub unfinished: bool,
}

impl Damage {
    /// The highest sequence number a region may have held, for a tail of segment
    /// `first` with no record after it: what its frames still name, within what its bytes
    /// could hold, and at least the one after the last whole record.
    pub fn last_seq_held(&self, first: u64) -> u64 {
        let from = self.after_seq.map_or(first, |seq| seq + 1);
        let bound = from.saturating_add((self.len / FRAME_HEADER_LEN) as u64);
        self.named
            .iter()
            .map(|(seq, _)| *seq)
            .filter(|seq| (from..=bound).contains(seq))
            .max()
            .unwrap_or(from)
    }
}

/// Reads a whole segment file's bytes: every record it holds and every damaged region.
pub fn scan_segment(bytes: &[u8]) -> SegmentScan<'_> {
    let detected = SegmentFormat::detect(bytes);
    let mut scan = SegmentScan {
        format: detected.map(|(format, _)| format),
        header_recovered: detected.is_ok_and(|(_, recovered)| recovered),
        records: Vec::new(),
        damaged: Vec::new(),
        tail: None,
        end: 0,
    };
    let Ok(format) = scan.format else {
        return scan;
    };
    // Zeros at the end are preallocated room, not data.
    let data_end = bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last + 1)
        .max(format.header_len());
    let mut offset = format.header_len();
    let mut last_seq = None;
    while offset < data_end {
        let frame = &bytes[offset..];
        let (decoded, repaired) = match decode_frame(frame, &format) {
            Ok(found) => (Ok(found), false),
            Err(error) => match decode_by_payload(frame, &format) {
                Some(found) => (Ok(found), true),
                None => (Err(error), false),
            },
        };
        let error = match decoded {
            Ok((record, len)) if last_seq.is_none_or(|last| record.seq > last) => {
                last_seq = Some(record.seq);
                scan.records.push(Scanned {
                    record,
                    offset,
                    len,
                    repaired,
                });
                offset += len;
                continue;
            }
            Ok(_) => FrameError::Corrupt("sequence number does not increase"),
            Err(error) => error,
        };
        let resume = resume_after(bytes, offset, data_end, last_seq, &format);
        let region_end = resume.map_or(data_end, |(at, _)| at);
        let damage = Damage {
            offset,
            len: region_end - offset,
            error,
            after_seq: last_seq,
            before_seq: resume.map(|(_, seq)| seq),
            named: named_in(&bytes[offset..region_end], last_seq),
            unfinished: resume.is_none() && is_unfinished_write(&bytes[offset..data_end]),
        };
        match resume {
            Some(_) => scan.damaged.push(damage),
            None => {
                scan.tail = Some(damage);
                scan.end = offset;
                return scan;
            }
        }
        offset = region_end;
    }
    scan.end = offset;
    scan
}

/// Where whole frames resume after damage at `from`, and the sequence number there:
/// where the damaged frame's length points if a frame is there, else the first offset
/// where a frame of this segment begins. `None` when no whole frame follows, or when
/// the search has spent [`RESYNC_CHECK_BUDGET`] (the region then runs to the end).
///
/// Every offset is a candidate, and checking one costs a CRC over the length it claims:
/// a body can claim megabytes at every offset. So a candidate is checked only after the
/// tests that cost nothing (`may_start_frame`: a length that fits, the version, a
/// sequence number after the last whole record's and at most [`MAX_SEQ_GAP`] past it),
/// and the bytes checked per region are capped.
pub fn resume_after(
    bytes: &[u8],
    from: usize,
    data_end: usize,
    last_seq: Option<u64>,
    format: &SegmentFormat,
) -> Option<(usize, u64)> {
    let mut budget = RESYNC_CHECK_BUDGET;
    let mut frame_at = |at: usize| {
        let candidate = &bytes[at..data_end];
        if !may_start_frame(candidate, last_seq) {
            return None;
        }
        let seq = u64::from_le_bytes(candidate[9..17].try_into().ok()?);
        if last_seq.is_some_and(|last| seq > last.saturating_add(MAX_SEQ_GAP)) {
            return None;
        }
        let claimed =
            FRAME_HEADER_LEN + u32::from_le_bytes(candidate[..4].try_into().ok()?) as usize;
        budget = budget.checked_sub(claimed)?;
        let (record, _) = decode_frame(candidate, format).ok()?;
        Some((at, record.seq))
    };
    let by_length = bytes
        .get(from..from + 4)
        .map(|len| from + 8 + u32::from_le_bytes(len.try_into().unwrap_or([0; 4])) as usize)
        .filter(|&next| next > from + 8 && next <= data_end);
    if let Some(found) = by_length.and_then(&mut frame_at) {
        return Some(found);
    }
    (from + 1..data_end).find_map(frame_at)
}

/// The highest sequence number any plausible frame of segment `first` names, searched at
/// every offset, unchecked: for a newest segment whose header is unreadable, so that new
/// records never reuse a number it may hold. Bounded by how many frames its bytes could
/// hold, whatever a body claims.
pub fn highest_seq_named(bytes: &[u8], first: u64) -> Option<u64> {
    let bound = first.saturating_add((bytes.len() / FRAME_HEADER_LEN) as u64);
    (0..bytes.len())
        .filter(|&at| may_start_frame(&bytes[at..], first.checked_sub(1)))
        .filter_map(|at| salvage(&bytes[at..]).map(|(seq, _)| seq))
        .filter(|&seq| seq <= bound)
        .max()
}

/// What the frames of a segment whose header is unreadable still name, unchecked, read
/// as if a version 2 header were there.
pub fn named_without_header(bytes: &[u8]) -> Vec<(u64, String)> {
    let header_len = SegmentFormat::seeded(0).header_len();
    bytes
        .get(header_len..)
        .map_or_else(Vec::new, |frames| named_in(frames, None))
}

/// What bytes that start with a frame (a tail cut off a segment) still name, unchecked.
pub fn named_in_frames(bytes: &[u8]) -> Vec<(u64, String)> {
    named_in(bytes, None)
}

/// What the damaged frames of a region still name: the frame it starts with, and each
/// one after that its predecessor's length points to (never a search through bodies,
/// which could name frames a sender put there).
fn named_in(region: &[u8], after: Option<u64>) -> Vec<(u64, String)> {
    let mut named = Vec::new();
    let mut at = 0;
    while let Some(frame) = region.get(at..) {
        let Some((seq, id)) = salvage(frame) else {
            break;
        };
        if after.is_some_and(|after| seq <= after) {
            break;
        }
        named.push((seq, id));
        let len = u32::from_le_bytes(frame[..4].try_into().unwrap_or([0; 4])) as usize;
        at += FRAME_HEADER_LEN + len;
    }
    named
}

/// Bytes a resynchronisation checks (CRCs over claimed lengths) after one damaged frame
/// before it gives up and reports the rest of the segment lost: several segments' worth,
/// far more than the frames between two records ever need.
pub const RESYNC_CHECK_BUDGET: usize = 256 << 20;
/// The most sequence numbers a segment skips between two records (a batch refused after
/// a failed write is skipped): a candidate further on is not a frame of this segment.
pub const MAX_SEQ_GAP: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::record::tests::{FORMAT, sample};

    /// A segment of records 1..=n, and where each frame ends.
    fn segment(n: u64) -> (Vec<u8>, Vec<usize>) {
        let mut buf = FORMAT.header();
        let mut ends = Vec::new();
        for seq in 1..=n {
            sample(seq, &format!("id-{seq}"))
                .view()
                .encode_frame(&FORMAT, &mut buf)
                .unwrap();
            ends.push(buf.len());
        }
        (buf, ends)
    }

    fn seqs(scan: &SegmentScan<'_>) -> Vec<u64> {
        scan.records.iter().map(|r| r.record.seq).collect()
    }

    #[test]
    fn whole_segment_scans_clean() {
        let (buf, _) = segment(5);
        let scan = scan_segment(&buf);
        assert_eq!(seqs(&scan), [1, 2, 3, 4, 5]);
        assert_eq!(
            (scan.end, &scan.damaged, &scan.tail),
            (buf.len(), &vec![], &None)
        );
    }

    #[test]
    fn empty_and_header_only_segments() {
        assert_eq!(scan_segment(&[]).format, Err(HeaderError::Torn));
        let header = FORMAT.header();
        assert_eq!(scan_segment(&header[..20]).format, Err(HeaderError::Torn));
        let scan = scan_segment(&header);
        assert_eq!(
            (scan.records.len(), scan.end, scan.tail),
            (0, header.len(), None)
        );
        assert_eq!(
            scan_segment(b"garbage! and more than a header's worth of it").format,
            Err(HeaderError::Unreadable)
        );
    }

    #[test]
    fn torn_tail_at_every_cut_keeps_every_whole_record() {
        let (buf, ends) = segment(3);
        for cut in FORMAT.header_len()..buf.len() {
            let scan = scan_segment(&buf[..cut]);
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(scan.records.len(), whole, "cut {cut}");
            let kept = if whole == 0 {
                FORMAT.header_len()
            } else {
                ends[whole - 1]
            };
            assert_eq!(scan.end, kept, "cut {cut}");
            assert!(scan.damaged.is_empty(), "cut {cut}");
            assert_eq!(scan.tail.is_some(), cut != kept, "cut {cut}");
            assert!(scan.tail.is_none_or(|tail| tail.unfinished), "cut {cut}");
        }
    }

    /// Damage costs the damaged record, and nothing after it: by the damaged frame's own
    /// length when that is intact, by searching when it is not.
    #[test]
    fn damage_in_the_middle_loses_only_the_damaged_record() {
        let (whole, ends) = segment(6);
        let in_body = (ends[1] + ends[2]) / 2;
        let in_length = ends[1];
        for at in [in_body, in_length + 4, ends[2] - 1] {
            let mut buf = whole.clone();
            buf[at] ^= 0x20;
            let scan = scan_segment(&buf);
            assert_eq!(seqs(&scan), [1, 2, 4, 5, 6], "byte {at}");
            assert_eq!(scan.damaged.len(), 1, "byte {at}");
            let damage = &scan.damaged[0];
            assert_eq!(
                (
                    damage.offset,
                    damage.len,
                    damage.after_seq,
                    damage.before_seq
                ),
                (ends[1], ends[2] - ends[1], Some(2), Some(4)),
                "byte {at}"
            );
            assert_eq!(scan.end, buf.len());
        }
        let mut buf = whole.clone();
        buf[in_body] ^= 0x20;
        let scan = scan_segment(&buf);
        assert_eq!(scan.damaged[0].named, [(3, "id-3".to_owned())]);
        // Both at once: the length no longer repairs, the search finds record 4.
        buf[in_length] ^= 0x20;
        assert_eq!(seqs(&scan_segment(&buf)), [1, 2, 4, 5, 6]);
    }

    /// Any flipped bit in any frame's length, the newest included (where it points past
    /// the end): the payload's own length passes the check, and nothing is lost.
    #[test]
    fn a_damaged_length_is_read_at_the_payloads_own_length() {
        let (whole, ends) = segment(4);
        for frame in 0..4 {
            let start = if frame == 0 {
                FORMAT.header_len()
            } else {
                ends[frame - 1]
            };
            for bit in 0..32 {
                let mut buf = whole.clone();
                buf[start + bit / 8] ^= 1 << (bit % 8);
                let scan = scan_segment(&buf);
                assert_eq!(seqs(&scan), [1, 2, 3, 4], "frame {frame} bit {bit}");
                let repaired: Vec<usize> = scan
                    .records
                    .iter()
                    .filter(|r| r.repaired)
                    .map(|r| r.offset)
                    .collect();
                assert_eq!(repaired, [start], "frame {frame} bit {bit}");
                assert_eq!((scan.tail, scan.end), (None, buf.len()));
            }
        }
    }

    /// Damage to the last record, torn or flipped, leaves no whole record after it: a
    /// tail (recovery cuts it off the newest segment, keeps it in a sealed one).
    #[test]
    fn damage_in_the_last_record_is_a_tail() {
        let (whole, ends) = segment(4);
        let mut torn = whole.clone();
        torn.truncate((ends[2] + ends[3]) / 2);
        let mut flipped = whole.clone();
        flipped[ends[3] - 5] ^= 1;
        for (buf, error) in [
            (torn, FrameError::Torn),
            (flipped, FrameError::Corrupt("crc mismatch")),
        ] {
            let scan = scan_segment(&buf);
            assert_eq!(seqs(&scan), [1, 2, 3]);
            let tail = scan.tail.unwrap();
            assert_eq!(
                (tail.offset, tail.after_seq, tail.before_seq, tail.error),
                (ends[2], Some(3), None, error)
            );
            assert_eq!(tail.unfinished, error == FrameError::Torn, "{error}");
            assert_eq!(scan.end, ends[2]);
        }
    }

    #[test]
    fn zeros_after_the_records_are_room_not_damage() {
        let (mut buf, ends) = segment(3);
        buf.resize(buf.len() + 4096, 0);
        let scan = scan_segment(&buf);
        assert_eq!(
            (scan.records.len(), scan.end, scan.tail),
            (3, ends[2], None)
        );
        let mut empty = FORMAT.header();
        empty.resize(4096, 0);
        let scan = scan_segment(&empty);
        assert_eq!(
            (scan.records.len(), scan.end, scan.tail),
            (0, FORMAT.header_len(), None)
        );
    }

    /// A write that reached the disk only in part (pages land in any order) leaves
    /// non-zero bytes after a zero header: a tail.
    #[test]
    fn a_torn_write_into_preallocated_room_is_a_tail() {
        let (whole, ends) = segment(3);
        let mut buf = whole.clone();
        buf[ends[1]..ends[1] + FRAME_HEADER_LEN].fill(0);
        buf.resize(buf.len() + 4096, 0);
        let scan = scan_segment(&buf);
        assert_eq!((scan.records.len(), scan.end), (2, ends[1]));
        assert!(scan.tail.unwrap().unfinished);
    }

    /// A write whose later sectors reached a preallocated file and an earlier one did
    /// not: unfinished, not damage.
    #[test]
    fn a_write_missing_a_middle_sector_is_unfinished() {
        let mut buf = FORMAT.header();
        let mut big = sample(1, "big");
        big.body = vec![b'x'; 3000];
        big.view().encode_frame(&FORMAT, &mut buf).unwrap();
        buf[1024..1536].fill(0);
        buf.resize(8192, 0);
        let tail = scan_segment(&buf).tail.unwrap();
        assert!(tail.unfinished, "{tail:?}");
    }

    #[test]
    fn a_repeated_sequence_number_is_damage() {
        let mut buf = FORMAT.header();
        sample(5, "a")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        let end = buf.len();
        sample(5, "b")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        sample(6, "c")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        let scan = scan_segment(&buf);
        assert_eq!(seqs(&scan), [5, 6]);
        assert_eq!(
            scan.damaged[0].error,
            FrameError::Corrupt("sequence number does not increase")
        );
        assert_eq!(scan.damaged[0].offset, end);
    }

    /// A body that carries a frame of its own (a sender can build one with a valid CRC,
    /// but not under this segment's key) is never taken for a record when the scan
    /// searches through it.
    #[test]
    fn a_frame_inside_a_body_is_not_resynchronised_to() {
        use crate::spool::record::SegmentFormat;
        let mut forged = Vec::new();
        sample(3, "forged")
            .view()
            .encode_frame(&SegmentFormat::seeded(0xbad), &mut forged)
            .unwrap();
        let mut buf = FORMAT.header();
        sample(1, "one")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        let second = buf.len();
        let mut carrier = sample(2, "carrier");
        carrier.body = forged;
        carrier.view().encode_frame(&FORMAT, &mut buf).unwrap();
        sample(4, "four")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        // Length and check both damaged: no repair, the scan searches through the body.
        buf[second + 1] ^= 0xff;
        buf[second + 5] ^= 0xff;
        let scan = scan_segment(&buf);
        assert_eq!(seqs(&scan), [1, 4]);
        assert!(scan.damaged[0].named.iter().all(|(_, id)| id != "forged"));
    }

    /// A damaged frame before a body of 0x01 bytes, each offset of which claims a 16 MB
    /// frame with an implausible sequence number: the search rejects them without a CRC
    /// and finds the record after the body.
    #[test]
    fn a_body_claiming_frames_everywhere_costs_no_crcs() {
        let mut ones = sample(2, "ones");
        ones.body = vec![0x01; 1 << 20];
        let mut buf = FORMAT.header();
        let mut second = 0;
        for record in [sample(1, "one"), ones, sample(3, "three")] {
            if record.seq == 2 {
                second = buf.len();
            }
            record.view().encode_frame(&FORMAT, &mut buf).unwrap();
        }
        // Room after the records, so every offset's claimed length fits.
        buf.resize(buf.len() + (20 << 20), 0x01);
        buf[second + 1] ^= 0xff;
        buf[second + 5] ^= 0xff;
        let started = std::time::Instant::now();
        let scan = scan_segment(&buf);
        assert_eq!(seqs(&scan)[..2], [1, 3]);
        println!(
            "resync over a 1 MiB body of 0x01 bytes: {:?}",
            started.elapsed()
        );
    }

    /// A header whose key copies are both damaged: the key is found again from the
    /// frames, and every record is read.
    #[test]
    fn a_damaged_header_costs_nothing_when_the_key_is_found_again() {
        let (mut buf, _) = segment(4);
        buf[9] ^= 1;
        buf[21] ^= 1;
        let scan = scan_segment(&buf);
        assert_eq!((scan.format, scan.header_recovered), (Ok(FORMAT), true));
        assert_eq!(seqs(&scan), [1, 2, 3, 4]);
        let scan = scan_segment(b"not a segment at all, not a frame in it: nothing to read");
        assert_eq!(scan.format, Err(HeaderError::Unreadable));
        assert!(scan.records.is_empty());
    }
}
