//! A budget for HTTP/2 frames that advance no request. SETTINGS, PING, WINDOW_UPDATE,
//! PRIORITY, RST_STREAM, empty DATA that does not end its stream and frames of unknown
//! type are each a few bytes to send and a parse, a state change and often an answer to
//! handle: a peer sending nothing else (21 M SETTINGS frames in 8 s) kept a core busy
//! and its connection open. Like HAProxy's "glitches" and nginx's flood checks, each
//! connection gets a token bucket of such frames: [`BURST_SECONDS`] of the per-second
//! rate to start with, refilled at that rate and by [`CREDIT_PER_REQUEST`] for every
//! request (HEADERS) the peer opens; a frame that finds the bucket empty ends the
//! connection with GOAWAY(ENHANCE_YOUR_CALM).
//!
//! Pure: fed the bytes each side sends, as they pass, and the clock in milliseconds. It
//! reads frame headers only (9 bytes each) and skips payloads without looking at them.
//! [`io::BudgetedIo`] is its adapter on a byte stream.

pub(crate) mod io;

/// The budget of one HTTP/2 connection, and where each side's frames begin.
#[derive(Debug)]
pub(crate) struct FrameBudget {
    per_second: f64,
    burst: f64,
    tokens: f64,
    refilled_ms: u64,
    inbound: FrameCursor,
    outbound: FrameCursor,
    /// The highest stream a client opened: the last one a GOAWAY says was seen.
    last_stream: u32,
}

/// What a batch of the peer's bytes did to the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Within,
    /// The bucket ran dry: the connection should end.
    Exhausted,
}

impl FrameBudget {
    /// A budget of `per_second` frames that advance no request, starting at `now_ms`.
    pub(crate) fn new(per_second: u32, now_ms: u64) -> Self {
        let per_second = f64::from(per_second.max(1));
        let burst = per_second * BURST_SECONDS;
        Self {
            per_second,
            burst,
            tokens: burst,
            refilled_ms: now_ms,
            inbound: FrameCursor::after(PREFACE.len()),
            outbound: FrameCursor::after(0),
            last_stream: 0,
        }
    }

    /// Counts the frames that begin or end in `bytes`, which the peer sent at `now_ms`.
    pub(crate) fn received(&mut self, bytes: &[u8], now_ms: u64) -> Verdict {
        let elapsed_s = now_ms.saturating_sub(self.refilled_ms) as f64 / 1000.0;
        self.tokens = (self.tokens + elapsed_s * self.per_second).min(self.burst);
        self.refilled_ms = now_ms;
        let mut verdict = Verdict::Within;
        let (tokens, burst, last_stream) = (&mut self.tokens, self.burst, &mut self.last_stream);
        self.inbound.feed(bytes, |header| match header.kind() {
            FrameKind::Request => {
                *last_stream = (*last_stream).max(header.stream);
                *tokens = (*tokens + CREDIT_PER_REQUEST).min(burst);
            }
            FrameKind::Glitch => {
                *tokens -= 1.0;
                if *tokens < 0.0 {
                    verdict = Verdict::Exhausted;
                }
            }
            FrameKind::Work => {}
        });
        verdict
    }

    /// Follows what the server writes, so that a GOAWAY of ours goes between frames.
    pub(crate) fn sent(&mut self, bytes: &[u8]) {
        self.outbound.feed(bytes, |_| {});
    }

    /// Whether the server's last frame was written whole (a frame may follow).
    pub(crate) fn between_sent_frames(&self) -> bool {
        self.outbound.at_boundary()
    }

    /// The GOAWAY(ENHANCE_YOUR_CALM) frame that ends the connection.
    pub(crate) fn goaway(&self) -> [u8; 17] {
        let mut frame = [0u8; 17];
        frame[2] = 8;
        frame[3] = GOAWAY;
        frame[9..13].copy_from_slice(&self.last_stream.to_be_bytes());
        frame[13..17].copy_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
        frame
    }
}

/// Where one direction's frames begin: bytes left to skip (the preface, or a payload),
/// and a frame header being gathered.
#[derive(Debug)]
struct FrameCursor {
    skip: usize,
    header: [u8; 9],
    filled: usize,
}

impl FrameCursor {
    fn after(skip: usize) -> Self {
        Self {
            skip,
            header: [0; 9],
            filled: 0,
        }
    }

    fn feed(&mut self, mut bytes: &[u8], mut on_header: impl FnMut(FrameHeader)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let skipped = self.skip.min(bytes.len());
                self.skip -= skipped;
                bytes = &bytes[skipped..];
                continue;
            }
            let take = (9 - self.filled).min(bytes.len());
            self.header[self.filled..self.filled + take].copy_from_slice(&bytes[..take]);
            self.filled += take;
            bytes = &bytes[take..];
            if self.filled == 9 {
                self.filled = 0;
                let header = FrameHeader::parse(&self.header);
                self.skip = header.length as usize;
                on_header(header);
            }
        }
    }

    fn at_boundary(&self) -> bool {
        self.skip == 0 && self.filled == 0
    }
}

#[derive(Clone, Copy, Debug)]
struct FrameHeader {
    length: u32,
    kind: u8,
    flags: u8,
    stream: u32,
}

/// What a frame is to the budget.
#[derive(Debug, PartialEq, Eq)]
enum FrameKind {
    /// Opens a request: earns credit.
    Request,
    /// Advances a request already open (a body, a header block's rest, GOAWAY).
    Work,
    /// Advances nothing: costs a token.
    Glitch,
}

impl FrameHeader {
    fn parse(bytes: &[u8; 9]) -> Self {
        Self {
            length: u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]),
            kind: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
        }
    }

    fn kind(&self) -> FrameKind {
        match self.kind {
            HEADERS => FrameKind::Request,
            DATA if self.length > 0 || self.flags & END_STREAM != 0 => FrameKind::Work,
            CONTINUATION | GOAWAY => FrameKind::Work,
            _ => FrameKind::Glitch,
        }
    }
}

/// How many seconds of the rate a connection starts with, and holds at most.
pub(crate) const BURST_SECONDS: f64 = 10.0;
/// Frames that advance no request each request opened earns (a client may send a
/// WINDOW_UPDATE or two per answer, and RST_STREAM one).
pub(crate) const CREDIT_PER_REQUEST: f64 = 4.0;
/// The client's connection preface (RFC 9113, 3.4), before its first frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ENHANCE_YOUR_CALM: u32 = 0xb;

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    const WINDOW_UPDATE: u8 = 0x8;

    fn with_preface(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        for f in frames {
            bytes.extend(f);
        }
        bytes
    }

    #[test]
    fn a_settings_flood_runs_the_bucket_dry_after_the_burst() {
        let mut budget = FrameBudget::new(100, 0);
        let settings = frame(SETTINGS, 0, 0, &[]);
        let mut bytes = PREFACE.to_vec();
        for _ in 0..1000 {
            bytes.extend(&settings);
        }
        assert_eq!(budget.received(&bytes, 0), Verdict::Within, "the burst");
        assert_eq!(budget.received(&settings, 0), Verdict::Exhausted);
    }

    #[test]
    fn the_bucket_refills_with_time_and_requests_but_not_past_the_burst() {
        let mut budget = FrameBudget::new(100, 0);
        let ping = frame(PING, 0, 0, &[0; 8]);
        let mut bytes = PREFACE.to_vec();
        for _ in 0..1000 {
            bytes.extend(&ping);
        }
        assert_eq!(budget.received(&bytes, 0), Verdict::Within);
        // 100 ms later: 10 more.
        let ten: Vec<u8> = ping.repeat(10);
        assert_eq!(budget.received(&ten, 100), Verdict::Within);
        assert_eq!(budget.received(&ping, 100), Verdict::Exhausted);

        let mut budget = FrameBudget::new(100, 0);
        let mut bytes = with_preface(&[]);
        bytes.extend(ping.repeat(1000));
        budget.received(&bytes, 0);
        // A request earns four.
        let request = frame(HEADERS, 0x4, 1, &[0x82]);
        assert_eq!(budget.received(&request, 0), Verdict::Within);
        assert_eq!(budget.received(&ping.repeat(4), 0), Verdict::Within);
        assert_eq!(budget.received(&ping, 0), Verdict::Exhausted);

        // An hour of quiet refills no more than the burst.
        let mut budget = FrameBudget::new(100, 0);
        budget.received(PREFACE, 0);
        assert_eq!(
            budget.received(&ping.repeat(1000), 3_600_000),
            Verdict::Within
        );
        assert_eq!(budget.received(&ping, 3_600_000), Verdict::Exhausted);
    }

    /// A body, however many frames, and a closing empty DATA cost nothing; empty DATA
    /// that does not end its stream, WINDOW_UPDATE and unknown frame types do.
    #[test]
    fn what_advances_a_request_is_free() {
        let mut budget = FrameBudget::new(1, 0);
        let mut frames = vec![frame(HEADERS, 0x4, 1, &[0x82])];
        for _ in 0..10_000 {
            frames.push(frame(DATA, 0, 1, b"x"));
        }
        frames.push(frame(DATA, END_STREAM, 1, &[]));
        assert_eq!(budget.received(&with_preface(&frames), 0), Verdict::Within);
        for glitch in [
            frame(DATA, 0, 1, &[]),
            frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]),
            frame(0x42, 0, 0, b"unknown"),
        ] {
            let mut budget = FrameBudget::new(1, 0);
            budget.received(PREFACE, 0);
            assert_eq!(budget.received(&glitch.repeat(10), 0), Verdict::Within);
            assert_eq!(
                budget.received(&glitch, 0),
                Verdict::Exhausted,
                "{glitch:?}"
            );
        }
    }

    /// Frames split anywhere across reads are counted as if whole; a payload holding
    /// bytes that look like frame headers is skipped.
    #[test]
    fn frames_split_across_reads_are_parsed_the_same() {
        let payload = frame(SETTINGS, 0, 0, &[]).repeat(100);
        let frames = [
            frame(HEADERS, 0x4, 7, &payload),
            frame(SETTINGS, 0, 0, &[]),
            frame(DATA, 0, 7, &payload),
        ];
        let bytes = with_preface(&frames);
        for split in 1..bytes.len() {
            let mut budget = FrameBudget::new(1, 0);
            budget.received(&bytes[..split], 0);
            budget.received(&bytes[split..], 0);
            assert_eq!(
                budget.tokens,
                10.0 - 1.0,
                "split at {split}: the credit stops at the burst"
            );
            assert_eq!(budget.last_stream, 7);
        }
    }

    #[test]
    fn goaway_names_the_last_stream_and_goes_between_sent_frames() {
        let mut budget = FrameBudget::new(1, 0);
        budget.received(&with_preface(&[frame(HEADERS, 0x4, 9, &[0x82])]), 0);
        let goaway = budget.goaway();
        assert_eq!(&goaway[..9], &[0, 0, 8, GOAWAY, 0, 0, 0, 0, 0]);
        assert_eq!(u32::from_be_bytes(goaway[9..13].try_into().unwrap()), 9);
        assert_eq!(u32::from_be_bytes(goaway[13..].try_into().unwrap()), 0xb);

        assert!(budget.between_sent_frames());
        let answer = frame(SETTINGS, 0x1, 0, &[]);
        budget.sent(&answer[..4]);
        assert!(!budget.between_sent_frames());
        budget.sent(&answer[4..]);
        assert!(budget.between_sent_frames());
        let data = frame(DATA, 0, 1, b"hello");
        budget.sent(&data[..12]);
        assert!(!budget.between_sent_frames());
        budget.sent(&data[12..]);
        assert!(budget.between_sent_frames());
    }
}
