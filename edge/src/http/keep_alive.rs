//! HTTP/1.1 keep-alive connections that hold no HTTP buffers while idle.
//!
//! hyper keeps an 8 KiB read and an 8 KiB write buffer for the life of a connection, and
//! senders keep connections open between deliveries: most of a PoP's connections are
//! idle, and those buffers were half of what each one cost. So a connection is served by
//! a fresh hyper connection per burst of requests: once hyper is between two requests
//! (every handler done, every body read to its end, the answers flushed), it is taken
//! apart (`into_parts`, which also hands back any bytes of the next request already
//! read), and the connection waits for its next bytes with only its TLS state. A new
//! connection, too, waits for its first request before hyper is given it.
//!
//! "Between two requests" is judged from outside hyper, by [`Activity`], which the byte
//! stream, the request handler and the request body report to. When it cannot be sure (a
//! body dropped before its end, which hyper may still be reading), the connection simply
//! stays in hyper for good.

use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::HttpService;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_util::sync::CancellationToken;

use super::body::ResponseBody;
use crate::tls::stream::TlsStream;

/// A byte stream that can wait until a read would not block, without taking any bytes.
pub(crate) trait PollReadable {
    /// Ready once bytes, the end of the stream or an error can be read.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl<IO: AsyncRead + AsyncWrite + Unpin> PollReadable for TlsStream<IO> {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TlsStream::poll_readable(self, cx)
    }
}

impl<T: PollReadable + ?Sized> PollReadable for Box<T> {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (**self).poll_readable(cx)
    }
}

/// Serves HTTP/1.1 on `io` until the client or a limit ends the connection, or `closing`
/// fires (then the request in progress is answered first).
pub(crate) async fn serve<IO, S>(
    builder: &http1::Builder,
    io: IO,
    activity: Arc<Activity>,
    mut service: S,
    closing: &CancellationToken,
    idle_connections: &Gauge,
) -> Result<(), hyper::Error>
where
    IO: PollReadable + AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<Incoming, ResBody = ResponseBody> + Unpin,
    S::Future: Unpin,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut io = ParkIo {
        io,
        unread: Bytes::new(),
        activity: Arc::clone(&activity),
    };
    let mut closed = pin!(closing.cancelled());
    loop {
        if io.unread.is_empty() && activity.may_park() {
            idle_connections.inc();
            let woken = tokio::select! {
                readable = std::future::poll_fn(|cx| io.io.poll_readable(cx)) => Some(readable),
                () = closed.as_mut() => None,
            };
            idle_connections.dec();
            match woken {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "idle HTTP/1.1 connection ended");
                    return Ok(());
                }
                None => {
                    let _ = io.shutdown().await;
                    return Ok(());
                }
            }
        }
        activity.requests_here.store(false, Ordering::Relaxed);
        // Boxed: only a connection between requests is worth making small.
        let mut conn = Box::pin(builder.serve_connection(TokioIo::new(io), service));
        let mut closing_seen = false;
        let served = std::future::poll_fn(|cx| {
            if !closing_seen && closed.as_mut().poll(cx).is_ready() {
                closing_seen = true;
                conn.as_mut().graceful_shutdown();
            }
            match conn.poll_without_shutdown(cx) {
                Poll::Ready(served) => Poll::Ready(Some(served)),
                Poll::Pending if !closing_seen && activity.between_requests() => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        let parts = Pin::into_inner(conn).into_parts();
        io = parts.io.into_inner();
        service = parts.service;
        match served {
            Some(Ok(())) => {
                let _ = io.shutdown().await;
                return Ok(());
            }
            Some(Err(e)) => return Err(e),
            // An empty `read_buf` still holds hyper's whole read buffer.
            None if parts.read_buf.is_empty() => {}
            None => io.unread = parts.read_buf,
        }
    }
}

/// What one HTTP/1.1 connection is doing, as far as taking it out of hyper goes.
#[derive(Debug)]
pub(crate) struct Activity {
    /// Request handlers running plus request bodies not yet dropped.
    busy: AtomicUsize,
    /// A handler has answered and hyper has not flushed since.
    unflushed: AtomicBool,
    /// The hyper connection now serving has seen a request head: until it has, it is
    /// not taken apart (it may hold a partial head, or just have been made for bytes
    /// of the next request that the previous one had read).
    requests_here: AtomicBool,
    /// Whether the connection may leave hyper at all: not after a body was dropped
    /// before its end (hyper may still be reading it), nor with 0-RTT data (rustls
    /// cannot tell whether early bytes are left unread without reading them).
    parkable: AtomicBool,
}

impl Activity {
    pub(crate) fn new(parkable: bool) -> Arc<Self> {
        Arc::new(Self {
            busy: AtomicUsize::new(0),
            unflushed: AtomicBool::new(false),
            requests_here: AtomicBool::new(false),
            parkable: AtomicBool::new(parkable),
        })
    }

    /// A request head arrived; the returned guard is held until its handler has answered.
    pub(crate) fn request_started(self: &Arc<Self>) -> Handling {
        self.busy.fetch_add(1, Ordering::Relaxed);
        self.requests_here.store(true, Ordering::Relaxed);
        Handling(Arc::clone(self))
    }

    /// The request's body, tracked until it is dropped.
    pub(crate) fn body(self: &Arc<Self>, body: Incoming) -> RequestBody {
        self.busy.fetch_add(1, Ordering::Relaxed);
        RequestBody {
            body,
            ended: false,
            activity: Some(Arc::clone(self)),
        }
    }

    fn may_park(&self) -> bool {
        self.parkable.load(Ordering::Relaxed)
    }

    fn between_requests(&self) -> bool {
        self.may_park()
            && self.requests_here.load(Ordering::Relaxed)
            && self.busy.load(Ordering::Relaxed) == 0
            && !self.unflushed.load(Ordering::Relaxed)
    }
}

/// Held while a request handler runs (see [`Activity::request_started`]).
pub(crate) struct Handling(Arc<Activity>);

impl Drop for Handling {
    fn drop(&mut self) {
        // hyper writes the answer right after taking it from the handler, then flushes.
        self.0.unflushed.store(true, Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request body as the handler sees it: hyper's, plus (HTTP/1.1) whether it was read
/// to its end before it was dropped.
pub(crate) struct RequestBody {
    body: Incoming,
    ended: bool,
    activity: Option<Arc<Activity>>,
}

impl RequestBody {
    /// A body whose connection is never taken out of hyper (HTTP/2).
    pub(crate) fn untracked(body: Incoming) -> Self {
        Self {
            body,
            ended: false,
            activity: None,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if frame.is_none() {
            self.ended = true;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if let Some(activity) = self.activity.take() {
            if !self.ended && !self.body.is_end_stream() {
                activity.parkable.store(false, Ordering::Relaxed);
            }
            activity.busy.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The stream hyper reads and writes: first the bytes a previous hyper connection had
/// read but not parsed, then `io`; flushes are reported to the [`Activity`].
struct ParkIo<IO> {
    io: IO,
    unread: Bytes,
    activity: Arc<Activity>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for ParkIo<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread[..n]);
            self.unread.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for ParkIo<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = ready!(Pin::new(&mut self.io).poll_flush(cx));
        if flushed.is_ok() {
            self.activity.unflushed.store(false, Ordering::Relaxed);
        }
        Poll::Ready(flushed)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
