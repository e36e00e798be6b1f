//! The peer guard: before withdrawing for a health failure, ask the other PoPs' agents
//! whether they announce. If withdrawing would leave fewer than the configured minimum
//! announcing, a shared fault is more likely than a local one, and staying announced
//! keeps the service on the internet.

use crate::config::GuardConfig;

/// Whether a withdraw may go ahead, and how many peers announce.
pub async fn allows_withdraw(guard: &GuardConfig) -> (bool, usize) {
    let answers =
        futures::future::join_all(guard.peers.iter().map(|url| peer_announces(url, guard))).await;
    let announcing = answers.into_iter().filter(|a| *a).count();
    (announcing >= guard.min_other_pops_announcing, announcing)
}

async fn peer_announces(url: &str, guard: &GuardConfig) -> bool {
    let body = match tokio::time::timeout(guard.timeout, crate::checks::fetch(url)).await {
        Ok(Ok(body)) => body,
        _ => return false,
    };
    serde_json::from_str::<serde_json::Value>(&body)
        .is_ok_and(|status| status["route"] == "announced")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A peer agent's status endpoint answering with `route`.
    async fn peer(route: &'static str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/status", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf).await;
                let body = format!(r#"{{"route":"{route}"}}"#);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(format!("{head}{body}").as_bytes()).await;
            }
        });
        url
    }

    #[tokio::test]
    async fn counts_only_peers_that_answer_announced() {
        let dead = format!("http://127.0.0.1:{}/status", {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        });
        let peers = vec![peer("announced").await, peer("withdrawn").await, dead];
        let guard = |min| GuardConfig {
            peers: peers.clone(),
            min_other_pops_announcing: min,
            timeout: Duration::from_millis(500),
        };
        assert_eq!(allows_withdraw(&guard(1)).await, (true, 1));
        assert_eq!(
            allows_withdraw(&guard(2)).await,
            (false, 1),
            "withdrawing would leave too few announcing"
        );
    }
}
