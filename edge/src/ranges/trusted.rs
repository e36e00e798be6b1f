//! The running edge's side of the lists: every `ranges.reload_every` each stored list is
//! read; `connections.trusted` together with the lists `connections.trusted_ranges`
//! names is the trusted set of the connection caps and of admission, replaced when a
//! list changed. A list that is missing or unreadable adds nothing (its senders keep
//! the ordinary caps); a stale one is still used, since the last good list beats none.

use std::collections::BTreeSet;
use std::time::SystemTime;

use ipnet::IpNet;

use super::RangesMetrics;
use super::metrics::SourceLabel;
use crate::config::{RangesSettings, Settings};

/// What the edge trusts, from the config and the stored lists.
pub(crate) struct TrustedRanges {
    settings: RangesSettings,
    lists: Vec<String>,
    fixed: Vec<IpNet>,
    metrics: RangesMetrics,
}

impl TrustedRanges {
    pub(crate) fn new(settings: &Settings, metrics: RangesMetrics) -> Self {
        Self {
            settings: settings.ranges.clone(),
            lists: settings.trusted_ranges.clone(),
            fixed: settings.connections.trusted.clone(),
            metrics,
        }
    }

    /// The trusted set at `now`, aggregated; each source's gauges set on the way.
    pub(crate) fn read(&self, now: SystemTime) -> Vec<IpNet> {
        let mut trusted: BTreeSet<IpNet> = self.fixed.iter().copied().collect();
        for source in &self.settings.sources {
            let list = super::stored(&self.settings, &source.name);
            let label = SourceLabel {
                source: source.name.clone(),
            };
            let age = list.as_ref().map(|list| list.age(now));
            let stale = age.is_none_or(|age| age > self.settings.max_age);
            self.metrics
                .entries
                .get_or_create(&label)
                .set(list.as_ref().map_or(0, |list| list.nets.len()) as i64);
            self.metrics
                .age_seconds
                .get_or_create(&label)
                .set(age.map_or(-1, |age| age.as_secs() as i64));
            self.metrics
                .stale
                .get_or_create(&label)
                .set(i64::from(stale));
            if let Some(list) = list.filter(|_| self.lists.contains(&source.name)) {
                trusted.extend(list.nets);
            }
        }
        IpNet::aggregate(&trusted.into_iter().collect())
    }

    /// Applies the trusted set with `apply` now, before the first connection, and
    /// returns the task that applies it again whenever a list changes.
    pub(crate) fn keep(self, apply: impl Fn(Vec<IpNet>)) -> impl Future<Output = ()> {
        let mut in_force = self.read(SystemTime::now());
        apply(in_force.clone());
        let every = self.settings.reload_every;
        async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let trusted = self.read(SystemTime::now());
                if trusted != in_force {
                    tracing::info!(
                        nets = trusted.len(),
                        lists = ?self.lists,
                        "trusted sources changed: connections.trusted and the provider lists in force"
                    );
                    apply(trusted.clone());
                    in_force = trusted;
                }
            }
        }
    }
}
