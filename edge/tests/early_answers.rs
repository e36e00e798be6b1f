//! Answers decided before the request body ended (404, 405, 413, 425, 431) reach common
//! clients: curl over HTTP/2 and HTTP/1.1 (50 times each: losing the answer was a race
//! between the answer and a reset while curl was still sending), and the h2 crate
//! reading the answer mid-upload, finishing the upload, and using the connection again.

use std::process::Command;

use bytes::Bytes;
use testkit::edge::*;

const REPEATS: usize = 50;

#[test]
fn curl_gets_every_early_answer_over_http2_and_http1() {
    let edge = Edge::start("", "");
    let body = edge.dir.path().join("body.bin");
    // Twenty times the route's 64 KiB limit, well past HTTP/2's initial windows.
    std::fs::write(&body, vec![b'x'; 1_310_720]).unwrap();
    let body_arg = format!("@{}", body.display());
    // Over http.max_header_bytes (16 KiB by default), under twice it.
    let big_header = format!("X-Padding: {}", "p".repeat(20 * 1024));
    let cases: [(&str, &[&str], &str); 5] = [
        ("404", &["-X", "POST"], "/nope"),
        ("405", &["-X", "PUT"], "/hooks/github"),
        ("413", &["-X", "POST"], "/hooks/github"),
        ("425", &["-H", "Early-Data: 1"], "/hooks/github"),
        ("431", &["-H", &big_header], "/hooks/github"),
    ];
    for version in ["--http2", "--http1.1"] {
        for (expected, args, path) in cases {
            let mut codes = Vec::new();
            for _ in 0..REPEATS {
                let out = Command::new("curl")
                    .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", version])
                    .args(args)
                    .args(["--data-binary", &body_arg, &edge.url(path)])
                    .output()
                    .unwrap();
                codes.push(String::from_utf8_lossy(&out.stdout).into_owned());
            }
            let wrong: Vec<&String> = codes.iter().filter(|c| *c != expected).collect();
            assert!(
                wrong.is_empty(),
                "curl {version} {path} {args:?}: expected {expected} every time, got {wrong:?}"
            );
        }
    }
    let answered =
        edge.metric(r#"edge_requests_total{pop="test",route="hooks_github",status="413"}"#);
    assert_eq!(answered, (2 * REPEATS) as f64);
}

#[tokio::test(flavor = "multi_thread")]
async fn h2_client_reads_the_answer_mid_upload_and_keeps_its_connection() {
    let edge = Edge::start("", "");
    let (mut send, connection) = h2::client::handshake(h2_tls(&edge).await).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    for (path, expected, declared) in [("/nope", 404, 2_000_000), ("/hooks/github", 413, 2_000_000)]
    {
        for round in 0..20 {
            send = send.ready().await.unwrap();
            let request = http::Request::post(format!("https://localhost{path}"))
                .header("content-length", declared.to_string())
                .body(())
                .unwrap();
            let (response, mut upload) = send.send_request(request, false).unwrap();
            let chunk = Bytes::from(vec![b'x'; 100_000]);
            upload.send_data(chunk.clone(), false).unwrap();
            let response = response.await.unwrap();
            assert_eq!(response.status(), expected, "{path}, round {round}");
            let mut answer = response.into_body();
            while let Some(data) = answer.data().await {
                let data = data.unwrap();
                let _ = answer.flow_control().release_capacity(data.len());
            }
            // The rest of the upload goes through: the stream was not reset under us.
            let mut sent = chunk.len();
            while sent < declared {
                let len = chunk.len().min(declared - sent);
                upload.reserve_capacity(len);
                let granted = std::future::poll_fn(|cx| upload.poll_capacity(cx))
                    .await
                    .expect("capacity")
                    .expect("the edge reset the stream mid-upload");
                let granted = granted.min(len);
                sent += granted;
                upload
                    .send_data(chunk.slice(..granted), sent == declared)
                    .unwrap();
            }
        }
    }
    // The same connection then takes a webhook.
    send = send.ready().await.unwrap();
    let body = br#"{"zen":"after early answers"}"#;
    let request = http::Request::post("https://localhost/hooks/github")
        .header("x-github-event", "push")
        .header("x-github-delivery", "after-early-answers")
        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
        .body(())
        .unwrap();
    let (response, mut upload) = send.send_request(request, false).unwrap();
    upload.send_data(Bytes::from_static(body), true).unwrap();
    assert_eq!(response.await.unwrap().status(), 202);
}
