//! `speaker:` how the agent tells BGP to announce or withdraw: ExaBGP's process API or
//! BIRD's control socket.

use std::path::PathBuf;
use std::time::Duration;

use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

/// The speaker, validated.
#[derive(Clone, Debug, PartialEq)]
pub enum SpeakerSettings {
    /// The agent is ExaBGP's `process`: commands on stdout, acks on stdin.
    Exabgp(ExabgpSettings),
    /// The agent rewrites a file BIRD includes and runs `birdc configure`.
    Bird(BirdSettings),
}

/// What the agent tells ExaBGP to announce, and how long it waits for its answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ExabgpSettings {
    /// Communities on every announcement.
    pub communities: Vec<String>,
    /// The MED announced, if any.
    pub med: Option<u32>,
    /// Times `local_as` is prepended to the AS path.
    pub as_path_prepend: u32,
    /// The agent's own AS, prepended `as_path_prepend` times.
    pub local_as: Option<u32>,
    /// Instead of `med` and `as_path_prepend` while a `degrade` check fails.
    pub degraded: DegradedAttributes,
    /// How long ExaBGP has to confirm a command.
    pub ack_timeout: Duration,
}

/// Where BIRD's include file and control socket are, and how long `birdc` may take.
#[derive(Clone, Debug, PartialEq)]
pub struct BirdSettings {
    /// The include file the agent rewrites.
    pub include_file: PathBuf,
    /// BIRD's control socket.
    pub socket: PathBuf,
    /// The `birdc` program.
    pub birdc: PathBuf,
    /// The name of the IPv4 prefix set the include file defines.
    pub define_v4: String,
    /// The name of the IPv6 prefix set.
    pub define_v6: String,
    /// How long `birdc configure` may take.
    pub timeout: Duration,
}

/// What a degraded PoP announces with ExaBGP (BIRD: its export filter decides).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DegradedAttributes {
    /// The MED while degraded. Default: none.
    pub med: Option<u32>,
    /// Times `local_as` is prepended. Default 0.
    pub as_path_prepend: u32,
}

/// The speaker as written: `kind` picks the variant.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum RawSpeaker {
    Exabgp(RawExabgp),
    Bird(RawBird),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawExabgp {
    /// Communities on every announcement. Default: none.
    communities: Vec<String>,
    /// Default: none.
    med: Option<u32>,
    /// Default 0.
    as_path_prepend: u32,
    /// Needed only to prepend.
    local_as: Option<u32>,
    /// Default: nothing changes.
    degraded: DegradedAttributes,
    /// How long ExaBGP has to confirm a command (`ack enable`). Default 2s.
    #[serde(with = "humantime_serde")]
    ack_timeout: Duration,
}

impl Default for RawExabgp {
    fn default() -> Self {
        Self {
            communities: Vec::new(),
            med: None,
            as_path_prepend: 0,
            local_as: None,
            degraded: DegradedAttributes::default(),
            ack_timeout: Duration::from_secs(2),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBird {
    /// Required: the file BIRD includes, which the agent rewrites.
    include_file: Option<PathBuf>,
    /// Required: BIRD's control socket.
    socket: Option<PathBuf>,
    /// Default `birdc` (on `PATH`).
    birdc: PathBuf,
    /// The names the include file defines. Default `ANYCAST_V4`, `ANYCAST_V6`.
    define_v4: String,
    define_v6: String,
    /// How long `birdc configure` may take. Default 2s.
    #[serde(with = "humantime_serde")]
    timeout: Duration,
}

impl Default for RawBird {
    fn default() -> Self {
        Self {
            include_file: None,
            socket: None,
            birdc: PathBuf::from("birdc"),
            define_v4: "ANYCAST_V4".into(),
            define_v6: "ANYCAST_V6".into(),
            timeout: Duration::from_secs(2),
        }
    }
}

impl RawSpeaker {
    /// The speaker; `degrades` says whether a `degrade` check exists (ExaBGP must then
    /// be told what to change).
    pub(super) fn validate(self, degrades: bool, errors: &mut FieldErrors) -> SpeakerSettings {
        match self {
            RawSpeaker::Exabgp(raw) => {
                let prepends = raw.as_path_prepend > 0 || raw.degraded.as_path_prepend > 0;
                if prepends && raw.local_as.is_none() {
                    errors.add("speaker.local_as", "is needed to prepend the AS path");
                }
                if degrades && raw.degraded.med.is_none() && raw.degraded.as_path_prepend == 0 {
                    errors.add(
                        "speaker.degraded",
                        "must set med or as_path_prepend for the degrade checks to change anything",
                    );
                }
                SpeakerSettings::Exabgp(ExabgpSettings {
                    communities: raw.communities,
                    med: raw.med,
                    as_path_prepend: raw.as_path_prepend,
                    local_as: raw.local_as,
                    degraded: raw.degraded,
                    ack_timeout: raw.ack_timeout,
                })
            }
            RawSpeaker::Bird(raw) => {
                // An empty path stands in for a missing one, which is an error already.
                let mut required = |field: &str, value: Option<PathBuf>| {
                    errors.required(field, value).unwrap_or_default()
                };
                SpeakerSettings::Bird(BirdSettings {
                    include_file: required("speaker.include_file", raw.include_file),
                    socket: required("speaker.socket", raw.socket),
                    birdc: raw.birdc,
                    define_v4: raw.define_v4,
                    define_v6: raw.define_v6,
                    timeout: raw.timeout,
                })
            }
        }
    }
}
