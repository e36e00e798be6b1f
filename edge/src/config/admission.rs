//! `admission:` admission control under overload (`crate::admission`).

use std::time::Duration;

use bytesize::ByteSize;
use edge_kit::config_file::FieldErrors;
use serde::Deserialize;

use crate::admission::AdmissionSettings;
use crate::admission::SOURCE_BODY_SHARE as SOURCE_SHARE;
use crate::admission::limiter;

/// Admission control. The limiter's defaults live with it (`limiter::Settings`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAdmission {
    /// false: admit everything (for comparison runs).
    enabled: bool,
    /// Concurrency limit to start from; it adapts between min and max.
    initial_limit: u32,
    min_limit: u32,
    max_limit: u32,
    /// CoDel: a minimum wait for a slot above this, for a whole interval, is overload.
    #[serde(with = "humantime_serde")]
    target_delay: Duration,
    #[serde(with = "humantime_serde")]
    interval: Duration,
    /// Longest wait for a slot before 503.
    #[serde(with = "humantime_serde")]
    max_wait: Duration,
    max_queue: usize,
    /// Fraction of spool.max_bytes above which low-priority routes are shed.
    spool_shed_low_above: f64,
    /// Fraction above which only high-priority routes are admitted.
    spool_high_only_above: f64,
    /// Request body bytes held at once, edge-wide (one source: an eighth); a body that
    /// finds no room is refused before it is read (503).
    max_body_bytes: ByteSize,
}

impl Default for RawAdmission {
    fn default() -> Self {
        let limiter = limiter::Settings::default();
        Self {
            enabled: true,
            initial_limit: limiter.initial_limit as u32,
            min_limit: limiter.min_limit as u32,
            max_limit: limiter.max_limit as u32,
            target_delay: limiter.target_delay,
            interval: limiter.interval,
            max_wait: limiter.max_wait,
            max_queue: limiter.max_queue,
            spool_shed_low_above: 0.6,
            spool_high_only_above: 0.8,
            max_body_bytes: ByteSize::mib(256),
        }
    }
}

impl RawAdmission {
    /// `largest_body`: the largest route `max_body`, which must fit a source's share.
    pub(super) fn validate(
        self,
        trusted: &[ipnet::IpNet],
        largest_body: u64,
        errors: &mut FieldErrors,
    ) -> AdmissionSettings {
        let at = |field: &str| format!("admission.{field}");
        if !(1 <= self.min_limit
            && self.min_limit <= self.initial_limit
            && self.initial_limit <= self.max_limit)
        {
            errors.add(
                at("initial_limit"),
                "needs 1 <= min_limit <= initial_limit <= max_limit",
            );
        }
        if self.target_delay.is_zero() || self.interval < self.target_delay {
            errors.add(at("interval"), "needs 0 < target_delay <= interval");
        }
        if self.max_wait.is_zero() {
            errors.add(at("max_wait"), "must be positive");
        }
        if !(0.0 < self.spool_shed_low_above
            && self.spool_shed_low_above <= self.spool_high_only_above
            && self.spool_high_only_above <= 1.0)
        {
            errors.add(
                at("spool_shed_low_above"),
                "needs 0 < spool_shed_low_above <= spool_high_only_above <= 1",
            );
        }
        let max_body_bytes = self.max_body_bytes.as_u64();
        if max_body_bytes / SOURCE_SHARE < largest_body {
            errors.add(
                at("max_body_bytes"),
                format!(
                    "an eighth of it (one source's share) must hold the largest route max_body ({})",
                    ByteSize::b(largest_body)
                ),
            );
        }
        AdmissionSettings {
            enabled: self.enabled,
            limiter: limiter::Settings {
                initial_limit: f64::from(self.initial_limit),
                min_limit: f64::from(self.min_limit),
                max_limit: f64::from(self.max_limit),
                target_delay: self.target_delay,
                interval: self.interval,
                max_wait: self.max_wait,
                max_queue: self.max_queue,
                ..limiter::Settings::default()
            },
            spool_shed_low_above: self.spool_shed_low_above,
            spool_high_only_above: self.spool_high_only_above,
            trusted: trusted.to_vec(),
            max_body_bytes,
        }
    }
}
