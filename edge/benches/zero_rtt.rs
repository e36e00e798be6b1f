//! Benchmark: time to a webhook's answer over a 50 ms round trip (a userspace proxy that
//! delays every chunk by half the RTT each way; no netem here), for a sender that dials
//! a new connection per webhook, as providers do: full TLS 1.3 handshake, resumption,
//! and 0-RTT (the request rides in the early data; the answer leaves before the client's
//! Finished). Rounds alternate the three; medians are printed with their ratio to the
//! RTT, from TCP established to the answer's status line (the TCP handshake adds one
//! more RTT, or none with TCP Fast Open; the proxy cannot delay it).
//!
//! Runs the release edge binary: `cargo build --release -p edge && cargo bench -p edge
//! --bench zero_rtt`. ROUNDS and RTT_MS adjust it.

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark stops at the line that failed"
)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = env("ROUNDS", 15);
    let rtt = Duration::from_millis(env("RTT_MS", 50));
    let dir = tempfile::tempdir().unwrap();
    let edge = EdgeProcess::start(dir.path());
    let proxy = DelayProxy::start(edge.port, rtt / 2).await;
    let roots = edge.roots();

    let resumed = client_config(&roots, false);
    let early = client_config(&roots, true);
    // Sessions to resume from.
    for config in [&resumed, &early] {
        webhook(config, proxy, "warm-up", Mode::Plain).await;
    }

    let mut times: [Vec<Duration>; 3] = Default::default();
    for round in 0..rounds {
        for step in 0..3 {
            let which = (round + step) % 3;
            let id = format!("r{round}-{which}");
            let time = match which {
                0 => {
                    // No stored session: a full handshake every time.
                    let config = client_config(&roots, false);
                    webhook(&config, proxy, &id, Mode::Plain).await
                }
                1 => webhook(&resumed, proxy, &id, Mode::Plain).await,
                _ => webhook(&early, proxy, &id, Mode::Early).await,
            };
            times[which].push(time);
        }
    }
    println!(
        "time to the answer over a {} ms RTT, medians of {rounds} alternating rounds:",
        rtt.as_millis()
    );
    for (name, samples) in ["full handshake", "resumption", "0-RTT + half-RTT"]
        .iter()
        .zip(times)
    {
        let time = median(samples);
        println!(
            "  {name:<17} {:7.1} ms = {:.2} RTT",
            ms(time),
            ms(time) / ms(rtt)
        );
    }
    let early_data = edge.metric("edge_tls_early_data_connections_total");
    println!("  edge accepted early data on {early_data} connections");
    assert!(early_data >= rounds as f64, "0-RTT was not used");
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    Early,
}

/// One signed webhook on a new connection; (after TCP, including TCP) until the answer.
async fn webhook(config: &Arc<rustls::ClientConfig>, port: u16, id: &str, mode: Mode) -> Duration {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let connected = Instant::now();
    let connector = TlsConnector::from(Arc::clone(config)).early_data(mode == Mode::Early);
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(&request(id)).await.unwrap();
    tls.flush().await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = tls.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before the answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let done = Instant::now();
    // Read on to the close: the session tickets for the next connection come after the
    // (half-RTT) answer.
    while tls.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    assert!(
        answer.starts_with(b"HTTP/1.1 202"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    if mode == Mode::Early {
        let (_, session) = tls.get_ref();
        assert!(session.is_early_data_accepted(), "early data refused");
    }
    done - connected
}

fn request(id: &str) -> Vec<u8> {
    use hmac::Mac;
    let body = format!(r#"{{"zen":"fast","id":"{id}"}}"#);
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let signature = const_hex::encode(mac.finalize().into_bytes());
    format!(
        "POST /hooks/github HTTP/1.1\r\nHost: localhost\r\nX-GitHub-Event: push\r\n\
         X-GitHub-Delivery: {id}\r\nX-Hub-Signature-256: sha256={signature}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn client_config(roots: &rustls::RootCertStore, early_data: bool) -> Arc<rustls::ClientConfig> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots.clone())
    .with_no_client_auth();
    config.enable_early_data = early_data;
    Arc::new(config)
}

/// Forwards connections to the edge, holding every chunk for `delay` in each direction.
struct DelayProxy;

impl DelayProxy {
    async fn start(upstream: u16, delay: Duration) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let server = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
                client.set_nodelay(true).unwrap();
                server.set_nodelay(true).unwrap();
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(delayed_pipe(client_read, server_write, delay));
                tokio::spawn(delayed_pipe(server_read, client_write, delay));
            }
        });
        port
    }
}

async fn delayed_pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (chunks, mut delayed) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = delayed.recv().await {
            tokio::time::sleep_until(due.into()).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0
            || chunks
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
        {
            break;
        }
    }
    drop(chunks);
    let _ = writer.await;
}

struct EdgeProcess {
    child: Child,
    port: u16,
    admin_port: u16,
    cert: std::path::PathBuf,
}

impl EdgeProcess {
    fn start(dir: &Path) -> Self {
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.key_pair.serialize_pem()).unwrap();
        let (port, admin_port) = (free_port(), free_port());
        let config = dir.join("edge.yaml");
        std::fs::write(
            &config,
            format!(
                "pop: bench\nlisten: [\"127.0.0.1:{port}\"]\nadmin_listen: 127.0.0.1:{admin_port}\n\
                 tls: {{ cert: {}, key: {}, early_data: {{ enabled: true }} }}\n\
                 spool: {{ dir: {} }}\n\
                 routes:\n  - {{ path: /hooks/github, provider: github, secrets: [\"{SECRET}\"], early_data: accept }}\n",
                cert.display(),
                key.display(),
                dir.join("spool").display()
            ),
        )
        .unwrap();
        let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/edge");
        let child = Command::new(&binary)
            .args(["run", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{}: {e} (cargo build --release -p edge)", binary.display())
            });
        let edge = EdgeProcess {
            child,
            port,
            admin_port,
            cert,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while edge.admin_get("/readyz").is_none() {
            assert!(Instant::now() < deadline, "edge not ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        edge
    }

    fn roots(&self) -> rustls::RootCertStore {
        let pem = std::fs::read(&self.cert).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            roots.add(cert.unwrap()).unwrap();
        }
        roots
    }

    fn admin_get(&self, path: &str) -> Option<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.admin_port)).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        let status_ok = text.lines().next()?.contains(" 200 ");
        status_ok.then_some(text)
    }

    fn metric(&self, name: &str) -> f64 {
        self.admin_get("/metrics")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const SECRET: &str = "bench-secret";
