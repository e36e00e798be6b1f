//! Fleet-shared session tickets, with a client nobody here wrote: a session that
//! `openssl s_client` starts at one edge resumes at another edge holding the same key
//! file; an edge without it does not; rotating the file (SIGHUP) keeps old tickets valid
//! while their key is listed and ends them once it is gone.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use testkit::edge::*;

/// Runs s_client against `port`; returns "Reused" or "New".
fn s_client(port: u16, sess_in: Option<&Path>, sess_out: Option<&Path>) -> &'static str {
    let mut command = s_client_command(port);
    if let Some(path) = sess_in {
        command.arg("-sess_in").arg(path);
    }
    if let Some(path) = sess_out {
        command.arg("-sess_out").arg(path);
    }
    let mut child = command.spawn().unwrap();
    // Stay connected long enough to receive the NewSessionTicket, then hang up.
    std::thread::sleep(Duration::from_millis(700));
    let _ = child.stdin.take().unwrap().write_all(b"");
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    if text.contains("Reused, TLSv1.3") {
        "Reused"
    } else {
        assert!(text.contains("New, TLSv1.3"), "no TLS 1.3 session: {text}");
        "New"
    }
}

fn write_keys(path: &Path, keys: &[u8]) {
    let lines: Vec<String> = keys.iter().map(|k| BASE64.encode([*k; 32])).collect();
    std::fs::write(path, lines.join("\n")).unwrap();
}

fn hangup(edge: &Edge) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(edge.pid()),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
}

#[test]
fn sessions_resume_across_pops_and_rotate() {
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("tickets.keys");
    write_keys(&key_file, &[1]);
    let shared = |edge: Edge| {
        let section = format!(
            "tls:\n  session_tickets: {{ mode: shared, key_file: {} }}\n",
            key_file.display()
        );
        edge.reconfigure(|text| text.replacen("tls:\n", &section, 1))
    };
    let a = shared(Edge::start("", ""));
    let b = shared(Edge::start("", ""));
    let stateful = Edge::start("", "");

    let session = keys.path().join("a.pem");
    assert_eq!(s_client(a.port, None, Some(&session)), "New");
    assert_eq!(
        s_client(b.port, Some(&session), None),
        "Reused",
        "a session from PoP A resumes at PoP B"
    );
    assert_eq!(
        s_client(stateful.port, Some(&session), None),
        "New",
        "a PoP without the key file cannot resume it"
    );

    // Rotation: a new key in front, the old one still listed.
    write_keys(&key_file, &[2, 1]);
    hangup(&a);
    hangup(&b);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        s_client(b.port, Some(&session), None),
        "Reused",
        "old tickets resume while their key is listed"
    );
    let newer = keys.path().join("a2.pem");
    assert_eq!(s_client(a.port, None, Some(&newer)), "New");
    assert_eq!(s_client(b.port, Some(&newer), None), "Reused");

    // The old key retired: its tickets stop resuming, newer ones still do.
    write_keys(&key_file, &[2]);
    hangup(&b);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s_client(b.port, Some(&session), None), "New");
    assert_eq!(s_client(b.port, Some(&newer), None), "Reused");
    assert!(
        b.log_text().contains("session ticket keys reloaded"),
        "{}",
        b.log_text()
    );
}
