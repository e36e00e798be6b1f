//! The real `edge` binary on loopback, driven over HTTPS (h1 and h2, reqwest and curl):
//! every answer the webhook path gives, de-duplication, metrics, drain and shutdown.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use testkit::edge::*;

const MORE_ROUTES: &str = r#"  - path: /hooks/stripe
    provider: stripe
    secrets: ["whsec_stripe"]
  - path: /hooks/shopify
    provider: shopify
    secrets: ["shpss_secret"]
  - path: /hooks/slack
    provider: slack
    secrets: ["slack-secret"]
  - path: /hooks/std
    provider: standard
    secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
  - path: /hooks/custom
    provider: hmac
    secrets: ["custom-secret"]
    hmac: { header: X-Signature, encoding: base64, id_header: X-Request-Id }
"#;

fn spool_ids(edge: &Edge) -> Vec<(String, String)> {
    edge::spool::dump(&edge.spool_dir())
        .unwrap()
        .into_iter()
        .map(|r| (r.route, edge::event::id_of_key(&r.event_id).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn github_over_h1_and_h2_is_stored_then_acknowledged() {
    let edge = Edge::start("", "");
    for (http2, delivery, body) in [
        (false, "d-h1", br#"{"zen":"hi"}"#),
        (true, "d-h2", br#"{"zen":"h2"}"#),
    ] {
        let response = github_post(&client(&edge, http2), &edge, delivery, body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "http2={http2}");
        let expected = if http2 {
            reqwest::Version::HTTP_2
        } else {
            reqwest::Version::HTTP_11
        };
        assert_eq!(response.version(), expected);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["duplicate"], false);
    }
    let records = edge::spool::dump(&edge.spool_dir()).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].body, br#"{"zen":"hi"}"#);
    assert_eq!(
        (records[0].pop.as_str(), records[0].route.as_str()),
        ("test", "hooks_github")
    );
    let kept: Vec<&str> = records[0].headers.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        kept.contains(&"x-github-event") && kept.contains(&"x-hub-signature-256"),
        "{kept:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rotated_secret_is_accepted() {
    let edge = Edge::start("", "");
    let body = b"{}";
    let response = client(&edge, false)
        .post(edge.url("/hooks/github"))
        .header("X-GitHub-Delivery", "rotated")
        .header(
            "X-Hub-Signature-256",
            github_signature(GITHUB_OLD_SECRET, body),
        )
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_refusal_has_its_status() {
    let edge = Edge::start("", "");
    let c = client(&edge, false);
    let url = edge.url("/hooks/github");

    let r = c
        .post(&url)
        .header("X-GitHub-Delivery", "x")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("missing header x-hub-signature-256")
    );

    let sig = github_signature("wrong", b"{}");
    let r = c
        .post(&url)
        .header("X-GitHub-Delivery", "x")
        .header("X-Hub-Signature-256", sig)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("no signature matches") && !text.contains(GITHUB_SECRET),
        "{text}"
    );

    let r = c
        .post(&url)
        .header(
            "X-Hub-Signature-256",
            github_signature(GITHUB_SECRET, b"{}"),
        )
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        400,
        "a verified request without X-GitHub-Delivery is malformed"
    );

    let r = c
        .post(edge.url("/hooks/nope"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");

    let big = vec![b'x'; 64 * 1024 + 1];
    let r = github_post(&c, &edge, "big", &big).send().await.unwrap();
    assert_eq!(r.status(), 413, "declared Content-Length over max_body");

    let r = github_post(&client(&edge, false), &edge, "huge-headers", b"{}")
        .header("X-Padding", "p".repeat(20 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 431);

    assert!(spool_ids(&edge).is_empty(), "nothing refused may be stored");
    // The 431 is counted when hyper ends that connection, just after the answer left.
    std::thread::sleep(Duration::from_millis(300));
    let metrics = edge.metrics();
    for needle in [
        r#"edge_requests_total{pop="test",route="hooks_github",status="401"} 2"#,
        r#"edge_verify_failures_total{pop="test",route="hooks_github",reason="mismatch"} 1"#,
        r#"edge_requests_total{pop="test",route="hooks_github",status="413"} 1"#,
        r#"edge_rejected_total{pop="test",reason="unknown_path"} 1"#,
        r#"edge_rejected_total{pop="test",reason="header_too_large"} 1"#,
    ] {
        assert!(metrics.contains(needle), "missing {needle} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicates_are_acknowledged_once_stored_once() {
    let edge = Edge::start("", "");
    let c = client(&edge, true);
    let mut answers = Vec::new();
    let sends: Vec<_> = (0..8)
        .map(|_| github_post(&c, &edge, "same-delivery", b"{\"a\":1}").send())
        .collect();
    for response in futures_join(sends).await {
        let response = response.unwrap();
        assert_eq!(response.status(), 202);
        let body: serde_json::Value = response.json().await.unwrap();
        answers.push(body["duplicate"].as_bool().unwrap());
    }
    assert_eq!(
        answers.iter().filter(|d| !**d).count(),
        1,
        "exactly one store: {answers:?}"
    );
    assert_eq!(
        spool_ids(&edge),
        vec![("hooks_github".to_owned(), "same-delivery".to_owned())]
    );
    assert!(
        edge.metrics()
            .contains(r#"edge_duplicates_total{pop="test",route="hooks_github"} 7"#)
    );
}

async fn futures_join<F>(futures: Vec<F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn every_provider_scheme_end_to_end() {
    let edge = Edge::start("", MORE_ROUTES);
    let c = client(&edge, false);
    let now = unix_now();

    let body = br#"{"id":"evt_123","object":"event"}"#;
    let stripe = |t: u64| {
        let sig = const_hex::encode(hmac_sha256(
            b"whsec_stripe",
            &[t.to_string().as_bytes(), b".", body],
        ));
        c.post(edge.url("/hooks/stripe"))
            .header("Stripe-Signature", format!("t={t},v1={sig}"))
            .body(body.to_vec())
            .send()
    };
    assert_eq!(stripe(now).await.unwrap().status(), 202);
    let r = stripe(now - 301).await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("too old"));

    let body = br#"{"id":1}"#;
    let sig = BASE64.encode(hmac_sha256(b"shpss_secret", &[body]));
    let r = c
        .post(edge.url("/hooks/shopify"))
        .header("X-Shopify-Hmac-Sha256", sig)
        .header("X-Shopify-Webhook-Id", "shop-1")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "shopify acknowledges with 200");

    let ts = now.to_string();
    let slack = |body: &'static [u8]| {
        let sig = const_hex::encode(hmac_sha256(
            b"slack-secret",
            &[b"v0:", ts.as_bytes(), b":", body],
        ));
        c.post(edge.url("/hooks/slack"))
            .header("X-Slack-Signature", format!("v0={sig}"))
            .header("X-Slack-Request-Timestamp", &ts)
            .body(body.to_vec())
            .send()
    };
    let r = slack(br#"{"type":"event_callback","event_id":"Ev1"}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let r = slack(br#"{"type":"url_verification","challenge":"chal-42","token":"t"}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "chal-42");

    let key = BASE64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let body = br#"{"type":"x"}"#;
    let sig = BASE64.encode(hmac_sha256(&key, &[b"msg_9.", ts.as_bytes(), b".", body]));
    let r = c
        .post(edge.url("/hooks/std"))
        .header("webhook-id", "msg_9")
        .header("webhook-timestamp", &ts)
        .header("webhook-signature", format!("v1,{sig}"))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);

    let body = b"plain";
    let sig = BASE64.encode(hmac_sha256(b"custom-secret", &[body]));
    let r = c
        .post(edge.url("/hooks/custom"))
        .header("X-Signature", sig)
        .header("X-Request-Id", "req-7")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);

    let mut ids = spool_ids(&edge);
    ids.sort();
    let expected: Vec<(String, String)> = [
        ("hooks_custom", "req-7"),
        ("hooks_shopify", "shop-1"),
        ("hooks_slack", "Ev1"),
        ("hooks_std", "msg_9"),
        ("hooks_stripe", "evt_123"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(
        ids, expected,
        "the url_verification challenge is answered, not stored"
    );
}

/// Dropbox, Okta and Microsoft Graph handshakes are answered on the routes configured for
/// them, in each provider's own shape, and never stored; a route without `challenge:`
/// answers a handshake as any other request (405 for a GET); a value the edge would not
/// echo gets a 400; events on the same routes are verified and stored as usual.
#[tokio::test(flavor = "multi_thread")]
async fn endpoint_handshakes_are_answered_only_where_configured_and_never_stored() {
    let routes = r#"  - path: /hooks/dropbox
    provider: hmac
    secrets: ["dropbox-secret"]
    hmac: { header: X-Dropbox-Signature, id_header: X-Request-Id }
    challenge: dropbox
  - path: /hooks/okta
    provider: hmac
    secrets: ["okta-secret"]
    hmac: { header: X-Signature, id_header: X-Request-Id }
    challenge: okta
  - path: /hooks/graph
    provider: hmac
    secrets: ["graph-secret"]
    hmac: { header: X-Signature, id_header: X-Request-Id }
    challenge: microsoft_graph
"#;
    let edge = Edge::start("", routes);
    let c = client(&edge, false);

    let r = c
        .get(edge.url("/hooks/dropbox?challenge=z9Xq-4%2B7"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(r.text().await.unwrap(), "z9Xq-4+7");

    let r = c
        .get(edge.url("/hooks/okta"))
        .header("x-okta-verification-challenge", "okta-7f1e")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body, serde_json::json!({ "verification": "okta-7f1e" }));

    let token =
        "Validation: Testing client application reachability for subscription Request-Id: 9d1c";
    let r = c
        .post(edge.url("/hooks/graph"))
        .query(&[("validationToken", token)])
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), token);

    let r = c
        .get(edge.url("/hooks/github?challenge=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405, "a route without challenge: answers none");
    let r = c
        .get(edge.url("/hooks/okta?challenge=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405, "only the configured handshake's shape");
    let r = c
        .get(edge.url("/hooks/dropbox?challenge=%3Cscript%3E%0A"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("printable ASCII"));

    let body = br#"{"list_folder":{"accounts":["dbid:1"]}}"#;
    let r = c
        .post(edge.url("/hooks/dropbox"))
        .header(
            "X-Dropbox-Signature",
            const_hex::encode(hmac_sha256(b"dropbox-secret", &[body])),
        )
        .header("X-Request-Id", "dbx-1")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        202,
        "events on a handshake route are verified and stored"
    );
    assert_eq!(
        spool_ids(&edge),
        [("hooks_dropbox".to_owned(), "dbx-1".to_owned())],
        "handshakes are answered, not stored"
    );
    let metrics = edge.metrics();
    for line in [
        r#"edge_challenges_total{pop="test",route="hooks_dropbox",challenge="dropbox",outcome="answered"} 1"#,
        r#"edge_challenges_total{pop="test",route="hooks_dropbox",challenge="dropbox",outcome="not_printable"} 1"#,
        r#"edge_challenges_total{pop="test",route="hooks_okta",challenge="okta",outcome="answered"} 1"#,
        r#"edge_challenges_total{pop="test",route="hooks_graph",challenge="microsoft_graph",outcome="answered"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

/// Zoom signs `v0:{ts}:{body}` under its own headers; its signed `endpoint.url_validation`
/// is answered with the plain token's HMAC under the secret that verified it (the second
/// of two here, as during a rotation), never stored; an unsigned one gets a 401.
#[tokio::test(flavor = "multi_thread")]
async fn zoom_events_are_stored_and_its_url_validation_answered_under_the_matching_secret() {
    let routes =
        "  - path: /hooks/zoom\n    provider: zoom\n    secrets: [\"zoom-old\", \"zoom-new\"]\n";
    let edge = Edge::start("", routes);
    let c = client(&edge, false);
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let zoom = |body: &'static [u8], secret: &'static [u8]| {
        let sig = const_hex::encode(hmac_sha256(secret, &[b"v0:", ts.as_bytes(), b":", body]));
        c.post(edge.url("/hooks/zoom"))
            .header("x-zm-signature", format!("v0={sig}"))
            .header("x-zm-request-timestamp", &ts)
            .body(body.to_vec())
            .send()
    };
    let event =
        br#"{"event":"meeting.started","event_ts":1700000000000,"payload":{"object":{"id":"85"}}}"#;
    assert_eq!(
        zoom(event, b"zoom-new").await.unwrap().status(),
        200,
        "Zoom counts only 200 and 204 as delivered"
    );

    let validation = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1700000000001,"event":"endpoint.url_validation"}"#;
    let r = zoom(validation, b"zoom-new").await.unwrap();
    assert_eq!(r.status(), 200);
    let answer: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        answer,
        serde_json::json!({
            "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
            "encryptedToken": const_hex::encode(hmac_sha256(b"zoom-new", &[b"qgg8vlvZRS6UYooatFL8Aw"])),
        })
    );
    assert_eq!(zoom(validation, b"not-ours").await.unwrap().status(), 401);

    let records = edge::spool::dump(&edge.spool_dir()).unwrap();
    assert_eq!(records.len(), 1, "the validation is answered, not stored");
    assert_eq!(records[0].body, event.to_vec());
    assert!(
        records[0]
            .headers
            .iter()
            .any(|(name, _)| name == "x-zm-signature"),
        "Zoom's headers are kept for the origin to verify again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn full_spool_answers_503_with_retry_after_and_writes_nothing_partial() {
    let edge = Edge::start(
        "  max_bytes: 2MiB\n  segment_bytes: 1MiB",
        "  - path: /hooks/big\n    provider: github\n    secrets: [\"big\"]\n    max_body: 512KiB\n",
    );
    let c = client(&edge, false);
    let mut statuses = Vec::new();
    for i in 0..6 {
        let mut body = vec![b'z'; 500 * 1024];
        body[0] = b'0' + i;
        let sig = github_signature("big", &body);
        let r = c
            .post(edge.url("/hooks/big"))
            .header("X-GitHub-Delivery", format!("big-{i}"))
            .header("X-Hub-Signature-256", &sig)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == 503 {
            let retry: u64 = r.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((5..15).contains(&retry));
        }
    }
    assert_eq!(statuses[..3], [202, 202, 202], "{statuses:?}");
    assert_eq!(*statuses.last().unwrap(), 503, "{statuses:?}");
    let stored = statuses.iter().filter(|s| **s == 202).count();
    assert_eq!(spool_ids(&edge).len(), stored);
    let segments: Vec<Vec<u8>> = std::fs::read_dir(edge.spool_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "seg"))
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    let held: usize = segments
        .iter()
        .map(|bytes| edge::spool::scan::scan_segment(bytes).end)
        .sum();
    assert!(held <= 2 << 20, "spool holds {held} bytes, over max_bytes");
    // Beyond the records only the active segment's preallocated zeros.
    let on_disk: usize = segments.iter().map(Vec::len).sum();
    assert!(
        on_disk <= held + (1 << 20),
        "{on_disk} bytes of segment files"
    );
    assert_eq!(
        edge.readyz(),
        Some(503),
        "over the high-water mark the PoP is not ready"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_posts_over_http1_and_http2() {
    let edge = Edge::start("", "");
    let cert = edge.dir.path().join("cert.pem");
    for (flag, delivery) in [("--http1.1", "curl-1"), ("--http2", "curl-2")] {
        let body = &format!(r#"{{"via":"curl","delivery":"{delivery}"}}"#);
        let output = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{http_version}",
                flag,
                "--cacert",
            ])
            .arg(&cert)
            .args(["-H", &format!("X-GitHub-Delivery: {delivery}")])
            .args([
                "-H",
                &format!(
                    "X-Hub-Signature-256: {}",
                    github_signature(GITHUB_SECRET, body.as_bytes())
                ),
            ])
            .args(["--data-binary", body, &edge.url("/hooks/github")])
            .output()
            .expect("curl is installed by the test setup");
        let out = String::from_utf8_lossy(&output.stdout);
        let expected_version = if flag == "--http2" { "2" } else { "1.1" };
        assert_eq!(
            out,
            format!("202 {expected_version}"),
            "{flag}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Without a Content-Length the edge must stop reading at max_body.
    let big = edge.dir.path().join("big.json");
    std::fs::write(&big, vec![b'y'; 200 * 1024]).unwrap();
    let output = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--http1.1",
            "--cacert",
        ])
        .arg(&cert)
        .args([
            "-H",
            "Transfer-Encoding: chunked",
            "-H",
            "X-GitHub-Delivery: chunked",
        ])
        .args([
            "-H",
            &format!(
                "X-Hub-Signature-256: {}",
                github_signature(GITHUB_SECRET, b"x")
            ),
        ])
        .arg("--data-binary")
        .arg(format!("@{}", big.display()))
        .arg(edge.url("/hooks/github"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "413");
    assert_eq!(spool_ids(&edge).len(), 2);
    let metrics = edge.metrics();
    assert!(
        metrics.contains(r#"edge_tls_handshakes_total{pop="test",version="1.3",resumed="false"}"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_then_exits_cleanly() {
    let mut edge = Edge::start("", "");
    let c = client(&edge, false);
    assert_eq!(
        github_post(&c, &edge, "before", &delivery_body("before"))
            .send()
            .await
            .unwrap()
            .status(),
        202
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(edge.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        edge.readyz(),
        Some(503),
        "readyz fails at once when draining"
    );
    let during = github_post(&c, &edge, "during-grace", &delivery_body("during-grace"))
        .send()
        .await
        .unwrap();
    assert_eq!(during.status(), 202, "still serving during drain_grace");
    let status = edge.child.take().unwrap().wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert_eq!(spool_ids(&edge).len(), 2);
    let log = edge.log_text();
    assert!(
        log.contains("draining") && log.contains("edge stopped"),
        "{log}"
    );
}

#[test]
fn check_config_names_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let (path, refusal) = check_config(
        dir.path(),
        "bad.yaml",
        config(dir.path(), 1, 2, "", "")
            .replace(r#"secrets: ["gh-secret", "gh-old-secret"]"#, "secrets: []"),
    );
    assert!(
        refusal.contains(&format!(
            "{}: routes[0].secrets: must not be empty",
            path.display()
        )),
        "{refusal}"
    );

    let (path, refusal) = check_config(
        dir.path(),
        "discord.yaml",
        config(
            dir.path(),
            1,
            2,
            "",
            "  - path: /hooks/discord\n    provider: discord\n    secrets: [\"a-shared-secret\"]\n    challenge: slack\n  - path: /hooks/sendgrid\n    provider: sendgrid\n    secrets: [\"MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\"]\n  - path: /hooks/std\n    provider: standard\n    secrets: [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\", \"whpk_/RckOFqgx1tk+3jNYC+h2ZH96/drE8WO1wLqyDXp9hg=\"]\n",
        ),
    );
    for expected in [
        "routes[1].secrets[0]: must be the application's public key: 64 hex digits",
        "routes[1].challenge: unknown variant `slack`",
        "routes[2].secrets[0]: must be SendGrid's verification key: base64 of a P-256 public key",
        "routes[3].secrets: mixes whsec_ secrets with whpk_ public keys (a route checks one kind)",
    ] {
        assert!(
            refusal.contains(&format!("{}: {expected}", path.display())),
            "{expected} in {refusal}"
        );
    }

    // Three fields of the wrong type: all three named in one run, each once.
    let (path, refusal) = check_config(
        dir.path(),
        "three.yaml",
        config(dir.path(), 1, 2, "  max_bytes: lots", "")
            .replacen("listen: [", "listen: [\"nope\", ", 1)
            .replacen("admin_listen: 127.0.0.1:2", "admin_listen: nope2", 1),
    );
    for field in ["listen[0]", "admin_listen", "spool.max_bytes"] {
        let named = format!("{}: {field}: ", path.display());
        assert_eq!(
            refusal.matches(&named).count(),
            1,
            "{field} once:\n{refusal}"
        );
        assert!(
            !refusal.contains(&format!("{field}: {field}:")),
            "{refusal}"
        );
    }

    let good = dir.path().join("good.yaml");
    std::fs::write(&good, config(dir.path(), 1, 2, "", "")).unwrap();
    let output = Command::new(edge_bin())
        .args(["check-config", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let version = Command::new(edge_bin()).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("edge "));
}

/// `edge check-config` on `text` written to `name` in `dir`: the file, and what it
/// printed when it refused the file (it must).
fn check_config(dir: &Path, name: &str, text: String) -> (PathBuf, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let output = Command::new(edge_bin())
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{name} must be refused");
    (path, String::from_utf8_lossy(&output.stderr).into_owned())
}
