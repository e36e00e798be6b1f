//! The spool's on-disk record format. Pure: bytes in, bytes out.
//!
//! A segment file starts with [`SEGMENT_MAGIC`], then frames back to back:
//!
//! ```text
//! frame   = len:u32le  crc32c:u32le  payload[len]          (crc over payload)
//! payload = version:u8 seq:u64le received_ms:u64le flags:u8
//!           pop:str16 route:str16 event_id:str16
//!           header_count:u16le (name:str16 value:bytes16)*
//!           body_len:u32le body
//! str16   = len:u16le bytes
//! ```
//!
//! A segment may be preallocated: zero bytes after its last frame, which appends
//! overwrite. A real frame never starts with a zero header (its payload is never empty),
//! so a zero header marks the end of what was written.

use std::fmt;

pub const SEGMENT_MAGIC: &[u8; 8] = b"EDGSPL01";
pub const FRAME_HEADER_LEN: usize = 8;
/// A frame claiming more than this is corrupt (bodies are capped far below it).
pub const MAX_PAYLOAD_LEN: usize = 256 << 20;

const VERSION: u8 = 1;
const FLAG_EARLY: u8 = 1;

/// One stored webhook, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    /// Unix time in milliseconds when the edge received the request.
    pub received_ms: u64,
    /// The request arrived as TLS 0-RTT early data.
    pub early: bool,
    pub pop: String,
    pub route: String,
    pub event_id: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// A record decoded in place, borrowing from the segment bytes (recovery reads whole
/// segments and needs only a few fields of each record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub seq: u64,
    pub received_ms: u64,
    pub early: bool,
    pub pop: &'a str,
    pub route: &'a str,
    pub event_id: &'a str,
    pub headers: Vec<(&'a str, &'a [u8])>,
    pub body: &'a [u8],
}

/// A record the format cannot hold: a string or header over 64 KiB, or too many headers.
/// The config's head limits keep requests far below it; refused, never truncated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("record field over the spool format's limit")]
pub struct FieldTooLarge;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The bytes end before the frame does: a write that did not finish.
    Torn,
    /// The frame is complete but wrong: CRC mismatch or inconsistent fields.
    Corrupt(&'static str),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Torn => f.write_str("torn (incomplete) frame"),
            FrameError::Corrupt(why) => write!(f, "corrupt frame: {why}"),
        }
    }
}

impl Record {
    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            seq: self.seq,
            received_ms: self.received_ms,
            early: self.early,
            pop: &self.pop,
            route: &self.route,
            event_id: &self.event_id,
            headers: self
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_slice()))
                .collect(),
            body: &self.body,
        }
    }
}

impl RecordView<'_> {
    pub fn to_owned_record(&self) -> Record {
        Record {
            seq: self.seq,
            received_ms: self.received_ms,
            early: self.early,
            pop: self.pop.to_owned(),
            route: self.route.to_owned(),
            event_id: self.event_id.to_owned(),
            headers: self
                .headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
                .collect(),
            body: self.body.to_vec(),
        }
    }

    /// Appends this record as one frame to `out`; returns the frame's length. A record
    /// the format cannot hold leaves `out` as it was.
    pub fn encode_frame(&self, out: &mut Vec<u8>) -> Result<usize, FieldTooLarge> {
        let start = out.len();
        let encoded = self.encode_at(out, start);
        if encoded.is_err() {
            out.truncate(start);
        }
        encoded
    }

    fn encode_at(&self, out: &mut Vec<u8>, start: usize) -> Result<usize, FieldTooLarge> {
        out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
        out.push(VERSION);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.received_ms.to_le_bytes());
        out.push(if self.early { FLAG_EARLY } else { 0 });
        put16(out, self.pop.as_bytes())?;
        put16(out, self.route.as_bytes())?;
        put16(out, self.event_id.as_bytes())?;
        let count = u16::try_from(self.headers.len()).map_err(|_| FieldTooLarge)?;
        out.extend_from_slice(&count.to_le_bytes());
        for (name, value) in &self.headers {
            put16(out, name.as_bytes())?;
            put16(out, value)?;
        }
        let body_len = u32::try_from(self.body.len()).map_err(|_| FieldTooLarge)?;
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(self.body);
        let payload_len = out.len() - start - FRAME_HEADER_LEN;
        if payload_len > MAX_PAYLOAD_LEN {
            return Err(FieldTooLarge);
        }
        let crc = crc32c::crc32c(&out[start + FRAME_HEADER_LEN..]);
        out[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        Ok(out.len() - start)
    }
}

/// The length of the frame at the start of `buf`, once its header is there.
pub fn frame_len(header: &[u8; FRAME_HEADER_LEN]) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    if len > MAX_PAYLOAD_LEN {
        return Err(FrameError::Corrupt("length over the maximum"));
    }
    Ok(FRAME_HEADER_LEN + len)
}

/// Whether this frame header is preallocated space that nothing was written to yet.
pub fn is_unwritten(header: &[u8; FRAME_HEADER_LEN]) -> bool {
    header.iter().all(|&b| b == 0)
}

/// Decodes the frame at the start of `buf`; returns the record and the frame's length.
pub fn decode_frame(buf: &[u8]) -> Result<(RecordView<'_>, usize), FrameError> {
    let header: &[u8; FRAME_HEADER_LEN] = buf
        .get(..FRAME_HEADER_LEN)
        .ok_or(FrameError::Torn)?
        .try_into()
        .expect("8 bytes");
    let total = frame_len(header)?;
    let payload = buf.get(FRAME_HEADER_LEN..total).ok_or(FrameError::Torn)?;
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    if crc32c::crc32c(payload) != crc {
        return Err(FrameError::Corrupt("crc mismatch"));
    }
    let record = decode_payload(payload).map_err(FrameError::Corrupt)?;
    Ok((record, total))
}

/// Only what version 1 writes decodes: every byte of a frame has one meaning, so a
/// record re-encodes to exactly the bytes it came from.
fn decode_payload(payload: &[u8]) -> Result<RecordView<'_>, &'static str> {
    const OVERRUN: &str = "fields overrun the frame";
    let mut r = Cursor(payload);
    if r.u8().ok_or(OVERRUN)? != VERSION {
        return Err("unknown version");
    }
    let seq = r.u64().ok_or(OVERRUN)?;
    let received_ms = r.u64().ok_or(OVERRUN)?;
    let flags = r.u8().ok_or(OVERRUN)?;
    if flags & !FLAG_EARLY != 0 {
        return Err("unknown flags");
    }
    let pop = r.str16().ok_or(OVERRUN)?;
    let route = r.str16().ok_or(OVERRUN)?;
    let event_id = r.str16().ok_or(OVERRUN)?;
    let count = r.u16().ok_or(OVERRUN)?;
    let mut headers = Vec::with_capacity(count.into());
    for _ in 0..count {
        headers.push((r.str16().ok_or(OVERRUN)?, r.bytes16().ok_or(OVERRUN)?));
    }
    let body_len = r.u32().ok_or(OVERRUN)? as usize;
    let body = r.take(body_len).ok_or(OVERRUN)?;
    if !r.0.is_empty() {
        return Err("bytes after the body");
    }
    Ok(RecordView {
        seq,
        received_ms,
        early: flags & FLAG_EARLY != 0,
        pop,
        route,
        event_id,
        headers,
        body,
    })
}

fn put16(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), FieldTooLarge> {
    let len = u16::try_from(bytes.len()).map_err(|_| FieldTooLarge)?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes16(&mut self) -> Option<&'a [u8]> {
        let len = self.u16()?;
        self.take(len.into())
    }
    fn str16(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes16()?).ok()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    pub fn sample(seq: u64, event_id: &str) -> Record {
        Record {
            seq,
            received_ms: 1_764_000_000_000 + seq,
            early: seq.is_multiple_of(2),
            pop: "fra1".into(),
            route: "github".into(),
            event_id: event_id.into(),
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("x-github-event".into(), b"push".to_vec()),
            ],
            body: format!(r#"{{"n":{seq}}}"#).into_bytes(),
        }
    }

    #[test]
    fn round_trip() {
        let record = sample(42, "delivery-42");
        let mut buf = Vec::new();
        let len = record.view().encode_frame(&mut buf).unwrap();
        assert_eq!(len, buf.len());
        let (decoded, used) = decode_frame(&buf).unwrap();
        assert_eq!(used, len);
        assert_eq!(decoded.to_owned_record(), record);
    }

    #[test]
    fn a_field_over_its_limit_is_refused_and_leaves_the_buffer_as_it_was() {
        let mut buf = b"before".to_vec();
        let mut big_header = sample(2, "h");
        big_header
            .headers
            .push(("x-github-big".into(), vec![b'a'; 65_536]));
        assert_eq!(big_header.view().encode_frame(&mut buf), Err(FieldTooLarge));
        let mut many = sample(3, "n");
        many.headers = vec![("x".into(), Vec::new()); 65_536];
        assert_eq!(many.view().encode_frame(&mut buf), Err(FieldTooLarge));
        assert_eq!(buf, b"before");
        let mut at_limit = sample(4, "l");
        at_limit
            .headers
            .push(("x-github-big".into(), vec![b'a'; 65_535]));
        let len = at_limit.view().encode_frame(&mut buf).unwrap();
        let (decoded, used) = decode_frame(&buf[6..]).unwrap();
        assert_eq!((decoded.to_owned_record(), used), (at_limit, len));
    }

    #[test]
    fn every_truncation_is_torn() {
        let mut buf = Vec::new();
        sample(1, "a").view().encode_frame(&mut buf).unwrap();
        for cut in 0..buf.len() {
            assert_eq!(
                decode_frame(&buf[..cut]).unwrap_err(),
                FrameError::Torn,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let mut buf = Vec::new();
        sample(7, "flip").view().encode_frame(&mut buf).unwrap();
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            let result = decode_frame(&bad);
            assert!(result.is_err(), "flip at {i} went unnoticed");
        }
    }

    /// A frame whose CRC holds but whose flags byte has bits version 1 never writes
    /// (found by the spool_scan fuzzer: it decoded, then re-encoded differently).
    #[test]
    fn unknown_flags_are_corrupt() {
        let mut buf = Vec::new();
        sample(3, "flags").view().encode_frame(&mut buf).unwrap();
        let flags_at = FRAME_HEADER_LEN + 1 + 8 + 8;
        buf[flags_at] |= 0b110;
        let crc = crc32c::crc32c(&buf[FRAME_HEADER_LEN..]);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_frame(&buf).unwrap_err(),
            FrameError::Corrupt("unknown flags")
        );
    }

    /// Even the smallest record's header differs from preallocated zeros.
    #[test]
    fn no_frame_header_looks_unwritten() {
        let mut record = sample(0, "");
        record.headers.clear();
        record.body.clear();
        let mut buf = Vec::new();
        record.view().encode_frame(&mut buf).unwrap();
        assert!(!is_unwritten(buf[..FRAME_HEADER_LEN].try_into().unwrap()));
        assert!(is_unwritten(&[0; FRAME_HEADER_LEN]));
    }

    #[test]
    fn absurd_length_is_corrupt_not_an_allocation() {
        let mut buf = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        buf.extend_from_slice(&[0; 16]);
        assert_eq!(
            decode_frame(&buf).unwrap_err(),
            FrameError::Corrupt("length over the maximum")
        );
    }

    proptest! {
        #[test]
        fn arbitrary_records_round_trip(
            seq in any::<u64>(),
            ms in any::<u64>(),
            early in any::<bool>(),
            id in "[!-~]{1,64}",
            headers in proptest::collection::vec(("[a-z-]{1,20}", proptest::collection::vec(any::<u8>(), 0..64)), 0..8),
            body in proptest::collection::vec(any::<u8>(), 0..2048),
        ) {
            let record = Record { seq, received_ms: ms, early, pop: "p".into(), route: "r".into(), event_id: id, headers, body };
            let mut buf = Vec::new();
            record.view().encode_frame(&mut buf).unwrap();
            let (decoded, used) = decode_frame(&buf).unwrap();
            prop_assert_eq!(used, buf.len());
            prop_assert_eq!(decoded.to_owned_record(), record);
            prop_assert!(!is_unwritten(buf[..FRAME_HEADER_LEN].try_into().unwrap()));
        }
    }
}
