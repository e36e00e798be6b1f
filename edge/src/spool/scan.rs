//! Recovery's reading of one segment: which records are whole, and where the valid
//! prefix ends. Pure, so torn tails and flipped bytes are tested on byte buffers.

use super::record::{FrameError, RecordView, SEGMENT_MAGIC, decode_frame};

#[derive(Debug)]
pub struct SegmentScan<'a> {
    /// Every whole record before the first bad one, in file order.
    pub records: Vec<RecordView<'a>>,
    /// The size of each of those records' frames, in the same order.
    pub frame_lens: Vec<usize>,
    /// Length of the valid prefix (magic plus whole records).
    pub valid_len: usize,
    /// Why the scan stopped before the end of the bytes, if it did. Zeros from the end
    /// of the valid prefix to the end of the bytes are preallocated room, not a stop.
    pub stop: Option<ScanStop>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanStop {
    pub offset: usize,
    pub error: ScanError,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// Shorter than the magic: the segment was created but its header never made it.
    #[error("segment header incomplete")]
    HeaderTorn,
    #[error("not a spool segment (bad magic)")]
    BadMagic,
    #[error("{0}")]
    Frame(FrameError),
    #[error("sequence number does not increase")]
    SeqNotIncreasing,
}

pub fn scan_segment(bytes: &[u8]) -> SegmentScan<'_> {
    let mut scan = SegmentScan {
        records: Vec::new(),
        frame_lens: Vec::new(),
        valid_len: 0,
        stop: None,
    };
    if bytes.len() < SEGMENT_MAGIC.len() {
        if !SEGMENT_MAGIC.starts_with(bytes) {
            scan.stop = Some(ScanStop {
                offset: 0,
                error: ScanError::BadMagic,
            });
        } else {
            scan.stop = Some(ScanStop {
                offset: 0,
                error: ScanError::HeaderTorn,
            });
        }
        return scan;
    }
    if &bytes[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
        scan.stop = Some(ScanStop {
            offset: 0,
            error: ScanError::BadMagic,
        });
        return scan;
    }
    let mut offset = SEGMENT_MAGIC.len();
    let mut last_seq = None;
    while offset < bytes.len() {
        if bytes[offset..].iter().all(|&b| b == 0) {
            break;
        }
        match decode_frame(&bytes[offset..]) {
            Ok((record, len)) => {
                if last_seq.is_some_and(|last| record.seq <= last) {
                    scan.stop = Some(ScanStop {
                        offset,
                        error: ScanError::SeqNotIncreasing,
                    });
                    break;
                }
                last_seq = Some(record.seq);
                scan.records.push(record);
                scan.frame_lens.push(len);
                offset += len;
            }
            Err(error) => {
                scan.stop = Some(ScanStop {
                    offset,
                    error: ScanError::Frame(error),
                });
                break;
            }
        }
    }
    scan.valid_len = offset;
    scan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::record::FRAME_HEADER_LEN;
    use crate::spool::record::tests::sample;

    fn segment(n: u64) -> (Vec<u8>, Vec<usize>) {
        let mut buf = SEGMENT_MAGIC.to_vec();
        let mut ends = Vec::new();
        for seq in 1..=n {
            sample(seq, &format!("id-{seq}"))
                .view()
                .encode_frame(&mut buf)
                .unwrap();
            ends.push(buf.len());
        }
        (buf, ends)
    }

    #[test]
    fn whole_segment_scans_clean() {
        let (buf, _) = segment(5);
        let scan = scan_segment(&buf);
        assert_eq!(scan.records.len(), 5);
        assert_eq!(scan.valid_len, buf.len());
        assert_eq!(scan.stop, None);
    }

    #[test]
    fn empty_and_header_only_segments() {
        let scan = scan_segment(&[]);
        assert_eq!(scan.stop.unwrap().error, ScanError::HeaderTorn);
        assert_eq!(scan.valid_len, 0);
        let scan = scan_segment(&SEGMENT_MAGIC[..3]);
        assert_eq!(scan.stop.unwrap().error, ScanError::HeaderTorn);
        let scan = scan_segment(SEGMENT_MAGIC);
        assert_eq!(
            (scan.records.len(), scan.valid_len, scan.stop),
            (0, 8, None)
        );
        assert_eq!(
            scan_segment(b"garbage!more").stop.unwrap().error,
            ScanError::BadMagic
        );
    }

    #[test]
    fn torn_tail_at_every_cut_keeps_every_whole_record() {
        let (buf, ends) = segment(3);
        for cut in SEGMENT_MAGIC.len()..buf.len() {
            let scan = scan_segment(&buf[..cut]);
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(scan.records.len(), whole, "cut {cut}");
            let expected_valid = if whole == 0 {
                SEGMENT_MAGIC.len()
            } else {
                ends[whole - 1]
            };
            assert_eq!(scan.valid_len, expected_valid, "cut {cut}");
            if cut == expected_valid {
                assert_eq!(scan.stop, None);
            } else {
                assert_eq!(
                    scan.stop.unwrap().error,
                    ScanError::Frame(FrameError::Torn),
                    "cut {cut}"
                );
            }
        }
    }

    #[test]
    fn flipped_byte_in_the_last_record_cuts_only_that_record() {
        let (mut buf, ends) = segment(4);
        let middle_of_last = (ends[2] + ends[3]) / 2;
        buf[middle_of_last] ^= 0x01;
        let scan = scan_segment(&buf);
        assert_eq!(scan.records.len(), 3);
        assert_eq!(scan.valid_len, ends[2]);
        assert_eq!(
            scan.stop.unwrap().error,
            ScanError::Frame(FrameError::Corrupt("crc mismatch"))
        );
    }

    #[test]
    fn zeros_after_the_records_are_room_not_damage() {
        let (mut buf, ends) = segment(3);
        buf.resize(buf.len() + 4096, 0);
        let scan = scan_segment(&buf);
        assert_eq!(
            (scan.records.len(), scan.valid_len, scan.stop),
            (3, ends[2], None)
        );
        let mut empty = SEGMENT_MAGIC.to_vec();
        empty.resize(4096, 0);
        let scan = scan_segment(&empty);
        assert_eq!(
            (scan.records.len(), scan.valid_len, scan.stop),
            (0, SEGMENT_MAGIC.len(), None)
        );
    }

    /// A write that reached the disk only in part (pages land in any order) leaves
    /// non-zero bytes after a zero header: damage, cut like any torn tail.
    #[test]
    fn a_torn_write_into_preallocated_room_is_a_stop() {
        let (whole, ends) = segment(3);
        let mut buf = whole.clone();
        buf[ends[1]..ends[1] + FRAME_HEADER_LEN].fill(0);
        buf.resize(buf.len() + 4096, 0);
        let scan = scan_segment(&buf);
        assert_eq!((scan.records.len(), scan.valid_len), (2, ends[1]));
        assert!(scan.stop.is_some());
    }

    #[test]
    fn sequence_must_increase() {
        let mut buf = SEGMENT_MAGIC.to_vec();
        sample(5, "a").view().encode_frame(&mut buf).unwrap();
        let end = buf.len();
        sample(5, "b").view().encode_frame(&mut buf).unwrap();
        let scan = scan_segment(&buf);
        assert_eq!(scan.records.len(), 1);
        assert_eq!(
            scan.stop,
            Some(ScanStop {
                offset: end,
                error: ScanError::SeqNotIncreasing
            })
        );
    }
}
