//! Per-source rate limits (429), pure: a token bucket per route and source, where a
//! source is an IPv4 address or an IPv6 /64 (one host's usual allocation). Local state
//! only: a PoP limits what reaches it. The table is bounded; buckets that have refilled
//! are forgotten first.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::Duration;

use super::limiter::Time;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: f64,
}

/// Buckets by route (any key: the route's name) and source.
#[derive(Debug)]
pub(crate) struct RateLimits<R> {
    buckets: HashMap<(R, Source), Bucket>,
}

impl<R> Default for RateLimits<R> {
    fn default() -> Self {
        Self {
            buckets: HashMap::new(),
        }
    }
}

/// A source address as rate limits see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    V4([u8; 4]),
    /// The /64 prefix.
    V6([u8; 8]),
}

impl Source {
    pub(crate) fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4.octets()),
                None => {
                    let mut prefix = [0; 8];
                    prefix.copy_from_slice(&v6.octets()[..8]);
                    Source::V6(prefix)
                }
            },
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Time,
}

impl<R: Hash + Eq + Clone> RateLimits<R> {
    /// Takes a token for `source` on `route`: `Err(wait)` when the bucket
    /// is empty, with how long until a token is back (for `Retry-After`).
    pub(crate) fn take(
        &mut self,
        now: Time,
        route: &R,
        source: Source,
        rate: Rate,
    ) -> Result<(), Duration> {
        let key = (route.clone(), source);
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(&key) {
            self.forget_refilled(now, rate);
        }
        let bucket = self.buckets.entry(key).or_insert(Bucket {
            tokens: rate.burst,
            at: now,
        });
        let refill = now.saturating_sub(bucket.at).as_secs_f64() * rate.per_second;
        bucket.tokens = (bucket.tokens + refill).min(rate.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / rate.per_second,
            ))
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Drops buckets that would be full by now (nothing lost: a new one starts full);
    /// if that frees nothing, the table starts over rather than grow without bound.
    fn forget_refilled(&mut self, now: Time, rate: Rate) {
        let refill_time = Duration::from_secs_f64(rate.burst / rate.per_second);
        self.buckets
            .retain(|_, bucket| now.saturating_sub(bucket.at) < refill_time);
        if self.buckets.len() >= MAX_BUCKETS {
            self.buckets.clear();
        }
    }
}

/// Bounds the table's memory (about 5 MB at the bound).
const MAX_BUCKETS: usize = 100_000;

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate {
        per_second: 10.0,
        burst: 5.0,
    };

    fn ms(n: u64) -> Time {
        Duration::from_millis(n)
    }

    fn ip(text: &str) -> Source {
        Source::of(text.parse().unwrap())
    }

    #[test]
    fn a_burst_then_the_rate() {
        let mut limits = RateLimits::<usize>::default();
        let a = ip("192.0.2.1");
        for _ in 0..5 {
            assert_eq!(limits.take(ms(0), &0, a, RATE), Ok(()));
        }
        let wait = limits.take(ms(0), &0, a, RATE).unwrap_err();
        assert_eq!(wait, ms(100));
        assert_eq!(limits.take(ms(100), &0, a, RATE), Ok(()));
        assert!(limits.take(ms(150), &0, a, RATE).is_err());
        // Another source and another route have buckets of their own.
        assert_eq!(limits.take(ms(150), &0, ip("192.0.2.2"), RATE), Ok(()));
        assert_eq!(limits.take(ms(150), &1, a, RATE), Ok(()));
    }

    #[test]
    fn ipv6_shares_a_bucket_per_64_and_mapped_v4_is_v4() {
        assert_eq!(ip("2001:db8:1:2::1"), ip("2001:db8:1:2:ffff::9"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"));
    }

    #[test]
    fn the_table_is_bounded() {
        let mut limits = RateLimits::<usize>::default();
        for i in 0..(MAX_BUCKETS as u32 + 10) {
            let source = Source::of(IpAddr::from(i.to_be_bytes()));
            let _ = limits.take(ms(0), &0, source, RATE);
        }
        assert!(limits.len() <= MAX_BUCKETS);
    }
}
