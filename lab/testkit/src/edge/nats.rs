//! A real nats-server with JetStream (from Debian), started on a loopback port with its
//! store in a temp dir, stopped by PID.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// A JetStream-enabled nats-server on loopback, its store in a temporary directory.
pub struct Nats {
    child: Option<Child>,
    port: u16,
    store: tempfile::TempDir,
}

impl Nats {
    /// Starts one and waits until it answers.
    pub fn start() -> Nats {
        let mut nats = Nats {
            child: None,
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
        };
        nats.spawn();
        nats
    }

    /// Starts the server process (again, after `stop`).
    pub fn spawn(&mut self) {
        let child = Command::new("nats-server")
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server is installed by the test setup");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops it (SIGTERM, then waits).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
            child.wait().unwrap();
        }
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A JetStream context on a new connection.
    pub async fn jetstream(&self) -> async_nats::jetstream::Context {
        async_nats::jetstream::new(async_nats::connect(self.url()).await.unwrap())
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
