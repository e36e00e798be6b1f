//! `ranges:` where providers publish the addresses they send from, and where the edge
//! keeps the last good copy of each list (`crate::ranges`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

/// The `ranges` section, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct RangesSettings {
    /// Where each source's last good list is kept (`<name>.txt`).
    pub dir: PathBuf,
    /// A list older than this is stale (metric, alert); it is still used.
    pub max_age: Duration,
    /// A fetched list with more entries is refused.
    pub max_entries: usize,
    /// How often the running edge looks for a newer list.
    pub reload_every: Duration,
    /// The sources, by name.
    pub sources: Vec<RangeSource>,
}

/// One provider's published list.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeSource {
    /// Its name: the file's and the metrics' (`[a-z0-9_-]`).
    pub name: String,
    /// Where it is fetched from.
    pub location: Location,
    /// For a JSON document, the RFC 6901 pointer to its array of CIDRs; none for text.
    pub pointer: Option<String>,
}

/// Where a list is fetched from.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    /// An `http://` or `https://` URL (HTTPS verified against the system's CAs).
    Url(String),
    /// A local file (e.g. one the operator's own tooling writes).
    File(PathBuf),
}

impl Location {
    /// As an operator reads it in a log line or the stored file.
    pub fn describe(&self) -> String {
        match self {
            Location::Url(url) => url.clone(),
            Location::File(path) => path.display().to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRanges {
    /// Where each source's last good list is kept. Default /var/lib/edge/ranges (the
    /// units' state directory).
    dir: PathBuf,
    /// A list older than this is stale: `edge_provider_ranges_stale` says so, and the
    /// alert fires. Default 3d.
    #[serde(with = "humantime_serde")]
    max_age: Duration,
    /// A fetched list with more entries is refused whole. Default 4096.
    max_entries: usize,
    /// How often the running edge looks for a newer list. Default 30s.
    #[serde(with = "humantime_serde")]
    reload_every: Duration,
    /// The sources, by name: `{url: …, pointer: …}` or `{file: …}`.
    sources: BTreeMap<String, RawSource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    url: Option<String>,
    file: Option<PathBuf>,
    pointer: Option<String>,
}

impl Default for RawRanges {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/var/lib/edge/ranges"),
            max_age: Duration::from_secs(3 * 24 * 3600),
            max_entries: 4096,
            reload_every: Duration::from_secs(30),
            sources: BTreeMap::new(),
        }
    }
}

impl RawRanges {
    pub(super) fn validate(self, errors: &mut FieldErrors) -> RangesSettings {
        if self.max_entries == 0 {
            errors.add("ranges.max_entries", "must be positive");
        }
        if self.max_age.is_zero() || self.reload_every.is_zero() {
            errors.add("ranges", "max_age and reload_every must be positive");
        }
        let sources = self
            .sources
            .into_iter()
            .filter_map(|(name, raw)| {
                let at = format!("ranges.sources.{name}");
                let name_ok = !name.is_empty()
                    && name.len() <= 64
                    && name.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_".contains(&b)
                    });
                if !name_ok {
                    errors.add(&at, "a source's name must be 1-64 characters of [a-z0-9-_]");
                }
                let location = match (raw.url, raw.file) {
                    (Some(url), None)
                        if url.starts_with("https://") || url.starts_with("http://") =>
                    {
                        Some(Location::Url(url))
                    }
                    (Some(_), None) => {
                        errors.add(format!("{at}.url"), "must be an http:// or https:// URL");
                        None
                    }
                    (None, Some(file)) => Some(Location::File(file)),
                    _ => {
                        errors.add(&at, "set exactly one of url and file");
                        None
                    }
                };
                if raw.pointer.as_ref().is_some_and(|p| !p.starts_with('/')) {
                    errors.add(
                        format!("{at}.pointer"),
                        "must be a JSON pointer (starts with /)",
                    );
                }
                Some(RangeSource {
                    name,
                    location: location?,
                    pointer: raw.pointer,
                })
            })
            .collect();
        RangesSettings {
            dir: self.dir,
            max_age: self.max_age,
            max_entries: self.max_entries,
            reload_every: self.reload_every,
            sources,
        }
    }
}

impl Default for RangesSettings {
    fn default() -> Self {
        RawRanges::default().validate(&mut FieldErrors::default())
    }
}
