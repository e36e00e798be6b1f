//! HTTP/2 Rapid Reset (CVE-2023-44487): a client that opens streams and cancels them in a
//! loop is cut off with GOAWAY, while a legitimate HTTP/2 client on another connection
//! keeps working.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;

async fn h2_connection(edge: &Edge) -> h2::client::SendRequest<bytes::Bytes> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut edge.cert_pem().as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", edge.port))
        .await
        .unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let (send, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    send
}

#[tokio::test(flavor = "multi_thread")]
async fn open_and_cancel_in_a_loop_is_cut_off_with_goaway() {
    let edge = Edge::start("", "");
    let mut attacker = h2_connection(&edge).await;
    let mut cut_off = None;
    for i in 0..20_000 {
        let ready = tokio::time::timeout(Duration::from_secs(5), attacker.clone().ready()).await;
        let mut send = match ready {
            Ok(Ok(send)) => send,
            Ok(Err(e)) => {
                cut_off = Some((i, e));
                break;
            }
            Err(_) => panic!("the attacking connection stalled instead of being cut off"),
        };
        let request = http::Request::post(edge.url("/hooks/github"))
            .body(())
            .unwrap();
        match send.send_request(request, false) {
            // Dropping the stream handles resets the stream: open, then cancel at once.
            Ok((response, stream)) => drop((response, stream)),
            Err(e) => {
                cut_off = Some((i, e));
                break;
            }
        }
        attacker = send;
    }
    let (after, error) = cut_off.expect("20,000 open-and-cancel streams were never cut off");
    // The server sends GOAWAY (ENHANCE_YOUR_CALM) and closes; a client still writing
    // may see the closed socket before it reads the GOAWAY.
    let goaway = error.is_go_away() && error.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM);
    assert!(
        goaway || error.is_io(),
        "cut off after {after} streams by something else: {error:?}"
    );
    assert!(after < 10_000, "cut off only after {after} streams");

    // Another client, another connection: still served.
    let client = client(&edge, true);
    let r = github_post(&client, &edge, "after-rapid-reset", b"{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
}
