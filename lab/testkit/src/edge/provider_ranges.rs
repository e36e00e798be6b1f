//! A provider's published egress list served over HTTP on loopback, as GitHub's `/meta`
//! or Stripe's `ips_webhooks.json` would be (tests reach no internet): what `edge ranges
//! update` fetches. Its answer can be changed while it runs; it stops when dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The endpoint; every GET gets the current answer.
pub struct RangesEndpoint {
    addr: SocketAddr,
    answer: Arc<Mutex<(u16, String)>>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RangesEndpoint {
    /// Listens on a free loopback port, answering 404 until [`RangesEndpoint::answer`].
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = Arc::new(Mutex::new((404, String::new())));
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (answer, stopping) = (Arc::clone(&answer), Arc::clone(&stopping));
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::Acquire) {
                        return;
                    }
                    if let Ok(stream) = stream {
                        let (status, body) = answer.lock().unwrap().clone();
                        respond(stream, status, &body);
                    }
                }
            })
        };
        Self {
            addr,
            answer,
            stopping,
            thread: Some(thread),
        }
    }

    /// From now on, answer `status` with `body` (JSON).
    pub fn answer(&self, status: u16, body: &str) {
        *self.answer.lock().unwrap() = (status, body.to_owned());
    }

    /// `http://127.0.0.1:PORT/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for RangesEndpoint {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads the request head (bounded) and answers once, closing the connection.
fn respond(mut stream: TcpStream, status: u16, body: &str) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let response = format!(
        "HTTP/1.1 {status} Answer\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
}
