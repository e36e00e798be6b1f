//! Retry pacing for deliveries to the origin: exponential backoff with full jitter, and
//! the origin's own `Retry-After` when it sends one. Pure: the random draw and the clock
//! are arguments.

use std::time::{Duration, SystemTime};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The pause before retry number `attempt` (0 for the first retry): uniformly random
    /// in [0, min(max, base · 2^attempt)], so many PoPs retrying an origin that just came
    /// back do not arrive together. `unit` is a uniform draw in [0, 1).
    pub(super) fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
            .min(self.max);
        ceiling.mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Parses an RFC 9110 `Retry-After` value: delay-seconds or an HTTP-date.
pub(super) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A cheap uniform draw in [0, 1) for jitter (no cryptographic use).
pub(super) fn unit_random() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64,
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_under_an_exponential_ceiling() {
        let b = Backoff {
            base: Duration::from_millis(200),
            max: Duration::from_secs(30),
        };
        assert_eq!(
            b.delay(0, 0.999_999),
            Duration::from_millis(200).mul_f64(0.999_999)
        );
        assert_eq!(b.delay(3, 0.5), Duration::from_millis(800));
        assert_eq!(b.delay(20, 1.0), Duration::from_secs(30), "capped at max");
        assert_eq!(b.delay(200, 1.0), Duration::from_secs(30), "no overflow");
        assert_eq!(b.delay(5, 0.0), Duration::ZERO);
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "past dates mean now"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }

    #[test]
    fn unit_random_is_in_range() {
        for _ in 0..1000 {
            let u = unit_random();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
