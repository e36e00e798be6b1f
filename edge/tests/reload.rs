//! SIGHUP reloads the config under load: 50 signed webhooks/s for 20 s over HTTP/1.1
//! and HTTP/2 while the certificate is replaced, a route is added, a secret is rotated
//! (new and old both valid, then the old one removed) and an invalid file is tried.
//! Not one request fails; each change is seen from outside when it is applied (the
//! renewed certificate's expiry in the metrics too).

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use testkit::edge::*;

const OLD: &str = GITHUB_OLD_SECRET;
const NEW: &str = GITHUB_SECRET;
const BOTH: &str = r#"secrets: ["gh-secret", "gh-old-secret"]"#;
const NOT_AFTER: &str = "edge_tls_certificate_not_after_timestamp_seconds{";
/// 4096-01-01T00:00:00Z, rcgen's default notAfter.
const RCGEN_DEFAULT_NOT_AFTER: f64 = 67_090_118_400.0;

/// A SIGHUP that arrives while the edge starts is held until the edge can handle it,
/// then applied as a reload: the edge does not die of SIGHUP's default action (seen
/// before: HUP 10 ms after start, exit 129). Sent from the moment the edge holds it or
/// handles it (before `process::run` holds it, the kernel's default action applies), then
/// later into start-up.
#[test]
fn a_sighup_during_start_up_is_a_reload_not_a_death() {
    let mut edge = Edge::create("", "");
    for (run, after_ms) in [0u64, 20, 50].into_iter().enumerate() {
        if run > 0 {
            edge.kill9();
        }
        edge.spawn_then(|pid| {
            let deadline = Instant::now() + Duration::from_secs(5);
            // Polled often: start-up with an empty spool takes only milliseconds.
            while !holds_or_handles_sighup(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(after_ms));
            kill(Pid::from_raw(pid), Signal::SIGHUP).unwrap();
        });
        wait_for(|| edge.metric(r#"edge_config_reloads_total{pop="test",result="ok"}"#) == 1.0);
        assert_eq!(
            post(
                &edge,
                "/hooks/github",
                NEW,
                &format!("after-early-hup-{run}")
            ),
            202
        );
    }
}

#[test]
fn reload_under_load_changes_certificate_routes_and_secrets_without_a_failed_request() {
    let edge = Edge::start("", "")
        .reconfigure(|text| text.replace(BOTH, &format!(r#"secrets: ["{OLD}"]"#)));
    let original = std::fs::read_to_string(&edge.config).unwrap();
    let first_serial = served_serial(&edge);
    let sign_with_new = Arc::new(AtomicBool::new(false));
    let load = Load::start(&edge, Arc::clone(&sign_with_new));
    std::thread::sleep(Duration::from_secs(2));

    assert_eq!(edge.metric(NOT_AFTER), RCGEN_DEFAULT_NOT_AFTER);
    // 1. Renewed certificate (same paths), a new route, the new secret beside the old.
    write_cert_expiring(edge.dir.path(), 2031, 5, 17);
    let new_route =
        "  - path: /hooks/added\n    provider: github\n    secrets: [\"added-secret\"]\n";
    let step1 = format!(
        "{}{new_route}",
        original.replace(
            &format!(r#"secrets: ["{OLD}"]"#),
            &format!(r#"secrets: ["{NEW}", "{OLD}"]"#)
        )
    );
    reload(&edge, &step1, 2);
    let renewed = served_serial(&edge);
    assert_ne!(renewed, first_serial, "the old certificate is still served");
    assert_eq!(renewed, file_serial(&edge));
    assert_eq!(
        edge.metric(NOT_AFTER),
        1_936_742_400.0,
        "2031-05-17T00:00:00Z"
    );
    assert_eq!(post(&edge, "/hooks/added", "added-secret", "added-1"), 202);
    assert_eq!(post(&edge, "/hooks/github", OLD, "old-while-both"), 202);
    assert_eq!(post(&edge, "/hooks/github", NEW, "new-while-both"), 202);
    sign_with_new.store(true, Ordering::Release);
    std::thread::sleep(Duration::from_secs(2));

    // 2. An invalid file: refused, field named, the running config keeps serving.
    let invalid = step1.replacen(&format!(r#"secrets: ["{NEW}", "{OLD}"]"#), "secrets: []", 1);
    std::fs::write(&edge.config, &invalid).unwrap();
    kill(Pid::from_raw(edge.pid()), Signal::SIGHUP).unwrap();
    wait_for(|| edge.metric(r#"edge_config_reloads_total{pop="test",result="failed"}"#) == 1.0);
    assert!(
        edge.log_text()
            .contains("routes[0].secrets: must not be empty"),
        "{}",
        edge.log_text()
    );
    assert_eq!(edge.metric("edge_config_generation{"), 2.0);
    assert_eq!(post(&edge, "/hooks/github", OLD, "old-after-invalid"), 202);
    std::thread::sleep(Duration::from_secs(2));

    // 3. The old secret retired: refused from now on, the new one still accepted.
    let step3 = step1.replace(
        &format!(r#"secrets: ["{NEW}", "{OLD}"]"#),
        &format!(r#"secrets: ["{NEW}"]"#),
    );
    reload(&edge, &step3, 3);
    assert_eq!(post(&edge, "/hooks/github", OLD, "old-after-removal"), 401);
    assert_eq!(post(&edge, "/hooks/github", NEW, "new-after-removal"), 202);
    assert_eq!(post(&edge, "/hooks/added", "added-secret", "added-2"), 202);

    let outcomes = load.finish();
    let failed: Vec<&(usize, Result<u16, String>)> =
        outcomes.iter().filter(|(_, r)| r != &Ok(202)).collect();
    assert!(
        outcomes.len() >= 950,
        "only {} requests sent",
        outcomes.len()
    );
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
    assert_eq!(
        edge.metric(r#"edge_config_reloads_total{pop="test",result="ok"}"#),
        2.0
    );
    println!(
        "reload under load: {} requests over HTTP/1.1 and HTTP/2, 0 failed, 2 reloads applied and 1 refused",
        outcomes.len()
    );
}

/// `admission.*` is in force after a reload, not only reported so: the limit follows
/// the new bounds at once, no restart is asked for, and requests are served.
#[test]
fn a_reload_puts_new_admission_limits_in_force() {
    let edge = Edge::start("", "");
    let limit = || edge.metric("webhook_ingress_concurrency_limit{");
    assert_eq!(limit(), 64.0, "the default initial limit");
    let text = std::fs::read_to_string(&edge.config).unwrap();
    let tight = format!("{text}admission:\n  initial_limit: 3\n  min_limit: 1\n  max_limit: 3\n");
    reload(&edge, &tight, 2);
    assert_eq!(limit(), 3.0);
    assert!(
        !edge.log_text().contains("change only at a restart"),
        "{}",
        edge.log_text()
    );
    assert_eq!(
        post(&edge, "/hooks/github", GITHUB_SECRET, "after-reload"),
        202
    );
}

/// Writes `config`, sends SIGHUP and waits until generation `generation` is in force.
fn reload(edge: &Edge, config: &str, generation: u32) {
    std::fs::write(&edge.config, config).unwrap();
    kill(Pid::from_raw(edge.pid()), Signal::SIGHUP).unwrap();
    wait_for(|| edge.metric("edge_config_generation{") == f64::from(generation));
}

fn wait_for(condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not reloaded in 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` holds SIGHUP (its main thread blocks it) or already has a
/// handler for it: bit 1 of /proc's SigBlk or SigCgt mask.
fn holds_or_handles_sighup(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = |field: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .unwrap_or(0)
    };
    (mask("SigBlk:") | mask("SigCgt:")) & 1 << (Signal::SIGHUP as i32 - 1) != 0
}

/// The serial of the certificate the edge serves to a new connection.
fn served_serial(edge: &Edge) -> String {
    let script = format!(
        "openssl s_client -connect 127.0.0.1:{} -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -serial",
        edge.port
    );
    shell(&script)
}

fn file_serial(edge: &Edge) -> String {
    let cert = edge.dir.path().join("cert.pem");
    shell(&format!(
        "openssl x509 -noout -serial -in {}",
        cert.display()
    ))
}

fn shell(script: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(text.starts_with("serial="), "{script}: {text:?}");
    text
}

/// One signed GitHub delivery over a fresh connection; the status.
fn post(edge: &Edge, path: &str, secret: &str, delivery: &str) -> u16 {
    let url = edge.url(path);
    let (secret, delivery) = (secret.to_owned(), delivery.to_owned());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            let body = format!(r#"{{"delivery":"{delivery}"}}"#);
            signed(&any_cert_client(false), &url, &secret, &delivery, &body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
}

fn signed(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    delivery: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", delivery)
        .header(
            "X-Hub-Signature-256",
            github_signature(secret, body.as_bytes()),
        )
        .body(body.to_owned())
}

/// The certificate changes during the test: trust whatever the edge serves.
fn any_cert_client(http2: bool) -> reqwest::Client {
    let builder = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10));
    let builder = if http2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    builder.build().unwrap()
}

/// 50 signed webhooks a second for 20 s, alternating HTTP/1.1 and HTTP/2, signed with
/// the old secret until `sign_with_new` is set.
struct Load {
    thread: std::thread::JoinHandle<Vec<(usize, Result<u16, String>)>>,
}

impl Load {
    fn start(edge: &Edge, sign_with_new: Arc<AtomicBool>) -> Load {
        let url = edge.url("/hooks/github");
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async move {
                let clients = [any_cert_client(false), any_cert_client(true)];
                let mut ticker = tokio::time::interval(Duration::from_millis(20));
                let mut requests = tokio::task::JoinSet::new();
                for i in 0..1000 {
                    ticker.tick().await;
                    let secret = if sign_with_new.load(Ordering::Acquire) {
                        NEW
                    } else {
                        OLD
                    };
                    let request = signed(
                        &clients[i % 2],
                        &url,
                        secret,
                        &format!("load-{i}"),
                        &format!(r#"{{"n":{i}}}"#),
                    );
                    requests.spawn(async move {
                        let status = request.send().await.map(|r| r.status().as_u16());
                        (i, status.map_err(|e| format!("{e:?}")))
                    });
                }
                let mut outcomes = Vec::new();
                while let Some(outcome) = requests.join_next().await {
                    outcomes.push(outcome.unwrap());
                }
                outcomes
            })
        });
        Load { thread }
    }

    fn finish(self) -> Vec<(usize, Result<u16, String>)> {
        self.thread.join().unwrap()
    }
}
