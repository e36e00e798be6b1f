//! The server side of one TLS connection as a tokio byte stream, driving
//! `rustls::ServerConnection` directly so that TLS 1.3 early data reaches HTTP.
//!
//! tokio-rustls finishes the handshake before it yields a stream and never drains
//! `early_data()`, so 0-RTT requests would be silently lost. Here `accept` returns as
//! soon as the client's early data was accepted; reads serve those bytes first, then
//! application data; the handshake completes underneath as the client's Finished
//! arrives. [`Handshake::is_done`] tells the HTTP layer, per request, whether the
//! handshake had completed when the request was seen: before that, the request is
//! replayable and is treated as early.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use rustls::{ServerConfig, ServerConnection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Runs the handshake until it completes or the client's early data is accepted.
pub async fn accept<IO>(io: IO, config: Arc<ServerConfig>) -> io::Result<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let conn = ServerConnection::new(config).map_err(io::Error::other)?;
    let mut stream = TlsStream {
        io,
        conn,
        handshake: Handshake::default(),
        read_closed: false,
    };
    std::future::poll_fn(|cx| stream.poll_accept(cx)).await?;
    Ok(stream)
}

/// Whether the handshake has completed, shared with the connection's request handler.
#[derive(Clone, Debug, Default)]
pub struct Handshake(Arc<AtomicBool>);

impl Handshake {
    pub fn is_done(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn mark_done(&self) {
        self.0.store(true, Ordering::Release);
    }
}

pub struct TlsStream<IO> {
    io: IO,
    conn: ServerConnection,
    handshake: Handshake,
    read_closed: bool,
}

impl<IO> TlsStream<IO> {
    pub fn connection(&self) -> &ServerConnection {
        &self.conn
    }

    pub fn handshake(&self) -> Handshake {
        self.handshake.clone()
    }

    /// Early data was accepted on this connection (it may still be unread).
    pub fn accepted_early_data(&mut self) -> bool {
        self.conn.early_data().is_some()
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.poll_send_tls(cx))?;
            if !self.conn.is_handshaking() {
                self.handshake.mark_done();
                return Poll::Ready(Ok(()));
            }
            if self.accepted_early_data() {
                return Poll::Ready(Ok(()));
            }
            if ready!(self.poll_receive_tls(cx))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    /// Writes every queued TLS record to the socket.
    fn poll_send_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            let mut socket = SyncSocket {
                io: &mut self.io,
                cx,
            };
            match self.conn.write_tls(&mut socket) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Reads TLS records from the socket and processes them; 0 means end of stream.
    fn poll_receive_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut socket = SyncSocket {
            io: &mut self.io,
            cx,
        };
        let n = match self.conn.read_tls(&mut socket) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if let Err(e) = self.conn.process_new_packets() {
            // Best effort: tell the peer why (the alert is queued by rustls).
            let _ = self.poll_send_tls(cx);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        if !self.conn.is_handshaking() {
            self.handshake.mark_done();
        }
        Poll::Ready(Ok(n))
    }

    /// Reads until the client's Finished has been processed.
    fn poll_complete_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.is_handshaking() && !self.read_closed {
            ready!(self.poll_send_tls(cx))?;
            if ready!(self.poll_receive_tls(cx))? == 0 {
                self.read_closed = true;
            }
        }
        self.poll_send_tls(cx)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if let Some(mut early) = this.conn.early_data() {
                let n = early.read(buf.initialize_unfilled())?;
                if n > 0 {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
            }
            match this.conn.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            // Handshake replies, tickets and alerts go out before we wait for more.
            if let Poll::Ready(Err(e)) = this.poll_send_tls(cx) {
                return Poll::Ready(Err(e));
            }
            if this.read_closed {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            if ready!(this.poll_receive_tls(cx))? == 0 {
                this.read_closed = true;
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            // rustls buffers what it cannot send yet (bounded) and says how much it took.
            let taken = this.conn.writer().write(buf)?;
            if taken > 0 || buf.is_empty() {
                if let Poll::Ready(Err(e)) = this.poll_send_tls(cx) {
                    return Poll::Ready(Err(e));
                }
                return Poll::Ready(Ok(taken));
            }
            if this.conn.wants_write() {
                ready!(this.poll_send_tls(cx))?;
            } else if this.conn.is_handshaking() && !this.read_closed {
                ready!(this.poll_complete_handshake(cx))?;
            } else {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.conn.writer().flush()?;
        ready!(this.poll_send_tls(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A close_notify before the client's Finished would make it see a failed
        // handshake instead of the answer it was already sent.
        ready!(this.poll_complete_handshake(cx))?;
        this.conn.send_close_notify();
        ready!(this.poll_send_tls(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// The socket as blocking `Read`/`Write` for rustls, mapping "not ready" to WouldBlock.
struct SyncSocket<'a, 'b, IO> {
    io: &'a mut IO,
    cx: &'a mut Context<'b>,
}

impl<IO: AsyncRead + Unpin> Read for SyncSocket<'_, '_, IO> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut buf = ReadBuf::new(buf);
        match Pin::new(&mut *self.io).poll_read(self.cx, &mut buf) {
            Poll::Ready(Ok(())) => Ok(buf.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<IO: AsyncWrite + Unpin> Write for SyncSocket<'_, '_, IO> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
