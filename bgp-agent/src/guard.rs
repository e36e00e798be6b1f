//! The peer guard: before withdrawing for a health failure, ask the other PoPs' agents
//! whether they announce. If withdrawing would leave fewer than the configured minimum
//! announcing, a shared fault is more likely than a local one, and staying announced
//! keeps the service on the internet.
//!
//! The guard must not be a lever against the fleet. A peer that does not answer within
//! the timeout (down, or its admin port flooded) is *unknown*, and the guard vetoes only
//! when the peers it knows to be withdrawn are too many for the minimum to hold even if
//! every unknown one announces. A veto lasts at most `max_veto`: after that the withdraw
//! goes ahead, logged and counted, so a PoP that stays broken does not stay announced.
//!
//! While a withdraw is pending the guard asks every round, and over a lossy WAN some
//! question of a round goes unanswered (a lost SYN costs a second). Counted as unknown,
//! one such miss would let a withdraw through (the fleet test saw two PoPs left where
//! three were required), so a peer that does not answer keeps its last answer for
//! [`RECALL_TIMEOUTS`] timeouts, and one not heard within that time counts as withdrawn
//! until it has missed answers for as long; only then is it unknown. A flooded peer
//! delays a broken PoP's withdraw by those few timeouts and cannot hold it up longer.
//!
//! [`Guard`] is the decision (pure, fed answers and the time); [`ask_peers`] the I/O.

use std::collections::HashMap;
use std::time::Duration;

use crate::config::GuardSettings;

/// What one peer's agent said about its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerRoute {
    /// `route: announced` (degraded included: it still carries traffic).
    Announced,
    /// Withdrawn, or on its way out (`graceful_shutdown`).
    NotAnnounced,
    /// No usable answer within the timeout.
    Unknown,
}

/// The guard's word on one health withdraw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Enough peers may carry the traffic: withdraw.
    Allow,
    /// Too few peers announce: stay announced.
    Veto,
    /// Vetoed for `max_veto` already: withdraw now.
    VetoExpired,
}

/// How many peers answered what.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub announcing: usize,
    pub not_announcing: usize,
    pub unknown: usize,
}

impl Tally {
    pub(crate) fn of(answers: &[PeerRoute]) -> Self {
        let count = |route| answers.iter().filter(|a| **a == route).count();
        Self {
            announcing: count(PeerRoute::Announced),
            not_announcing: count(PeerRoute::NotAnnounced),
            unknown: count(PeerRoute::Unknown),
        }
    }
}

/// The guard's memory: since when it has been vetoing, what each peer last said, and
/// since when each silent peer has missed its answers (first and latest miss).
#[derive(Clone, Debug, Default)]
pub(crate) struct Guard {
    vetoing_since: Option<Duration>,
    heard: HashMap<String, (PeerRoute, Duration)>,
    missing: HashMap<String, (Duration, Duration)>,
}

impl Guard {
    /// The peers' answers at `now` (`answers[i]` from `peers[i]`), each unknown one
    /// replaced by what that peer said at most `recall` ago, or, if it said nothing in
    /// that time, by withdrawn until its misses have lasted `recall` (misses further
    /// apart than `recall` start afresh). The answers are remembered, and peers no
    /// longer asked (a reload removed them) forgotten.
    pub(crate) fn recall(
        &mut self,
        now: Duration,
        peers: &[String],
        answers: &[PeerRoute],
        recall: Duration,
    ) -> Vec<PeerRoute> {
        self.heard.retain(|peer, _| peers.contains(peer));
        self.missing.retain(|peer, _| peers.contains(peer));
        peers
            .iter()
            .zip(answers)
            .map(|(peer, answer)| {
                if *answer != PeerRoute::Unknown {
                    self.heard.insert(peer.clone(), (*answer, now));
                    self.missing.remove(peer);
                    return *answer;
                }
                let since = match self.missing.get(peer) {
                    Some((since, latest)) if now.saturating_sub(*latest) <= recall => *since,
                    _ => now,
                };
                self.missing.insert(peer.clone(), (since, now));
                match self.heard.get(peer) {
                    Some((last, at)) if now.saturating_sub(*at) <= recall => *last,
                    _ if now.saturating_sub(since) < recall => PeerRoute::NotAnnounced,
                    _ => PeerRoute::Unknown,
                }
            })
            .collect()
    }

    /// Decides a health withdraw at `now` (any monotonic origin).
    pub(crate) fn decide(
        &mut self,
        now: Duration,
        tally: Tally,
        min_announcing: usize,
        max_veto: Duration,
    ) -> Verdict {
        if tally.announcing + tally.unknown >= min_announcing {
            self.vetoing_since = None;
            return Verdict::Allow;
        }
        let since = *self.vetoing_since.get_or_insert(now);
        if now.saturating_sub(since) >= max_veto {
            self.vetoing_since = None;
            return Verdict::VetoExpired;
        }
        Verdict::Veto
    }

    /// No withdraw is pending any more (health came back, or a drain took over): the
    /// next veto starts its bound afresh.
    pub(crate) fn clear(&mut self) {
        self.vetoing_since = None;
    }

    /// Whether a veto holds the route now.
    pub(crate) fn vetoing(&self) -> bool {
        self.vetoing_since.is_some()
    }
}

/// How many of its timeouts a peer's last answer stands in for a missed one.
pub(crate) const RECALL_TIMEOUTS: u32 = 3;

/// Asks every peer at once, each bounded by the guard's timeout.
pub(crate) async fn ask_peers(guard: &GuardSettings) -> Vec<PeerRoute> {
    futures::future::join_all(guard.peers.iter().map(|url| peer_route(url, guard.timeout))).await
}

async fn peer_route(url: &str, timeout: Duration) -> PeerRoute {
    let Ok(Ok(body)) = tokio::time::timeout(timeout, crate::checks::fetch(url)).await else {
        return PeerRoute::Unknown;
    };
    let Ok(status) = serde_json::from_str::<serde_json::Value>(&body) else {
        return PeerRoute::Unknown;
    };
    match status["route"].as_str() {
        Some("announced") => PeerRoute::Announced,
        Some("withdrawn" | "graceful_shutdown") => PeerRoute::NotAnnounced,
        _ => PeerRoute::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use PeerRoute::{Announced as A, NotAnnounced as N, Unknown as U};

    const MAX_VETO: Duration = Duration::from_secs(300);

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn unknown_peers_never_cause_a_veto() {
        for answers in [&[U, U, U][..], &[U, N, N], &[A, U, N]] {
            let mut guard = Guard::default();
            let tally = Tally::of(answers);
            let needed = tally.announcing + tally.unknown;
            assert_eq!(
                guard.decide(s(0), tally, needed, MAX_VETO),
                Verdict::Allow,
                "{answers:?} with minimum {needed}"
            );
        }
    }

    #[test]
    fn a_veto_needs_enough_peers_known_withdrawn() {
        let mut guard = Guard::default();
        assert_eq!(
            guard.decide(s(0), Tally::of(&[A, N, U]), 3, MAX_VETO),
            Verdict::Veto
        );
        assert!(guard.vetoing());
        assert_eq!(
            guard.decide(s(1), Tally::of(&[A, A, U]), 3, MAX_VETO),
            Verdict::Allow
        );
        assert!(!guard.vetoing());
    }

    #[test]
    fn a_veto_ends_after_its_bound_and_the_next_one_starts_afresh() {
        let mut guard = Guard::default();
        let alone = Tally::of(&[N, N]);
        assert_eq!(guard.decide(s(10), alone, 1, MAX_VETO), Verdict::Veto);
        assert_eq!(guard.decide(s(309), alone, 1, MAX_VETO), Verdict::Veto);
        assert_eq!(
            guard.decide(s(310), alone, 1, MAX_VETO),
            Verdict::VetoExpired
        );
        assert_eq!(guard.decide(s(311), alone, 1, MAX_VETO), Verdict::Veto);
        guard.clear();
        assert_eq!(guard.decide(s(900), alone, 1, MAX_VETO), Verdict::Veto);
        assert_eq!(guard.decide(s(1199), alone, 1, MAX_VETO), Verdict::Veto);
    }

    #[test]
    fn a_missed_answer_is_the_last_one_heard_for_a_while_then_withdrawn_then_unknown() {
        let peers: Vec<String> = ["a", "b"].map(String::from).into();
        let mut guard = Guard::default();
        let recall = s(3);
        // a never heard: withdrawn until it has missed answers for 3 s.
        assert_eq!(guard.recall(s(0), &peers, &[U, N], recall), [N, N]);
        assert_eq!(guard.recall(s(1), &peers, &[A, U], recall), [A, N]);
        assert_eq!(guard.recall(s(3), &peers, &[U, U], recall), [A, N]);
        // b last answered at 0 s and has missed since 1 s; a answered at 1 s.
        assert_eq!(guard.recall(s(4), &peers, &[U, U], recall), [A, U]);
        // a has missed since 3 s.
        assert_eq!(guard.recall(s(5), &peers, &[U, U], recall), [N, U]);
        assert_eq!(guard.recall(s(6), &peers, &[U, U], recall), [U, U]);
        assert_eq!(guard.recall(s(7), &peers, &[N, U], recall), [N, U]);
        // b's misses stop and come back 10 s later: a new run of misses.
        assert_eq!(guard.recall(s(20), &peers, &[N, U], recall), [N, N]);
        assert_eq!(guard.recall(s(23), &peers, &[N, U], recall), [N, U]);
    }

    #[test]
    fn a_peer_removed_by_a_reload_is_forgotten() {
        let before: Vec<String> = ["a", "b"].map(String::from).into();
        let after: Vec<String> = ["a"].map(String::from).into();
        let mut guard = Guard::default();
        guard.recall(s(0), &before, &[A, A], s(3));
        guard.recall(s(1), &after, &[U], s(3));
        assert_eq!(guard.heard.keys().collect::<Vec<_>>(), ["a"]);
        // Back in the list, b is a peer not heard yet.
        assert_eq!(guard.recall(s(2), &before, &[U, U], s(3)), [A, N]);
    }

    #[test]
    fn a_veto_outlasts_a_round_where_a_peer_misses_its_answer() {
        let peers: Vec<String> = ["a", "b", "c"].map(String::from).into();
        let mut guard = Guard::default();
        let mut round = |at, answers: &[PeerRoute]| {
            let answers = guard.recall(s(at), &peers, answers, s(3));
            guard.decide(s(at), Tally::of(&answers), 2, MAX_VETO)
        };
        assert_eq!(round(0, &[A, N, N]), Verdict::Veto);
        assert_eq!(round(1, &[A, U, N]), Verdict::Veto);
        // b's last answer is too old and its misses are new: withdrawn, still a veto.
        assert_eq!(round(5, &[A, U, N]), Verdict::Veto);
        // b has missed for 3 s: unknown, which never vetoes.
        assert_eq!(round(8, &[A, U, N]), Verdict::Allow);
    }

    #[test]
    fn every_mix_of_three_peers_follows_the_rule() {
        let routes = [A, N, U];
        for a in routes {
            for b in routes {
                for c in routes {
                    let tally = Tally::of(&[a, b, c]);
                    for min in 0..=3 {
                        let verdict = Guard::default().decide(s(0), tally, min, MAX_VETO);
                        let vetoes = tally.not_announcing > 3 - min;
                        assert_eq!(
                            verdict == Verdict::Veto,
                            vetoes,
                            "{a:?} {b:?} {c:?} min {min}"
                        );
                    }
                }
            }
        }
    }

    /// A peer agent's status endpoint answering with `body`.
    async fn peer(body: &'static str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/status", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(format!("{head}{body}").as_bytes()).await;
            }
        });
        url
    }

    /// A peer whose admin accepts connections and never answers (a flooded agent).
    async fn silent_peer() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/status", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        url
    }

    #[tokio::test]
    async fn answers_map_to_routes_and_silence_to_unknown() {
        let dead = format!("http://127.0.0.1:{}/status", {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        });
        let peers = vec![
            peer(r#"{"route":"announced"}"#).await,
            peer(r#"{"route":"withdrawn"}"#).await,
            peer(r#"{"route":"graceful_shutdown"}"#).await,
            peer("<html>busy</html>").await,
            silent_peer().await,
            dead,
        ];
        let config = GuardSettings {
            peers,
            min_other_pops_announcing: 1,
            timeout: Duration::from_millis(300),
            max_veto: MAX_VETO,
        };
        let started = std::time::Instant::now();
        assert_eq!(ask_peers(&config).await, vec![A, N, N, U, U, U]);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "asked in parallel, each bounded"
        );
    }
}
