//! [`FrameBudget`] on an HTTP/2 connection's plaintext byte stream, between TLS and
//! hyper: it sees every byte each way, and when the peer runs the budget dry it hides
//! the offending bytes from hyper, writes GOAWAY(ENHANCE_YOUR_CALM) if the server's last
//! frame went out whole, and fails the read so hyper drops the connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::{FrameBudget, Verdict};

pub(crate) struct BudgetedIo<S> {
    inner: S,
    budget: FrameBudget,
    started: Instant,
    exhausted: Arc<AtomicBool>,
}

impl<S> BudgetedIo<S> {
    /// `inner` under a budget of `per_second` frames that advance no request. The flag
    /// turns true once the budget ended the connection.
    pub(crate) fn new(inner: S, per_second: u32) -> (Self, Arc<AtomicBool>) {
        let exhausted = Arc::new(AtomicBool::new(false));
        let io = Self {
            inner,
            budget: FrameBudget::new(per_second, 0),
            started: Instant::now(),
            exhausted: Arc::clone(&exhausted),
        };
        (io, exhausted)
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

impl<S: AsyncWrite + Unpin> BudgetedIo<S> {
    /// Best effort: a GOAWAY only between frames and only if the socket takes it now
    /// (a flooding peer that stopped reading gets the close alone).
    fn say_goaway(&mut self, cx: &mut Context<'_>) {
        if !self.budget.between_sent_frames() {
            return;
        }
        let goaway = self.budget.goaway();
        if let Poll::Ready(Ok(written)) = Pin::new(&mut self.inner).poll_write(cx, &goaway) {
            self.budget.sent(&goaway[..written]);
            let _ = Pin::new(&mut self.inner).poll_flush(cx);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for BudgetedIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.exhausted.load(Ordering::Relaxed) {
            return Poll::Ready(Err(calm_down()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let now_ms = self.now_ms();
        if self.budget.received(&buf.filled()[before..], now_ms) == Verdict::Exhausted {
            buf.set_filled(before);
            self.exhausted.store(true, Ordering::Relaxed);
            self.say_goaway(cx);
            return Poll::Ready(Err(calm_down()));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for BudgetedIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        self.budget.sent(&buf[..written]);
        Poll::Ready(Ok(written))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, bufs))?;
        let mut left = written;
        for buf in bufs {
            let taken = left.min(buf.len());
            self.budget.sent(&buf[..taken]);
            left -= taken;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn calm_down() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "HTTP/2 frames that advance no request over http.h2_control_frames_per_second",
    )
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    use super::*;

    /// A SETTINGS flood through the adapter: the reader sees the burst's frames, then
    /// an error; the peer reads GOAWAY(ENHANCE_YOUR_CALM).
    #[tokio::test]
    async fn a_flood_ends_the_read_side_and_the_peer_reads_goaway() {
        let (server_side, mut peer) = duplex(1 << 20);
        let (mut io, exhausted) = BudgetedIo::new(server_side, 1);
        let mut flood = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        for _ in 0..11 {
            flood.extend([0, 0, 0, 4, 0, 0, 0, 0, 0]);
        }
        peer.write_all(&flood).await.unwrap();
        let mut seen = Vec::new();
        let mut chunk = [0u8; 64];
        let error = loop {
            match io.read(&mut chunk).await {
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
                Err(e) => break e,
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::ConnectionAborted);
        assert!(exhausted.load(Ordering::Relaxed));
        assert!(
            seen.len() < flood.len(),
            "the offending frame never reaches hyper"
        );
        let mut goaway = [0u8; 17];
        peer.read_exact(&mut goaway).await.unwrap();
        assert_eq!(goaway[3], 0x7);
        assert_eq!(&goaway[13..], &0xbu32.to_be_bytes());
    }
}
