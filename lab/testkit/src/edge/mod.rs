//! Test harness: runs the real `edge` binary on loopback with a generated certificate,
//! and signs webhooks the way providers do.

pub mod attack;
pub mod h2_raw;
pub mod nats;
pub mod provider_ranges;
pub mod provider_sdk;

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sha2::Sha256;

/// The test GitHub route's secret.
pub const GITHUB_SECRET: &str = "gh-secret";
/// An older secret the route also accepts (rotation).
pub const GITHUB_OLD_SECRET: &str = "gh-old-secret";

/// The `edge` binary running on loopback with a generated certificate.
pub struct Edge {
    /// The process, until killed.
    pub child: Option<Child>,
    /// Config, certificate, spool and log.
    pub dir: tempfile::TempDir,
    /// The webhook port.
    pub port: u16,
    /// The admin port.
    pub admin_port: u16,
    /// The config file.
    pub config: PathBuf,
    /// The edge's log file.
    pub log: PathBuf,
    /// RLIMIT_NOFILE (soft and hard) for the process, when set.
    pub fd_limit: Option<u64>,
    /// Times this edge moved to fresh ports because one was taken.
    port_retries: u32,
    /// Environment variables the process gets besides the test's.
    env: Vec<(String, String)>,
    spool: PathBuf,
}

/// A free loopback port (the listener is closed before the edge binds it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The `edge` binary.
pub fn edge_bin() -> &'static str {
    crate::built_binary("edge")
}

/// Writes a self-signed certificate for localhost/127.0.0.1 into `dir`.
pub fn write_cert(dir: &Path) -> (PathBuf, PathBuf) {
    write_cert_with(dir, localhost_cert())
}

/// Like [`write_cert`], valid until midnight UTC of the date.
pub fn write_cert_expiring(dir: &Path, year: i32, month: u8, day: u8) -> (PathBuf, PathBuf) {
    let mut params = localhost_cert();
    params.not_after = rcgen::date_time_ymd(year, month, day);
    write_cert_with(dir, params)
}

fn localhost_cert() -> rcgen::CertificateParams {
    rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap()
}

fn write_cert_with(dir: &Path, params: rcgen::CertificateParams) -> (PathBuf, PathBuf) {
    let key_pair = rcgen::KeyPair::generate().unwrap();
    let generated = params.self_signed(&key_pair).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, generated.pem()).unwrap();
    std::fs::write(&key, key_pair.serialize_pem()).unwrap();
    (cert, key)
}

/// The standard test config; `extra_routes` is appended to the routes list and
/// `spool_extra` to the spool block.
pub fn config(
    dir: &Path,
    port: u16,
    admin_port: u16,
    spool_extra: &str,
    extra_routes: &str,
) -> String {
    let (cert, key) = if dir.join("cert.pem").exists() {
        (dir.join("cert.pem"), dir.join("key.pem"))
    } else {
        write_cert(dir)
    };
    format!(
        r#"pop: test
listen: ["127.0.0.1:{port}"]
admin_listen: 127.0.0.1:{admin_port}
drain_grace: 1s
tls:
  cert: {cert}
  key: {key}
spool:
  dir: {spool}
{spool_extra}
routes:
  - path: /hooks/github
    provider: github
    secrets: ["{GITHUB_SECRET}", "{GITHUB_OLD_SECRET}"]
    max_body: 64KiB
{extra_routes}
"#,
        cert = cert.display(),
        key = key.display(),
        spool = dir.join("spool").display(),
    )
}

impl Edge {
    /// Starts an edge with the GitHub route, `spool_extra` added to its `spool:` section and `extra_routes` to its routes; waits until it is ready.
    pub fn start(spool_extra: &str, extra_routes: &str) -> Edge {
        let mut edge = Edge::create(spool_extra, extra_routes);
        edge.spawn();
        edge
    }

    /// As [`Edge::start`], with the edge's directory, spool included, in memory (a
    /// tmpfs): its fsyncs cost nothing, or exactly the spool's `sync_delay`. For tests
    /// whose timing must not include a real disk's stalls: what a sender costs the edge
    /// in CPU and connection slots, or a disk slowed to a known speed (beside a writeback
    /// of a few GB, this machine's fsyncs took up to 400 ms, and a legitimate sender's p99
    /// rose from 3 to 343 ms with no attack running).
    pub fn start_in_memory(spool_extra: &str, extra_routes: &str) -> Edge {
        let dir = tempfile::tempdir_in(IN_MEMORY).unwrap();
        let mut edge = Edge::create_in(dir, spool_extra, extra_routes);
        edge.spawn();
        edge
    }

    /// An edge with its config written, not started: [`Edge::spawn`] starts it.
    pub fn create(spool_extra: &str, extra_routes: &str) -> Edge {
        Edge::create_in(tempfile::tempdir().unwrap(), spool_extra, extra_routes)
    }

    fn create_in(dir: tempfile::TempDir, spool_extra: &str, extra_routes: &str) -> Edge {
        let (port, admin_port) = (free_port(), free_port());
        let config_path = dir.path().join("edge.yaml");
        std::fs::write(
            &config_path,
            config(dir.path(), port, admin_port, spool_extra, extra_routes),
        )
        .unwrap();
        let mut edge = Edge {
            child: None,
            dir,
            port,
            admin_port,
            config: config_path,
            log: PathBuf::new(),
            fd_limit: None,
            port_retries: 0,
            env: Vec::new(),
            spool: PathBuf::new(),
        };
        edge.spool = edge.dir.path().join("spool");
        edge
    }

    /// Puts this edge's spool (before it starts) in `dir`.
    pub fn move_spool(&mut self, dir: &Path) {
        let from = format!("dir: {}", self.spool.display());
        self.edit_config(|text| text.replace(&from, &format!("dir: {}", dir.display())));
        self.spool = dir.to_owned();
    }

    /// Restarts this edge with `section` (top-level YAML, e.g. a backhaul block) appended to
    /// its config.
    pub fn with_section(self, section: &str) -> Edge {
        self.reconfigure(|text| format!("{text}{section}"))
    }

    /// Restarts this edge with its config text passed through `edit`.
    pub fn reconfigure(mut self, edit: impl FnOnce(String) -> String) -> Edge {
        self.kill9();
        self.edit_config(edit);
        self.spawn();
        self
    }

    /// Rewrites this edge's config file (takes effect at the next start or reload).
    pub fn edit_config(&self, edit: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        std::fs::write(&self.config, edit(text)).unwrap();
    }

    /// Restarts this edge with its open-files limit (soft and hard) set to `limit`.
    pub fn set_fd_limit(&mut self, limit: u64) {
        self.kill9();
        self.fd_limit = Some(limit);
        self.spawn();
    }

    /// Gives the process `key=value` in its environment from its next start on (as
    /// systemd's `NOTIFY_SOCKET`, `WATCHDOG_USEC`).
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Starts the binary (again) on the same config and spool, and waits for /readyz.
    pub fn spawn(&mut self) {
        self.spawn_then(|_| {});
    }

    /// As [`Edge::spawn`], calling `early` with the new process's PID before waiting.
    pub fn spawn_then(&mut self, early: impl FnOnce(i32)) {
        let runs = std::fs::read_dir(self.dir.path()).unwrap().filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("edge-")
        });
        self.log = self.dir.path().join(format!("edge-{}.log", runs.count()));
        let log = std::fs::File::create(&self.log).unwrap();
        let mut command = Command::new(edge_bin());
        command
            .args(["run", "--config"])
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(log)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(limit) = self.fd_limit {
            use std::os::unix::process::CommandExt;
            // SAFETY: only an async-signal-safe setrlimit between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    nix::sys::resource::setrlimit(
                        nix::sys::resource::Resource::RLIMIT_NOFILE,
                        limit,
                        limit,
                    )
                    .map_err(std::io::Error::from)
                });
            }
        }
        let child = command.spawn().unwrap();
        let pid = child.id() as i32;
        self.child = Some(child);
        early(pid);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            // Its own log says ready too: a /readyz alone may come from another test's
            // edge that took the admin port between `free_port` and this edge's bind.
            if self.readyz() == Some(200) && self.log_text().contains("edge ready") {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                if self.log_text().contains(ADDRESS_IN_USE) && self.port_retries < PORT_RETRIES {
                    self.port_retries += 1;
                    self.take_new_ports();
                    return self.spawn();
                }
                panic!("edge exited with {status}: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("edge not ready in time: {}", self.log_text());
    }

    /// Moves this edge to two fresh ports: another process took one of its own.
    fn take_new_ports(&mut self) {
        let (port, admin_port) = (free_port(), free_port());
        self.edit_config(|text| {
            text.replace(
                &format!("127.0.0.1:{}\"", self.port),
                &format!("127.0.0.1:{port}\""),
            )
            .replace(
                &format!("admin_listen: 127.0.0.1:{}", self.admin_port),
                &format!("admin_listen: 127.0.0.1:{admin_port}"),
            )
        });
        (self.port, self.admin_port) = (port, admin_port);
    }

    /// `https://127.0.0.1:PORT/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// The spool's directory.
    pub fn spool_dir(&self) -> PathBuf {
        self.spool.clone()
    }

    /// The certificate the edge presents, PEM.
    pub fn cert_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("cert.pem")).unwrap()
    }

    /// The edge's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Status of GET /readyz, or None when the admin port does not answer.
    pub fn readyz(&self) -> Option<u16> {
        admin_get(self.admin_port, "/readyz").map(|(status, _)| status)
    }

    /// The `/metrics` page, or nothing when it does not answer.
    pub fn metrics(&self) -> String {
        admin_get(self.admin_port, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// The sum of every sample whose line starts with `prefix` (a name, optionally with
    /// the start of its labels); 0 when there is none.
    pub fn metric(&self, prefix: &str) -> f64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            // Not `sum()`: an empty f64 sum is -0, which prints as "-0".
            .fold(0.0, |total, value| total + value)
    }

    /// Kills the edge with SIGKILL and waits for it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// The edge's PID.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }
}

impl std::fmt::Debug for Edge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "edge on :{} (log {})", self.port, self.log.display())
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        self.kill9();
        if !std::thread::panicking() {
            self.assert_no_secret_in_logs();
        }
    }
}

impl Edge {
    /// No run of this edge wrote a secret of its config into its log: every test that
    /// starts an edge checks this when it ends.
    fn assert_no_secret_in_logs(&self) {
        let config = std::fs::read_to_string(&self.config).unwrap_or_default();
        let secrets = config_secrets(&config);
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !(name.starts_with("edge-") && name.ends_with(".log")) {
                continue;
            }
            let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for secret in &secrets {
                assert!(
                    !log.contains(secret.as_str()),
                    "the secret {secret:?} is in {name}"
                );
            }
        }
    }
}

/// Every route secret in a config's text (those long enough not to occur by chance).
pub fn config_secrets(config: &str) -> Vec<String> {
    let yaml: serde_yaml::Value = serde_yaml::from_str(config).unwrap_or_default();
    let routes = yaml.get("routes").and_then(|r| r.as_sequence());
    routes
        .into_iter()
        .flatten()
        .filter_map(|route| route.get("secrets")?.as_sequence())
        .flatten()
        .filter_map(|secret| secret.as_str())
        .filter(|secret| secret.len() >= 6)
        .map(str::to_owned)
        .collect()
}

/// A minimal HTTP/1.0 GET against the admin listener.
pub fn admin_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: admin\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// A client that trusts `edge`'s certificate, over HTTP/2 or HTTP/1.1.
pub fn client(edge: &Edge, http2: bool) -> reqwest::Client {
    let cert = reqwest::Certificate::from_pem(&edge.cert_pem()).unwrap();
    let builder = reqwest::Client::builder()
        .add_root_certificate(cert)
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(128);
    let builder = if http2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    builder.build().unwrap()
}

/// HMAC-SHA256 of the concatenated `parts`.
pub fn hmac_sha256(secret: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// GitHub's `X-Hub-Signature-256` value for `body`.
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    format!(
        "sha256={}",
        const_hex::encode(hmac_sha256(secret.as_bytes(), &[body]))
    )
}

/// A body of its own for `delivery`: one signed body under several delivery ids is a
/// replay, which the edge acknowledges without storing.
pub fn delivery_body(delivery: &str) -> Vec<u8> {
    format!(r#"{{"delivery":"{delivery}"}}"#).into_bytes()
}

/// A signed GitHub delivery.
pub fn github_post(
    client: &reqwest::Client,
    edge: &Edge,
    delivery: &str,
    body: &[u8],
) -> reqwest::RequestBuilder {
    signed_github(client.post(edge.url("/hooks/github")), delivery, body)
}

/// `request` as a GitHub delivery of `body`, signed with the test secret.
pub fn signed_github(
    request: reqwest::RequestBuilder,
    delivery: &str,
    body: &[u8],
) -> reqwest::RequestBuilder {
    let signature = github_signature(GITHUB_SECRET, body);
    github_delivery(request, delivery, signature, body.to_vec())
}

fn github_delivery(
    request: reqwest::RequestBuilder,
    delivery: &str,
    signature: String,
    body: Vec<u8>,
) -> reqwest::RequestBuilder {
    request
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", delivery)
        .header("X-Hub-Signature-256", signature)
        .header("Content-Type", "application/json")
        .body(body)
}

/// GitHub deliveries of one large JSON object, each made distinct by its delivery id
/// appended as a last field (one body under several ids is a replay, which the edge does
/// not store). The HMAC over the shared part is taken once: a delivery costs its sender a
/// copy of the body and an HMAC of its last few bytes, so a benchmark's client stays
/// cheaper than the edge it loads.
pub struct SignedBody {
    /// The object without its closing brace, and `,"delivery":"`.
    head: bytes::Bytes,
    /// The route's GitHub secret, fed `head`.
    mac: Hmac<Sha256>,
}

impl SignedBody {
    /// Deliveries of `object` (a JSON object), signed with the route's GitHub secret.
    pub fn github(object: &str) -> Self {
        let open = object.strip_suffix('}').expect("a JSON object");
        let head = bytes::Bytes::from(format!(r#"{open},"delivery":""#));
        let mut mac = Hmac::<Sha256>::new_from_slice(GITHUB_SECRET.as_bytes()).unwrap();
        mac.update(&head);
        Self { head, mac }
    }

    /// `request` as the GitHub push delivery `delivery`, its body and signature its own.
    pub fn request(
        &self,
        request: reqwest::RequestBuilder,
        delivery: &str,
    ) -> reqwest::RequestBuilder {
        let tail = format!(r#"{delivery}"}}"#);
        let mut mac = self.mac.clone();
        mac.update(tail.as_bytes());
        let signature = format!("sha256={}", const_hex::encode(mac.finalize().into_bytes()));
        let mut body = Vec::with_capacity(self.head.len() + tail.len());
        body.extend_from_slice(&self.head);
        body.extend_from_slice(tail.as_bytes());
        github_delivery(request, delivery, signature, body)
    }
}

/// Unix time in seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `openssl s_client` speaking TLS 1.3 to the edge on `port`, stdin and stdout piped.
pub fn s_client_command(port: u16) -> Command {
    let mut command = Command::new("openssl");
    command
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", "localhost", "-tls1_3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

/// A TLS connection to the edge that negotiated h2.
pub async fn h2_tls(edge: &Edge) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    tls_with_alpn(edge, b"h2").await
}

/// A TLS connection to the edge offering the one application protocol `alpn`.
pub async fn tls_with_alpn(
    edge: &Edge,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    try_tls_with_alpn(edge, alpn).await.unwrap()
}

/// [`tls_with_alpn`], for a test in which the edge may refuse the connection.
pub async fn try_tls_with_alpn(
    edge: &Edge,
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    tls_to(edge.port, &edge.cert_pem(), alpn).await
}

/// An h2 connection to the edge on `port` whose certificate is `cert_pem`: for tasks
/// that outlive a borrow of the [`Edge`].
pub async fn h2_tls_to(
    port: u16,
    cert_pem: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    tls_to(port, cert_pem, b"h2").await
}

async fn tls_to(
    port: u16,
    cert_pem: &[u8],
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    tls_from("127.0.0.1".parse().unwrap(), port, cert_pem, alpn).await
}

/// A TLS connection from the loopback address `source` to the edge on `port` whose
/// certificate is `cert_pem`, offering the one application protocol `alpn`.
pub async fn tls_from(
    source: std::net::IpAddr,
    port: u16,
    cert_pem: &[u8],
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(cert_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((source, 0).into())?;
    let tcp = socket.connect(([127, 0, 0, 1], port).into()).await?;
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// A tmpfs of `size` (e.g. "6m") mounted at `path` for the test's lifetime: a small
/// filesystem to fill. Needs root.
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts the tmpfs (`mount -t tmpfs -o size=SIZE`).
    pub fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs on {}", path.display());
        Tmpfs {
            path: path.to_owned(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A tmpfs every Linux machine has.
const IN_MEMORY: &str = "/dev/shm";
/// How a bind that lost its port to another process ends up in the edge's log.
const ADDRESS_IN_USE: &str = "os error 98";
/// Fresh ports an edge tries before a taken port fails its test.
const PORT_RETRIES: u32 = 3;
