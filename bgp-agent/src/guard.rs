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
