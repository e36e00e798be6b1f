//! What a speaker makes BGP carry for the agent's prefixes, the same words for ExaBGP
//! and BIRD.

/// What BGP carries for the agent's prefixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Advert {
    /// Announced with the normal attributes.
    Announced,
    /// Announced, less preferred: a degrade check fails.
    Degraded,
    /// Still announced, tagged GRACEFUL_SHUTDOWN: on the way to a withdraw.
    GracefulShutdown,
    /// Not announced.
    Withdrawn,
}

impl Advert {
    /// The route as `/status` reports it: a degraded route is still `announced` (it
    /// carries traffic when other PoPs are gone), `graceful_shutdown` is on its way out.
    pub fn route_name(self) -> &'static str {
        match self {
            Advert::Announced | Advert::Degraded => "announced",
            Advert::GracefulShutdown => "graceful_shutdown",
            Advert::Withdrawn => "withdrawn",
        }
    }
}

/// RFC 8326's well-known community.
pub(crate) const GRACEFUL_SHUTDOWN: &str = "65535:0";
