//! The spool's on-disk record format. Pure: bytes in, bytes out.
//!
//! A segment file starts with a header, then frames back to back:
//!
//! ```text
//! header  = "EDGSPL02" (seed:u32le crc32c(seed):u32le) × 2    (version 2, 24 bytes)
//!         | "EDGSPL01"                                        (version 1, read only)
//! frame   = len:u32le crc:u32le payload[len]
//!           version 2: crc = crc32c continued from seed over len ‖ payload
//!           version 1: crc = crc32c(payload)
//! payload = version:u8 seq:u64le received_ms:u64le flags:u8
//!           pop:str16 route:str16 event_id:str16
//!           header_count:u16le (name:str16 value:bytes16)*
//!           body_len:u32le body
//! str16   = len:u16le bytes
//! ```
//!
//! The seed is random per segment and never leaves the disk. It makes the frame check a
//! secret one: after damage, recovery looks for the next frame byte by byte, and a body
//! that carries a well-formed frame (a sender can make one, with a valid CRC) is never
//! taken for a record. It is written twice so one damaged copy loses nothing, and can be
//! solved for from any intact frame when both are lost; the CRC covers the length, so a
//! damaged length is caught at once.
//!
//! A segment may be preallocated: zero bytes after its last frame, which appends
//! overwrite. A real frame never starts with a zero header (its payload is never empty),
//! so a zero header marks the end of what was written.

use std::fmt;

/// Bytes before each frame's payload: its length and its CRC.
pub const FRAME_HEADER_LEN: usize = 8;
/// A frame claiming more than this is corrupt (bodies are capped far below it).
pub const MAX_PAYLOAD_LEN: usize = 256 << 20;

/// How a segment's frames are checked, from its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentFormat {
    /// Written by releases before the seeded check; read, never written.
    V1,
    /// Frames checked with a CRC seeded per segment.
    V2 {
        /// The segment's seed.
        seed: u32,
    },
}

/// Why a segment's header cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Shorter than a header: the segment was created but its header never made it.
    #[error("segment header incomplete")]
    Torn,
    /// Not a spool segment: bad magic and no intact seed.
    #[error("not a spool segment (bad magic, no intact seed)")]
    Unreadable,
}

impl SegmentFormat {
    /// A version 2 format with `seed` (random: see the module's documentation).
    pub fn seeded(seed: u32) -> Self {
        SegmentFormat::V2 { seed }
    }

    /// The header a segment of this format starts with.
    pub fn header(&self) -> Vec<u8> {
        match self {
            SegmentFormat::V1 => MAGIC_V1.to_vec(),
            SegmentFormat::V2 { seed } => {
                let mut out = MAGIC_V2.to_vec();
                for _ in 0..2 {
                    out.extend_from_slice(&seed.to_le_bytes());
                    out.extend_from_slice(&crc32c::crc32c(&seed.to_le_bytes()).to_le_bytes());
                }
                out
            }
        }
    }

    /// Bytes of a segment header in this format.
    pub fn header_len(&self) -> usize {
        match self {
            SegmentFormat::V1 => MAGIC_V1.len(),
            SegmentFormat::V2 { .. } => HEADER_V2_LEN,
        }
    }

    /// Reads a segment's header: version 1 by its magic; version 2 by its magic or, when
    /// that is damaged, by a seed copy whose CRC holds.
    pub fn read(bytes: &[u8]) -> Result<SegmentFormat, HeaderError> {
        if bytes.starts_with(MAGIC_V1) {
            return Ok(SegmentFormat::V1);
        }
        if bytes.len() < HEADER_V2_LEN {
            let prefix = &bytes[..bytes.len().min(MAGIC_V2.len())];
            return Err(
                if MAGIC_V2.starts_with(prefix) || MAGIC_V1.starts_with(prefix) {
                    HeaderError::Torn
                } else {
                    HeaderError::Unreadable
                },
            );
        }
        let copies = bytes[MAGIC_V2.len()..HEADER_V2_LEN].chunks_exact(8);
        copies
            .filter_map(|copy| {
                let seed = u32::from_le_bytes(copy[..4].try_into().ok()?);
                let crc = u32::from_le_bytes(copy[4..].try_into().ok()?);
                (crc32c::crc32c(&copy[..4]) == crc).then_some(SegmentFormat::V2 { seed })
            })
            .next()
            .ok_or(HeaderError::Unreadable)
    }

    /// The header's format, or when the header cannot be read, the seed found again from
    /// the frames ([`SegmentFormat::recover`]); says which.
    pub fn detect(bytes: &[u8]) -> Result<(SegmentFormat, bool), HeaderError> {
        match SegmentFormat::read(bytes) {
            Ok(format) => Ok((format, false)),
            Err(HeaderError::Unreadable) => SegmentFormat::recover(bytes)
                .map(|format| (format, true))
                .ok_or(HeaderError::Unreadable),
            Err(error) => Err(error),
        }
    }

    /// The seed of a version 2 segment whose header is lost (both copies), found from
    /// its first frame. A frame's check is the seed shifted by the frame's length (a
    /// linear, invertible map over GF(2)) plus the plain CRC of the frame, so one frame
    /// solves for the seed, and a damaged frame solves to a wrong one of its own. Only the
    /// frame right after the header is used: frames found further on may be ones a sender
    /// built inside a body, under a seed of their choosing. The seed is taken when the
    /// frame chained after it checks under it too, or when zeros follow (a segment of one
    /// frame). `None` otherwise: the segment goes to quarantine whole.
    pub fn recover(bytes: &[u8]) -> Option<SegmentFormat> {
        if !may_start_frame(bytes.get(HEADER_V2_LEN..)?, None) {
            return None;
        }
        let (format, next) = seed_from_frame(bytes, HEADER_V2_LEN)?;
        let confirmed =
            decode_frame(&bytes[next..], &format).is_ok() || bytes[next..].iter().all(|&b| b == 0);
        confirmed.then_some(format)
    }

    /// The check of a frame with this payload.
    fn crc(&self, payload: &[u8]) -> u32 {
        match self {
            SegmentFormat::V1 => crc32c::crc32c(payload),
            SegmentFormat::V2 { seed } => {
                let len = (payload.len() as u32).to_le_bytes();
                crc32c::crc32c_append(crc32c::crc32c_append(*seed, &len), payload)
            }
        }
    }
}

/// The seed under which the frame at `start` checks, if it then decodes as a record;
/// with where the next frame would start.
fn seed_from_frame(bytes: &[u8], start: usize) -> Option<(SegmentFormat, usize)> {
    let frame = &bytes[start..];
    let len = u32::from_le_bytes(frame[..4].try_into().ok()?) as usize;
    let stored = u32::from_le_bytes(frame[4..8].try_into().ok()?);
    let plain = crc32c::crc32c(&frame[..4]);
    let plain = crc32c::crc32c_append(plain, frame.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len)?);
    let format = SegmentFormat::V2 {
        seed: unshift(stored ^ plain, 4 + len)?,
    };
    let (_, frame_len) = decode_frame(frame, &format).ok()?;
    Some((format, start + frame_len))
}

/// The `seed` with `shift(seed, len) == shifted`, where `shift` is the CRC state carried
/// over `len` zero bytes: multiplication by x^(8·len) modulo the CRC polynomial, linear,
/// so solved bit by bit over GF(2).
fn unshift(shifted: u32, len: usize) -> Option<u32> {
    // The CRC state 0x8000_0000 is the polynomial 1 (the bits are reflected).
    let factor = crc32c::crc32c_combine(0x8000_0000, 0, len);
    let columns: Vec<u32> = (0..32).map(|bit| mul_mod_poly(1 << bit, factor)).collect();
    let mut rows: Vec<(u32, bool)> = (0..32)
        .map(|row| {
            let mask = (0..32)
                .filter(|&bit| columns[bit] >> row & 1 == 1)
                .fold(0u32, |mask, bit| mask | 1 << bit);
            (mask, shifted >> row & 1 == 1)
        })
        .collect();
    for bit in 0..32 {
        let pivot = (bit..rows.len()).find(|&r| rows[r].0 >> bit & 1 == 1)?;
        rows.swap(bit, pivot);
        let (mask, value) = rows[bit];
        for (r, row) in rows.iter_mut().enumerate() {
            if r != bit && row.0 >> bit & 1 == 1 {
                row.0 ^= mask;
                row.1 ^= value;
            }
        }
    }
    Some((0..32).fold(0u32, |seed, bit| seed | u32::from(rows[bit].1) << bit))
}

/// `a · b` modulo the CRC-32C polynomial, both in the CRC's reflected bit order.
fn mul_mod_poly(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    for bit in (0..32).rev() {
        if a >> bit & 1 == 1 {
            product ^= b;
        }
        b = if b & 1 == 1 {
            (b >> 1) ^ CRC32C_POLY
        } else {
            b >> 1
        };
    }
    product
}

const MAGIC_V1: &[u8; 8] = b"EDGSPL01";
const MAGIC_V2: &[u8; 8] = b"EDGSPL02";
const HEADER_V2_LEN: usize = 8 + 2 * 8;
/// CRC-32C's polynomial, reflected.
const CRC32C_POLY: u32 = 0x82F6_3B78;
const VERSION: u8 = 1;
const FLAG_EARLY: u8 = 1;

/// One stored webhook, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record's sequence number.
    pub seq: u64,
    /// Unix time in milliseconds when the edge received the request.
    pub received_ms: u64,
    /// The request arrived as TLS 0-RTT early data.
    pub early: bool,
    /// The PoP that stored it.
    pub pop: String,
    /// The route it came in on.
    pub route: String,
    /// Its event id.
    pub event_id: String,
    /// The headers kept with it.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

/// A record decoded in place, borrowing from the segment bytes (recovery reads whole
/// segments and needs only a few fields of each record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The record's sequence number.
    pub seq: u64,
    /// Unix time in milliseconds when the edge received the request.
    pub received_ms: u64,
    /// Whether it came as TLS early data.
    pub early: bool,
    /// The PoP that stored it.
    pub pop: &'a str,
    /// The route it came in on.
    pub route: &'a str,
    /// Its event id.
    pub event_id: &'a str,
    /// The headers kept with it.
    pub headers: Vec<(&'a str, &'a [u8])>,
    /// The body.
    pub body: &'a [u8],
}

/// A record the format cannot hold: a string or header over 64 KiB, or too many headers.
/// The config's head limits keep requests far below it; refused, never truncated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("record field over the spool format's limit")]
pub struct FieldTooLarge;

/// Why a frame cannot be read.
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
    /// The record, borrowed.
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
    /// The record, owned.
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

    /// Appends this record as one frame of `format` to `out`; returns the frame's
    /// length. A record the format cannot hold leaves `out` as it was.
    pub fn encode_frame(
        &self,
        format: &SegmentFormat,
        out: &mut Vec<u8>,
    ) -> Result<usize, FieldTooLarge> {
        let start = out.len();
        let encoded = self.encode_at(format, out, start);
        if encoded.is_err() {
            out.truncate(start);
        }
        encoded
    }

    fn encode_at(
        &self,
        format: &SegmentFormat,
        out: &mut Vec<u8>,
        start: usize,
    ) -> Result<usize, FieldTooLarge> {
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
        let crc = format.crc(&out[start + FRAME_HEADER_LEN..]);
        out[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        Ok(out.len() - start)
    }
}

/// The length of the frame at the start of `buf`, once its header is there.
pub fn frame_len(header: &[u8; FRAME_HEADER_LEN]) -> Result<usize, FrameError> {
    let [l0, l1, l2, l3, ..] = *header;
    let len = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
    if len > MAX_PAYLOAD_LEN {
        return Err(FrameError::Corrupt("length over the maximum"));
    }
    Ok(FRAME_HEADER_LEN + len)
}

/// Whether this frame header is preallocated space that nothing was written to yet.
pub fn is_unwritten(header: &[u8; FRAME_HEADER_LEN]) -> bool {
    header.iter().all(|&b| b == 0)
}

/// Decodes the frame of `format` at the start of `buf`; returns the record and the
/// frame's length.
pub fn decode_frame<'a>(
    buf: &'a [u8],
    format: &SegmentFormat,
) -> Result<(RecordView<'a>, usize), FrameError> {
    let header: &[u8; FRAME_HEADER_LEN] = buf.first_chunk().ok_or(FrameError::Torn)?;
    let total = frame_len(header)?;
    let payload = buf.get(FRAME_HEADER_LEN..total).ok_or(FrameError::Torn)?;
    let [.., c0, c1, c2, c3] = *header;
    let crc = u32::from_le_bytes([c0, c1, c2, c3]);
    if format.crc(payload) != crc {
        return Err(FrameError::Corrupt("crc mismatch"));
    }
    let record = decode_payload(payload).map_err(FrameError::Corrupt)?;
    Ok((record, total))
}

/// Decodes the frame at the start of `buf` with the length its payload's own fields give
/// rather than the length its header stores: for a frame whose length field is damaged.
/// The check covers the length as written, so a match is the frame as it was written
/// (and no other length can match: a payload decodes only at its own length).
pub fn decode_by_payload<'a>(
    buf: &'a [u8],
    format: &SegmentFormat,
) -> Option<(RecordView<'a>, usize)> {
    let crc = u32::from_le_bytes(buf.get(4..FRAME_HEADER_LEN)?.try_into().ok()?);
    let rest = &buf[FRAME_HEADER_LEN..];
    let (record, len) = parse_payload(rest).ok()?;
    (len <= MAX_PAYLOAD_LEN && format.crc(&rest[..len]) == crc)
        .then_some((record, FRAME_HEADER_LEN + len))
}

/// Whether the frame at the start of `written` (a segment's bytes from the frame to the
/// end of what was written) is the end of a write that never finished rather than damage
/// to a frame that was written whole: its header never written, or it runs past the
/// written bytes by its stored length and by its payload's own fields alike, or it holds
/// a sector never written (pages of one write reach the disk in any order). A write is
/// acknowledged only after its fdatasync returned, so such a frame was never
/// acknowledged; a frame written whole that fails its check may have been.
pub fn is_unfinished_write(written: &[u8]) -> bool {
    let Some(header) = written.first_chunk::<FRAME_HEADER_LEN>() else {
        return true;
    };
    if is_unwritten(header) {
        return true;
    }
    let stored = FRAME_HEADER_LEN
        + u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let by_fields =
        parse_payload(&written[FRAME_HEADER_LEN..]).map(|(_, len)| FRAME_HEADER_LEN + len);
    let runs_past = stored > written.len() && by_fields.is_err();
    runs_past || holds_unwritten_sector(&written[FRAME_HEADER_LEN..stored.min(written.len())])
}

/// Whether `bytes` hold a run of zeros as long as a sector: the mark a sector of a torn
/// write leaves when it never reached a preallocated file.
fn holds_unwritten_sector(bytes: &[u8]) -> bool {
    let mut zeros = 0;
    bytes.iter().any(|&b| {
        zeros = if b == 0 { zeros + 1 } else { 0 };
        zeros >= SECTOR
    })
}

/// What a damaged frame still says, unchecked: its sequence number and event id when the
/// damage spared them. For naming what was lost, never for delivering it.
pub fn salvage(buf: &[u8]) -> Option<(u64, String)> {
    let header: &[u8; FRAME_HEADER_LEN] = buf.get(..FRAME_HEADER_LEN)?.try_into().ok()?;
    let len = frame_len(header).ok()? - FRAME_HEADER_LEN;
    let payload = &buf[FRAME_HEADER_LEN..(FRAME_HEADER_LEN + len).min(buf.len())];
    let mut r = Cursor(payload);
    if r.u8()? != VERSION {
        return None;
    }
    let seq = r.u64()?;
    r.u64()?;
    r.u8()?;
    r.str16()?;
    r.str16()?;
    let event_id = r.str16()?;
    let plausible = !event_id.is_empty() && event_id.bytes().all(|b| b.is_ascii_graphic());
    plausible.then(|| (seq, event_id.to_owned()))
}

/// Whether `buf` could start a frame that follows sequence number `after`: the checks
/// that cost nothing (a plausible length, the payload's version, a greater sequence
/// number) before the CRC. Resynchronising after damage tries every offset.
pub fn may_start_frame(buf: &[u8], after: Option<u64>) -> bool {
    let Some(header) = buf.get(..FRAME_HEADER_LEN) else {
        return false;
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if !(MIN_PAYLOAD_LEN..=MAX_PAYLOAD_LEN).contains(&len) || buf.len() < FRAME_HEADER_LEN + len {
        return false;
    }
    let payload = &buf[FRAME_HEADER_LEN..];
    if payload[0] != VERSION {
        return false;
    }
    let seq = u64::from_le_bytes(payload[1..9].try_into().unwrap_or([0; 8]));
    after.is_none_or(|after| seq > after)
}

/// The unit a disk writes whole: a torn write leaves whole sectors unwritten.
const SECTOR: usize = 512;

/// The smallest payload a record encodes to: version, seq, time, flags, three empty
/// strings, no headers, an empty body.
const MIN_PAYLOAD_LEN: usize = 1 + 8 + 8 + 1 + 3 * 2 + 2 + 4;

/// Only what version 1 writes decodes: every byte of a frame has one meaning, so a
/// record re-encodes to exactly the bytes it came from.
fn decode_payload(payload: &[u8]) -> Result<RecordView<'_>, &'static str> {
    let (record, used) = parse_payload(payload)?;
    if used != payload.len() {
        return Err("bytes after the body");
    }
    Ok(record)
}

/// Reads a payload's fields from the start of `bytes`; returns the record and how many
/// bytes its fields say it has (its own length, whatever the frame header claims).
fn parse_payload(bytes: &[u8]) -> Result<(RecordView<'_>, usize), &'static str> {
    const OVERRUN: &str = "fields overrun the frame";
    let mut r = Cursor(bytes);
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
    let record = RecordView {
        seq,
        received_ms,
        early: flags & FLAG_EARLY != 0,
        pop,
        route,
        event_id,
        headers,
        body,
    };
    Ok((record, bytes.len() - r.0.len()))
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

    /// The format the tests write (version 2, a fixed seed).
    pub(crate) const FORMAT: SegmentFormat = SegmentFormat::V2 { seed: 0x5eed_5eed };

    pub(crate) fn sample(seq: u64, event_id: &str) -> Record {
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
        let len = record.view().encode_frame(&FORMAT, &mut buf).unwrap();
        assert_eq!(len, buf.len());
        let (decoded, used) = decode_frame(&buf, &FORMAT).unwrap();
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
        assert_eq!(
            big_header.view().encode_frame(&FORMAT, &mut buf),
            Err(FieldTooLarge)
        );
        let mut many = sample(3, "n");
        many.headers = vec![("x".into(), Vec::new()); 65_536];
        assert_eq!(
            many.view().encode_frame(&FORMAT, &mut buf),
            Err(FieldTooLarge)
        );
        assert_eq!(buf, b"before");
        let mut at_limit = sample(4, "l");
        at_limit
            .headers
            .push(("x-github-big".into(), vec![b'a'; 65_535]));
        let len = at_limit.view().encode_frame(&FORMAT, &mut buf).unwrap();
        let (decoded, used) = decode_frame(&buf[6..], &FORMAT).unwrap();
        assert_eq!((decoded.to_owned_record(), used), (at_limit, len));
    }

    #[test]
    fn every_truncation_is_torn() {
        let mut buf = Vec::new();
        sample(1, "a")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        for cut in 0..buf.len() {
            assert_eq!(
                decode_frame(&buf[..cut], &FORMAT).unwrap_err(),
                FrameError::Torn,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let mut buf = Vec::new();
        sample(7, "flip")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            let result = decode_frame(&bad, &FORMAT);
            assert!(result.is_err(), "flip at {i} went unnoticed");
        }
    }

    /// A frame whose CRC holds but whose flags byte has bits version 1 never writes
    /// (found by the spool_scan fuzzer: it decoded, then re-encoded differently).
    #[test]
    fn unknown_flags_are_corrupt() {
        let mut buf = Vec::new();
        sample(3, "flags")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        let flags_at = FRAME_HEADER_LEN + 1 + 8 + 8;
        buf[flags_at] |= 0b110;
        let crc = FORMAT.crc(&buf[FRAME_HEADER_LEN..]);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_frame(&buf, &FORMAT).unwrap_err(),
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
        record.view().encode_frame(&FORMAT, &mut buf).unwrap();
        assert!(!is_unwritten(buf[..FRAME_HEADER_LEN].try_into().unwrap()));
        assert!(is_unwritten(&[0; FRAME_HEADER_LEN]));
    }

    #[test]
    fn absurd_length_is_corrupt_not_an_allocation() {
        let mut buf = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        buf.extend_from_slice(&[0; 16]);
        assert_eq!(
            decode_frame(&buf, &FORMAT).unwrap_err(),
            FrameError::Corrupt("length over the maximum")
        );
    }

    /// A segment written before the seeded check (this frame's bytes: version 1, CRC over
    /// the payload alone) is still read; under a seed it is not a frame.
    #[test]
    fn a_version_1_segment_is_read() {
        let record = sample(9, "legacy");
        let mut frame = Vec::new();
        record
            .view()
            .encode_frame(&SegmentFormat::V1, &mut frame)
            .unwrap();
        let crc = u32::from_le_bytes(frame[4..8].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&frame[FRAME_HEADER_LEN..]));
        let mut segment = b"EDGSPL01".to_vec();
        segment.extend_from_slice(&frame);
        let format = SegmentFormat::read(&segment).unwrap();
        assert_eq!((format, format.header_len()), (SegmentFormat::V1, 8));
        let (decoded, _) = decode_frame(&segment[8..], &format).unwrap();
        assert_eq!(decoded.to_owned_record(), record);
        assert!(decode_frame(&segment[8..], &FORMAT).is_err());
    }

    /// A frame made under another seed (a sender who put one in a body cannot know the
    /// segment's) is not a frame of this segment.
    #[test]
    fn a_frame_under_another_seed_is_not_a_frame() {
        let mut buf = Vec::new();
        sample(5, "forged")
            .view()
            .encode_frame(&SegmentFormat::seeded(1), &mut buf)
            .unwrap();
        assert!(may_start_frame(&buf, Some(4)));
        assert_eq!(
            decode_frame(&buf, &SegmentFormat::seeded(2)).unwrap_err(),
            FrameError::Corrupt("crc mismatch")
        );
    }

    #[test]
    fn a_header_survives_a_damaged_magic_or_seed_copy_but_not_both_copies() {
        let header = FORMAT.header();
        assert_eq!(header.len(), FORMAT.header_len());
        assert_eq!(SegmentFormat::read(&header), Ok(FORMAT));
        for damaged in [0, 9, 13, 17, 22] {
            let mut bad = header.clone();
            bad[damaged] ^= 0x10;
            assert_eq!(SegmentFormat::read(&bad), Ok(FORMAT), "byte {damaged}");
        }
        let mut both = header.clone();
        both[9] ^= 1;
        both[17] ^= 1;
        assert_eq!(SegmentFormat::read(&both), Err(HeaderError::Unreadable));
        assert_eq!(SegmentFormat::read(&header[..12]), Err(HeaderError::Torn));
        assert_eq!(SegmentFormat::read(b"JUNK"), Err(HeaderError::Unreadable));
    }

    /// Both seed copies gone (a zeroed block over the header and the first records):
    /// the seed is found again from the frames after the damage.
    #[test]
    fn a_lost_seed_is_recovered_from_the_first_frame() {
        let format = SegmentFormat::seeded(0x89ab_cdef);
        let mut segment = format.header();
        for seq in 1..=6 {
            let mut record = sample(seq, &format!("k{seq}"));
            record.body = vec![b'x'; 100 * seq as usize];
            record.view().encode_frame(&format, &mut segment).unwrap();
        }
        assert_eq!(SegmentFormat::recover(&segment), Some(format));
        segment[..HEADER_V2_LEN].fill(0);
        assert_eq!(SegmentFormat::read(&segment), Err(HeaderError::Unreadable));
        assert_eq!(SegmentFormat::recover(&segment), Some(format));
        assert_eq!(SegmentFormat::recover(&[0; 100]), None);
        // The first frame gone too: no frame further on is trusted with the seed.
        segment[..700].fill(0);
        assert_eq!(SegmentFormat::recover(&segment), None);
    }

    /// The first frame damaged: it solves to a wrong seed of its own, which the frame
    /// after it does not confirm.
    #[test]
    fn a_damaged_first_frame_does_not_give_a_seed() {
        let format = SegmentFormat::seeded(0x0bad_5eed);
        let mut segment = format.header();
        for seq in 1..=3 {
            sample(seq, &format!("k{seq}"))
                .view()
                .encode_frame(&format, &mut segment)
                .unwrap();
        }
        segment[..HEADER_V2_LEN].fill(0);
        segment[HEADER_V2_LEN + 30] ^= 0x04;
        assert_eq!(SegmentFormat::recover(&segment), None);
    }

    /// A sender's body holding two chained frames built under a seed of their choice:
    /// with the header and the first frame lost, their seed is not taken (their records
    /// would be delivered as verified); the segment is unreadable instead.
    #[test]
    fn frames_inside_a_body_cannot_choose_the_seed() {
        let format = SegmentFormat::seeded(0x600d_5eed);
        let chosen = SegmentFormat::seeded(0x0bad_0bad);
        let mut forged = Vec::new();
        for seq in [7, 8] {
            sample(seq, "forged")
                .view()
                .encode_frame(&chosen, &mut forged)
                .unwrap();
        }
        let mut segment = format.header();
        let mut carrier = sample(1, "carrier");
        carrier.body = forged;
        carrier.view().encode_frame(&format, &mut segment).unwrap();
        sample(2, "after")
            .view()
            .encode_frame(&format, &mut segment)
            .unwrap();
        // The first sector lost: the header and the start of the carrier frame.
        segment[..HEADER_V2_LEN + 40].fill(0);
        assert_eq!(SegmentFormat::recover(&segment), None);
        assert_eq!(
            SegmentFormat::detect(&segment),
            Err(HeaderError::Unreadable)
        );
    }

    #[test]
    fn unshift_inverts_the_crc_shift() {
        for len in [1, 4, 30, 4096, 1 << 20] {
            for state in [1u32, 0x8000_0000, 0xdead_beef, 0x5eed_5eed] {
                let shifted = crc32c::crc32c_combine(state, 0, len);
                assert_eq!(unshift(shifted, len), Some(state), "len {len}");
            }
        }
    }

    #[test]
    fn a_damaged_frame_still_names_what_it_held() {
        let mut buf = Vec::new();
        sample(77, "delivery-77")
            .view()
            .encode_frame(&FORMAT, &mut buf)
            .unwrap();
        let body_at = buf.len() - 3;
        buf[body_at] ^= 0xff;
        assert!(decode_frame(&buf, &FORMAT).is_err());
        assert_eq!(salvage(&buf), Some((77, "delivery-77".to_owned())));
        assert_eq!(salvage(&[0xff; 40]), None);
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
            record.view().encode_frame(&FORMAT, &mut buf).unwrap();
            let (decoded, used) = decode_frame(&buf, &FORMAT).unwrap();
            prop_assert_eq!(used, buf.len());
            prop_assert_eq!(decoded.to_owned_record(), record);
            prop_assert!(!is_unwritten(buf[..FRAME_HEADER_LEN].try_into().unwrap()));
        }
    }
}
