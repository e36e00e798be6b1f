//! Time limits on one client connection, enforced on its byte stream: a write that
//! makes no progress for `write_stall` (a slow reader), a read side idle for `idle`
//! (keep-alive connections nobody uses), and a maximum `lifetime` after which reads see
//! end-of-stream so the HTTP layer finishes what it is doing and closes.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep, sleep, sleep_until};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    pub write_stall: Duration,
    pub idle: Duration,
    pub lifetime: Duration,
}

/// Which limit ended a connection (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    WriteStall,
    Idle,
    Lifetime,
}

impl Expired {
    pub fn reason(self) -> &'static str {
        match self {
            Expired::WriteStall => "write_stall",
            Expired::Idle => "idle",
            Expired::Lifetime => "lifetime",
        }
    }
}

pub struct DeadlineIo<S> {
    inner: S,
    limits: Deadlines,
    ends_at: Instant,
    lifetime: Pin<Box<Sleep>>,
    idle: Pin<Box<Sleep>>,
    last_activity: Instant,
    stall: Option<Pin<Box<Sleep>>>,
    expired: Option<Expired>,
    report: Arc<OnceLock<Expired>>,
}

impl<S> DeadlineIo<S> {
    pub fn new(inner: S, limits: Deadlines) -> Self {
        let ends_at = Instant::now() + limits.lifetime;
        Self {
            inner,
            limits,
            ends_at,
            lifetime: Box::pin(sleep_until(ends_at)),
            idle: Box::pin(sleep(limits.idle)),
            last_activity: Instant::now(),
            stall: None,
            expired: None,
            report: Arc::new(OnceLock::new()),
        }
    }

    /// Where the limit that ends this connection is recorded, readable after the stream
    /// has been handed to the TLS and HTTP layers.
    pub fn report(&self) -> Arc<OnceLock<Expired>> {
        Arc::clone(&self.report)
    }

    /// Which limit, if any, this connection ran into.
    pub fn expired(&self) -> Option<Expired> {
        self.expired
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn expire(&mut self, why: Expired) {
        self.expired.get_or_insert(why);
        let _ = self.report.set(why);
    }

    /// Notes progress. The idle timer is not re-armed here (that would touch the timer
    /// wheel on every read and write); it is pushed back when it fires early.
    fn touch(&mut self) {
        self.last_activity = Instant::now();
    }

    /// Whether the connection has really been idle for the limit (the timer having fired).
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.idle.as_mut().poll(cx).is_pending() {
                return false;
            }
            let due = self.last_activity + self.limits.idle;
            if Instant::now() >= due {
                return true;
            }
            self.idle.as_mut().reset(due);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for DeadlineIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.expired == Some(Expired::Lifetime)
            || (Instant::now() >= this.ends_at && this.lifetime.as_mut().poll(cx).is_ready())
        {
            this.expire(Expired::Lifetime);
            // End of stream: the HTTP layer answers what it has and closes.
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                if this.idle_expired(cx) {
                    this.expire(Expired::Idle);
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connection idle too long",
                    )));
                }
                let _ = this.lifetime.as_mut().poll(cx);
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for DeadlineIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            this.touch();
        }
        this.watch_stall(cx, result)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch_stall(cx, result)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch_stall(cx, result)
    }
}

impl<S> DeadlineIo<S> {
    /// A pending write arms the stall timer; completion disarms it; expiry fails the write.
    fn watch_stall<T>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Ready(done) => {
                // Not activity by itself: the HTTP layer flushes on every wake-up, and
                // an empty flush must not keep an idle connection open.
                self.stall = None;
                Poll::Ready(done)
            }
            Poll::Pending => {
                let limit = self.limits.write_stall;
                let stall = self.stall.get_or_insert_with(|| Box::pin(sleep(limit)));
                ready!(stall.as_mut().poll(cx));
                self.expire(Expired::WriteStall);
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "peer stopped reading",
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    use super::*;

    const LIMITS: Deadlines = Deadlines {
        write_stall: Duration::from_secs(5),
        idle: Duration::from_secs(60),
        lifetime: Duration::from_secs(3600),
    };

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_stops_reading_trips_the_write_stall() {
        let (server, mut client) = duplex(64);
        let mut io = DeadlineIo::new(server, LIMITS);
        io.write_all(&[1; 64]).await.unwrap();
        let started = Instant::now();
        let error = io.write_all(&[2; 64]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert_eq!(io.expired(), Some(Expired::WriteStall));
        assert_eq!(io.report().get(), Some(&Expired::WriteStall));
        let mut buf = [0u8; 64];
        client.read_exact(&mut buf).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_moving_reader_is_fine() {
        let (server, mut client) = duplex(64);
        let mut io = DeadlineIo::new(server, LIMITS);
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 32];
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                client.read_exact(&mut buf).await.unwrap();
            }
        });
        io.write_all(&[7; 256]).await.unwrap();
        reader.await.unwrap();
        assert_eq!(io.expired(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_end_and_traffic_keeps_them() {
        let (server, mut client) = duplex(64);
        let mut io = DeadlineIo::new(server, LIMITS);
        let writer = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(50)).await;
                client.write_all(b"x").await.unwrap();
            }
            client
        });
        let mut buf = [0u8; 1];
        for _ in 0..3 {
            io.read_exact(&mut buf).await.unwrap();
        }
        let _client = writer.await.unwrap();
        let started = Instant::now();
        let error = io.read(&mut buf).await.unwrap_err();
        assert_eq!(
            (error.kind(), started.elapsed()),
            (io::ErrorKind::TimedOut, Duration::from_secs(60))
        );
        assert_eq!(io.expired(), Some(Expired::Idle));
    }

    #[tokio::test(start_paused = true)]
    async fn empty_flushes_do_not_keep_an_idle_connection_open() {
        let (server, _client) = duplex(64);
        let mut io = DeadlineIo::new(server, LIMITS);
        let started = Instant::now();
        let mut buf = [0u8; 1];
        let error = loop {
            // What hyper does on every wake-up: try to read, flush nothing.
            match tokio::time::timeout(Duration::from_secs(1), io.read(&mut buf)).await {
                Ok(result) => break result.unwrap_err(),
                Err(_) => io.flush().await.unwrap(),
            }
        };
        assert_eq!(
            (error.kind(), started.elapsed()),
            (io::ErrorKind::TimedOut, Duration::from_secs(60))
        );
        assert_eq!(io.expired(), Some(Expired::Idle));
    }

    #[tokio::test(start_paused = true)]
    async fn after_its_lifetime_a_connection_reads_end_of_stream() {
        let (server, mut client) = duplex(64);
        let limits = Deadlines {
            lifetime: Duration::from_secs(100),
            ..LIMITS
        };
        let mut io = DeadlineIo::new(server, limits);
        let keep_busy = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                if client.write_all(b"y").await.is_err() {
                    break;
                }
            }
        });
        let mut buf = [0u8; 1];
        let mut got = 0;
        loop {
            match io.read(&mut buf).await.unwrap() {
                0 => break,
                n => got += n,
            }
        }
        assert_eq!(got, 4, "bytes before the lifetime ended");
        assert_eq!(io.expired(), Some(Expired::Lifetime));
        keep_busy.abort();
    }
}
