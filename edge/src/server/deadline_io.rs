//! Time limits on one client connection, enforced on its byte stream: a write that
//! makes no progress for `write_stall` (a slow reader), a read side idle for `idle`
//! (keep-alive connections nobody uses), an HTTP/1.1 request head that takes longer than
//! `head` from its first byte (slowloris), and a maximum `lifetime` after which reads
//! see end-of-stream so the HTTP layer finishes what it is doing and closes.
//!
//! The head deadline is ours rather than hyper's: hyper times the wait for a head from
//! the moment it starts waiting, so an idle keep-alive connection would end after the
//! head deadline instead of `idle`, counted as a slow head.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep, sleep, sleep_until};

use crate::config::Deadlines;
use crate::http::HeadClock;

/// Which limit ended a connection (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expired {
    WriteStall,
    Idle,
    Head,
    Lifetime,
}

impl Expired {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Expired::WriteStall => "write_stall",
            Expired::Idle => "idle",
            Expired::Head => "header_timeout",
            Expired::Lifetime => "lifetime",
        }
    }
}

pub(crate) struct DeadlineIo<S> {
    inner: S,
    limits: Deadlines,
    ends_at: Instant,
    lifetime: Pin<Box<Sleep>>,
    idle: Pin<Box<Sleep>>,
    last_activity: Instant,
    stall: Option<Pin<Box<Sleep>>>,
    head_clock: Arc<HeadClock>,
    head_timer: Option<Pin<Box<Sleep>>>,
    expired: Option<Expired>,
    report: Arc<OnceLock<Expired>>,
}

impl<S> DeadlineIo<S> {
    pub(crate) fn new(inner: S, limits: Deadlines) -> Self {
        let ends_at = Instant::now() + limits.lifetime;
        Self {
            inner,
            limits,
            ends_at,
            lifetime: Box::pin(sleep_until(ends_at)),
            idle: Box::pin(sleep(limits.idle)),
            last_activity: Instant::now(),
            stall: None,
            head_clock: Arc::default(),
            head_timer: None,
            expired: None,
            report: Arc::new(OnceLock::new()),
        }
    }

    /// Where the limit that ends this connection is recorded, readable after the stream
    /// has been handed to the TLS and HTTP layers.
    pub(crate) fn report(&self) -> Arc<OnceLock<Expired>> {
        Arc::clone(&self.report)
    }

    /// The connection's head clock, for its request handler.
    pub(crate) fn head_clock(&self) -> Arc<HeadClock> {
        Arc::clone(&self.head_clock)
    }

    /// Which limit, if any, this connection ran into.
    #[cfg(test)]
    fn expired(&self) -> Option<Expired> {
        self.expired
    }

    fn expire(&mut self, why: Expired) {
        self.expired.get_or_insert(why);
        let _ = self.report.set(why);
    }

    /// Notes progress at `now`. The idle timer is not re-armed here (that would touch
    /// the timer wheel on every read and write); it is pushed back when it fires early.
    fn touch(&mut self, now: Instant) {
        self.last_activity = now;
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

    /// Whether the head being received has taken longer than the limit; otherwise the
    /// timer is set to wake the task when it would.
    fn head_expired(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let Some(due) = self.head_clock.deadline(self.limits.head) else {
            self.head_timer = None;
            return false;
        };
        if now >= due {
            return true;
        }
        let timer = self
            .head_timer
            .get_or_insert_with(|| Box::pin(sleep_until(due)));
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        let _ = timer.as_mut().poll(cx);
        false
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for DeadlineIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // One clock read serves every limit this poll looks at: a request polls its
        // stream several times, and each read of the clock costs more than the checks.
        let now = Instant::now();
        if this.expired == Some(Expired::Lifetime)
            || (now >= this.ends_at && this.lifetime.as_mut().poll(cx).is_ready())
        {
            this.expire(Expired::Lifetime);
            // End of stream: the HTTP layer answers what it has and closes.
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.touch(now);
                    this.head_clock.bytes_read(now);
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                if this.head_expired(cx, now) {
                    this.expire(Expired::Head);
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "request head not received in time",
                    )));
                }
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
            this.touch(Instant::now());
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
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    use super::*;

    const LIMITS: Deadlines = Deadlines {
        write_stall: Duration::from_secs(5),
        idle: Duration::from_secs(60),
        head: Duration::from_secs(10),
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

    /// Sends `bytes` one a second from a duplex client, then keeps the client open.
    fn trickle(mut client: tokio::io::DuplexStream, bytes: usize) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            for _ in 0..bytes {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if client.write_all(b"h").await.is_err() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        })
    }

    /// Reads until an error; returns its kind and when it came.
    async fn read_until_error(
        io: &mut DeadlineIo<tokio::io::DuplexStream>,
    ) -> (io::ErrorKind, Duration) {
        let started = Instant::now();
        let mut buf = [0u8; 16];
        loop {
            if let Err(e) = io.read(&mut buf).await {
                return (e.kind(), started.elapsed());
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_that_trickles_is_cut_by_the_head_deadline() {
        let (server, client) = duplex(64);
        let mut io = DeadlineIo::new(server, LIMITS);
        io.head_clock().start();
        let _client = trickle(client, 100);
        let (kind, after) = read_until_error(&mut io).await;
        assert_eq!(
            (kind, after),
            (io::ErrorKind::TimedOut, Duration::from_secs(10))
        );
        assert_eq!(io.expired(), Some(Expired::Head));
        assert_eq!(Expired::Head.reason(), "header_timeout");
    }

    #[tokio::test(start_paused = true)]
    async fn without_start_there_is_no_head_deadline() {
        let (server, client) = duplex(64);
        let mut io = DeadlineIo::new(server, LIMITS);
        let _client = trickle(client, 30);
        let mut buf = [0u8; 1];
        for _ in 0..30 {
            io.read_exact(&mut buf).await.unwrap();
        }
        assert_eq!(io.expired(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_keep_alive_ends_by_idle_and_the_next_head_is_timed_from_its_first_byte() {
        let (server, mut client) = duplex(64);
        let mut io = DeadlineIo::new(server, LIMITS);
        let clock = io.head_clock();
        clock.start();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut head = [0u8; 18];
        io.read_exact(&mut head).await.unwrap();
        // The request's body and the pipelined next head start no deadline while it is
        // being handled.
        let handling = clock.request_started();
        client.write_all(b"body").await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        let mut body = [0u8; 4];
        io.read_exact(&mut body).await.unwrap();
        drop(handling);

        // Idle between requests: 25 s, well past the head deadline, ends nothing.
        let idle = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(25)).await;
            trickle(client, 100).await.unwrap();
        });
        let (kind, after) = read_until_error(&mut io).await;
        assert_eq!(
            (kind, after),
            (io::ErrorKind::TimedOut, Duration::from_secs(25 + 1 + 10)),
            "the next head's deadline runs from its first byte (25 s + 1 s)"
        );
        assert_eq!(io.expired(), Some(Expired::Head));
        idle.abort();

        let (server, _client) = duplex(64);
        let mut quiet = DeadlineIo::new(server, LIMITS);
        let clock = quiet.head_clock();
        clock.start();
        drop(clock.request_started());
        let (kind, after) = read_until_error(&mut quiet).await;
        assert_eq!(
            (kind, after),
            (io::ErrorKind::TimedOut, Duration::from_secs(60))
        );
        assert_eq!(
            quiet.expired(),
            Some(Expired::Idle),
            "a keep-alive nobody uses"
        );
    }
}
