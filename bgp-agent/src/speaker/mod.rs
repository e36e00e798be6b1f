//! Speakers carry a decision to BGP: ExaBGP through its process API, or BIRD through an
//! included prefix file and `birdc configure`.

pub mod bird;
pub mod exabgp;

use ipnet::IpNet;

use crate::config::{Config, SpeakerConfig};
use crate::hysteresis::Route;

pub enum Speaker {
    Exabgp(exabgp::ExaBgp),
    Bird(bird::Bird),
}

impl Speaker {
    pub fn new(config: &SpeakerConfig, prefixes: Vec<IpNet>) -> Self {
        match config {
            SpeakerConfig::Exabgp { .. } => Speaker::Exabgp(exabgp::ExaBgp::new(config, prefixes)),
            SpeakerConfig::Bird { .. } => Speaker::Bird(bird::Bird::new(config, prefixes)),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Speaker::Exabgp(_) => "exabgp",
            Speaker::Bird(_) => "bird",
        }
    }

    /// Makes BGP carry `route` for every prefix; returns once the daemon confirmed it.
    pub async fn apply(&mut self, route: Route) -> anyhow::Result<()> {
        match self {
            Speaker::Exabgp(s) => s.apply(route).await,
            Speaker::Bird(s) => s.apply(route).await,
        }
    }
}

/// Withdraws every prefix without a running agent (`bgp-agent withdraw`). Only BIRD can
/// be told from outside: ExaBGP takes commands from its own API process alone, and
/// respawns that process when it dies, and the fresh agent withdraws first.
pub async fn withdraw_out_of_band(config: &Config) -> anyhow::Result<()> {
    match &config.speaker {
        SpeakerConfig::Bird { .. } => {
            bird::Bird::new(&config.speaker, config.prefixes.clone())
                .apply(Route::Withdrawn)
                .await
        }
        SpeakerConfig::Exabgp { .. } => anyhow::bail!(
            "speaker exabgp: nothing to withdraw from outside; ExaBGP respawns the agent, \
             which starts withdrawn (stop ExaBGP to take the session down)"
        ),
    }
}
