//! HTTP/2 written frame by frame, for attacks no well-behaved client library sends:
//! CONTINUATION and control-frame floods, 1-byte DATA frames, resets in a loop.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The client connection preface and an empty SETTINGS frame.
pub fn preface() -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out
}

/// One frame: 24-bit length, type, flags, 31-bit stream id, payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A SETTINGS frame that sets each `(id, value)`.
pub fn settings(values: &[(u16, u32)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (id, value) in values {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &payload)
}

/// The HPACK block of a POST to `path` on localhost with `headers`, every field a
/// literal (no table state to keep in step with the server).
pub fn post_block(path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut block = vec![0x83, 0x87]; // :method POST, :scheme https (static table)
    literal(&mut block, ":path", path);
    literal(&mut block, ":authority", "localhost");
    for (name, value) in headers {
        literal(&mut block, name, value);
    }
    block
}

/// Reads frames until the peer closes the connection or `limit` passes; counts what
/// came, by type.
pub async fn read_frames(io: &mut (impl AsyncRead + Unpin), limit: std::time::Duration) -> Seen {
    let mut seen = Seen::default();
    let read = async {
        let mut header = [0u8; 9];
        loop {
            if io.read_exact(&mut header).await.is_err() {
                seen.closed = true;
                return;
            }
            let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let mut payload = vec![0; len];
            if io.read_exact(&mut payload).await.is_err() {
                seen.closed = true;
                return;
            }
            match header[3] {
                HEADERS => seen.headers += 1,
                RST_STREAM => seen.resets += 1,
                SETTINGS if header[4] & ACK != 0 => seen.settings_acks += 1,
                PING if header[4] & ACK != 0 => seen.ping_acks += 1,
                GOAWAY => {
                    seen.goaway = true;
                    seen.goaway_code = payload
                        .get(4..8)
                        .map(|code| u32::from_be_bytes(code.try_into().unwrap()));
                    seen.goaway_debug =
                        String::from_utf8_lossy(payload.get(8..).unwrap_or_default()).into_owned();
                }
                _ => {}
            }
        }
    };
    let _ = tokio::time::timeout(limit, read).await;
    seen
}

/// What a peer sent back, by frame type.
#[derive(Debug, Default)]
pub struct Seen {
    /// HEADERS frames.
    pub headers: usize,
    /// RST_STREAM frames.
    pub resets: usize,
    /// SETTINGS acknowledgements.
    pub settings_acks: usize,
    /// PING acknowledgements.
    pub ping_acks: usize,
    /// Whether a GOAWAY came.
    pub goaway: bool,
    /// The error code of the GOAWAY (0: no error, 1: protocol error, 11: enhance your
    /// calm…).
    pub goaway_code: Option<u32>,
    /// The GOAWAY's debug data.
    pub goaway_debug: String,
    /// Whether the connection closed.
    pub closed: bool,
}

fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0x00); // literal without indexing, new name
    integer(block, name.len());
    block.extend_from_slice(name.as_bytes());
    integer(block, value.len());
    block.extend_from_slice(value.as_bytes());
}

/// An HPACK integer with a 7-bit prefix and the Huffman bit clear (RFC 7541, 5.1).
fn integer(block: &mut Vec<u8>, mut n: usize) {
    if n < 127 {
        block.push(n as u8);
        return;
    }
    block.push(127);
    n -= 127;
    while n >= 128 {
        block.push((n % 128 + 128) as u8);
        n /= 128;
    }
    block.push(n as u8);
}

/// Frame type DATA.
pub const DATA: u8 = 0x0;
/// Frame type HEADERS.
pub const HEADERS: u8 = 0x1;
/// Frame type RST_STREAM.
pub const RST_STREAM: u8 = 0x3;
/// Frame type SETTINGS.
pub const SETTINGS: u8 = 0x4;
/// Frame type PING.
pub const PING: u8 = 0x6;
/// Frame type WINDOW_UPDATE.
pub const WINDOW_UPDATE: u8 = 0x8;
/// Frame type GOAWAY.
pub const GOAWAY: u8 = 0x7;
/// Frame type CONTINUATION.
pub const CONTINUATION: u8 = 0x9;
/// Flag END_STREAM.
pub const END_STREAM: u8 = 0x1;
/// Flag ACK.
pub const ACK: u8 = 0x1;
/// Flag END_HEADERS.
pub const END_HEADERS: u8 = 0x4;
/// Setting SETTINGS_INITIAL_WINDOW_SIZE.
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
