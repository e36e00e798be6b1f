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

use std::io::{self, BufRead, Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use rustls::{ServerConfig, ServerConnection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Runs the handshake until it completes or the client's early data is accepted.
pub(crate) async fn accept<IO>(io: IO, config: Arc<ServerConfig>) -> io::Result<TlsStream<IO>>
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
pub(crate) struct Handshake(Arc<AtomicBool>);

impl Handshake {
    pub(crate) fn is_done(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn mark_done(&self) {
        self.0.store(true, Ordering::Release);
    }
}

pub(crate) struct TlsStream<IO> {
    io: IO,
    conn: ServerConnection,
    handshake: Handshake,
    read_closed: bool,
}

impl<IO> TlsStream<IO> {
    pub(crate) fn connection(&self) -> &ServerConnection {
        &self.conn
    }

    pub(crate) fn handshake(&self) -> Handshake {
        self.handshake.clone()
    }

    /// Early data was accepted on this connection (it may still be unread).
    pub(crate) fn accepted_early_data(&mut self) -> bool {
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

    /// Ready once a read would not block: application data (not early data) decrypted,
    /// the end of the stream, or an error. Takes no bytes.
    pub(crate) fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.conn.reader().fill_buf() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                _ => return Poll::Ready(Ok(())),
            }
            ready!(self.poll_more_plaintext(cx))?;
        }
    }

    /// Sends what is queued (handshake replies, tickets, alerts), then reads and
    /// processes more records.
    fn poll_more_plaintext(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Poll::Ready(Err(e)) = self.poll_send_tls(cx) {
            return Poll::Ready(Err(e));
        }
        if self.read_closed {
            return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
        }
        if ready!(self.poll_receive_tls(cx))? == 0 {
            self.read_closed = true;
        }
        Poll::Ready(Ok(()))
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
            // Copied straight into the caller's uninitialised buffer: zeroing it first
            // (`initialize_unfilled`) would cost a memset per read and make every idle
            // connection's whole HTTP read buffer resident.
            let mut reader = this.conn.reader();
            match reader.fill_buf() {
                Ok(plaintext) => {
                    let n = plaintext.len().min(buf.remaining());
                    buf.put_slice(&plaintext[..n]);
                    reader.consume(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            ready!(this.poll_more_plaintext(cx))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};
    use tokio_rustls::TlsConnector;

    #[tokio::test]
    async fn a_full_handshake_completes_before_accept_returns() {
        let (server_config, client_config) = configs(false);
        let (client_io, server_io) = duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut tls = accept(server_io, server_config).await.unwrap();
            assert!(
                tls.handshake().is_done(),
                "no early data: complete at accept"
            );
            let mut request = [0u8; 4];
            tls.read_exact(&mut request).await.unwrap();
            tls.write_all(b"pong").await.unwrap();
            tls.flush().await.unwrap();
            request
        });
        let mut client = connect(&client_config, client_io, false).await;
        client.write_all(b"ping").await.unwrap();
        client.flush().await.unwrap();
        let mut answer = [0u8; 4];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"pong");
        assert_eq!(&server.await.unwrap(), b"ping");
    }

    #[tokio::test]
    async fn early_data_is_served_before_the_handshake_completes() {
        let (server_config, client_config) = configs(true);
        // A first connection leaves the client a ticket that allows early data.
        let (client_io, server_io) = duplex(64 * 1024);
        let config = Arc::clone(&server_config);
        let first = tokio::spawn(async move {
            let mut tls = accept(server_io, config).await.unwrap();
            tls.write_all(b"hello").await.unwrap();
            tls.flush().await.unwrap();
            tls.shutdown().await.unwrap();
        });
        let mut client = connect(&client_config, client_io, false).await;
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        first.await.unwrap();

        let (client_io, server_io) = duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut tls = accept(server_io, server_config).await.unwrap();
            let handshake = tls.handshake();
            assert!(tls.accepted_early_data());
            let mut request = [0u8; 5];
            tls.read_exact(&mut request).await.unwrap();
            let early = !handshake.is_done();
            // Half-RTT: the answer leaves before the client's Finished was read.
            tls.write_all(b"early answer").await.unwrap();
            tls.flush().await.unwrap();
            let mut more = [0u8; 4];
            tls.read_exact(&mut more).await.unwrap();
            (request, early, more, handshake.is_done())
        });
        let mut client = connect(&client_config, client_io, true).await;
        client.write_all(b"early").await.unwrap();
        client.flush().await.unwrap();
        let mut answer = [0u8; 12];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"early answer");
        assert!(client.get_ref().1.is_early_data_accepted());
        client.write_all(b"late").await.unwrap();
        client.flush().await.unwrap();
        let (request, early, more, done) = server.await.unwrap();
        assert_eq!(&request, b"early");
        assert!(early, "read before the client's Finished: early");
        assert_eq!(&more, b"late");
        assert!(done, "the handshake completed underneath");
    }

    async fn connect(
        config: &Arc<rustls::ClientConfig>,
        io: DuplexStream,
        early_data: bool,
    ) -> tokio_rustls::client::TlsStream<DuplexStream> {
        TlsConnector::from(Arc::clone(config))
            .early_data(early_data)
            .connect(ServerName::try_from("localhost").unwrap(), io)
            .await
            .unwrap()
    }

    fn configs(early_data: bool) -> (Arc<ServerConfig>, Arc<rustls::ClientConfig>) {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = generated.cert.der().clone();
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(generated.key_pair.serialize_der().into());
        let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        if early_data {
            server.max_early_data_size = 1024;
            server.send_half_rtt_data = true;
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.enable_early_data = early_data;
        (Arc::new(server), Arc::new(client))
    }
}
