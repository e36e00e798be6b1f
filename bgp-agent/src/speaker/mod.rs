//! Speakers carry a decision to BGP: ExaBGP through its process API, or BIRD through an
//! included prefix file and `birdc configure`.
//!
//! Besides announced and withdrawn, a route can be announced with RFC 8326's
//! GRACEFUL_SHUTDOWN community (65535:0): upstreams that honour it prefer any other
//! path, so traffic leaves this PoP before the withdraw drops the flows still on it.
//! A degraded route (a soft drain) stays announced with a longer AS path or a higher
//! MED, so upstreams keep this PoP only as a backup.

mod advert;
pub(crate) mod bird;
pub(crate) mod exabgp;

use ipnet::IpNet;

pub use advert::Advert;

use crate::config::{Settings, SpeakerSettings};
use crate::metrics::Sessions;

/// The BGP daemon this PoP's agent drives.
pub(crate) enum Speaker {
    Exabgp(exabgp::ExaBgp),
    Bird(bird::Bird),
}

impl Speaker {
    /// The speaker for `config`; it keeps `sessions` at the state of its BGP sessions.
    pub(crate) fn new(config: &SpeakerSettings, prefixes: Vec<IpNet>, sessions: Sessions) -> Self {
        match config {
            SpeakerSettings::Exabgp(exabgp) => {
                Speaker::Exabgp(exabgp::ExaBgp::new(exabgp, prefixes, sessions))
            }
            SpeakerSettings::Bird(bird) => {
                let bird = bird::Bird::new(bird, prefixes);
                tokio::spawn(bird.watch_sessions(sessions));
                Speaker::Bird(bird)
            }
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Speaker::Exabgp(_) => "exabgp",
            Speaker::Bird(_) => "bird",
        }
    }

    /// Makes BGP carry `advert` for every prefix; returns once the daemon confirmed it.
    pub(crate) async fn apply(&mut self, advert: Advert) -> anyhow::Result<()> {
        match self {
            Speaker::Exabgp(s) => s.apply(advert).await,
            Speaker::Bird(s) => s.apply(advert).await,
        }
    }
}

/// Withdraws every prefix without a running agent (`bgp-agent withdraw`). Only BIRD can
/// be told from outside: ExaBGP takes commands from its own API process alone, and
/// respawns that process when it dies, and the fresh agent withdraws first.
pub async fn withdraw_out_of_band(config: &Settings) -> anyhow::Result<()> {
    match &config.speaker {
        SpeakerSettings::Bird(bird) => {
            bird::Bird::new(bird, config.prefixes.clone())
                .apply(Advert::Withdrawn)
                .await
        }
        SpeakerSettings::Exabgp(_) => anyhow::bail!(
            "speaker exabgp: nothing to withdraw from outside; ExaBGP respawns the agent, \
             which starts withdrawn (stop ExaBGP to take the session down)"
        ),
    }
}
