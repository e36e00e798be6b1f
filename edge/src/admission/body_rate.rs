//! The slow-body rule: after a grace period a request body must keep arriving at a
//! minimum average rate, and the whole body must arrive within a deadline. Pure: the
//! caller passes the time elapsed and the bytes received.

use std::time::Duration;

/// The slow-body rule's settings (`http.body_rate`), with the rule itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyRate {
    /// Bytes per second, averaged from the start of the body; 0 disables the check.
    pub min_bytes_per_second: u64,
    /// How long a body may take before the rate is judged.
    pub grace: Duration,
    /// The longest a whole body may take, whatever its rate.
    pub deadline: Duration,
}

impl BodyRate {
    /// How long after the start of the body the sender may take to have sent
    /// `received` bytes and one more: the moment it becomes too slow if nothing else
    /// arrives.
    pub fn next_deadline(&self, received: u64) -> Duration {
        let by_rate = if self.min_bytes_per_second == 0 {
            self.deadline
        } else {
            Duration::from_secs_f64((received + 1) as f64 / self.min_bytes_per_second as f64)
                .max(self.grace)
        };
        by_rate.min(self.deadline)
    }

    /// Whether a body that has delivered `received` bytes after `elapsed` is too slow.
    pub fn too_slow(&self, elapsed: Duration, received: u64) -> bool {
        if elapsed >= self.deadline {
            return true;
        }
        if self.min_bytes_per_second == 0 || elapsed <= self.grace {
            return false;
        }
        (received as f64) < self.min_bytes_per_second as f64 * elapsed.as_secs_f64()
    }

    /// Whether a body that has delivered `received` bytes after `elapsed` trickles: past
    /// the grace period at under [`TRICKLE_FACTOR`] times the minimum rate. Such a
    /// body is within the rules, but its connection is among the first to make room
    /// when the connection table is full.
    pub fn trickles(&self, elapsed: Duration, received: u64) -> bool {
        let fast_enough = BodyRate {
            min_bytes_per_second: self.min_bytes_per_second.saturating_mul(TRICKLE_FACTOR),
            deadline: Duration::MAX,
            ..*self
        };
        fast_enough.too_slow(elapsed, received)
    }
}

/// A body under this many times the minimum rate trickles ([`BodyRate::trickles`]).
pub(crate) const TRICKLE_FACTOR: u64 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: BodyRate = BodyRate {
        min_bytes_per_second: 1000,
        grace: Duration::from_secs(2),
        deadline: Duration::from_secs(30),
    };

    #[test]
    fn grace_then_average_rate_then_deadline() {
        assert!(
            !RULE.too_slow(Duration::from_secs(2), 0),
            "nothing required during the grace period"
        );
        assert!(RULE.too_slow(Duration::from_secs(3), 2_999));
        assert!(!RULE.too_slow(Duration::from_secs(3), 3_000));
        assert!(
            RULE.too_slow(Duration::from_secs(30), 10_000_000),
            "the deadline holds whatever the rate"
        );
        let off = BodyRate {
            min_bytes_per_second: 0,
            ..RULE
        };
        assert!(!off.too_slow(Duration::from_secs(29), 0));
    }

    #[test]
    fn a_body_under_four_times_the_minimum_trickles() {
        assert!(
            !RULE.trickles(Duration::from_secs(2), 0),
            "not in the grace period"
        );
        assert!(RULE.trickles(Duration::from_secs(10), 39_999));
        assert!(!RULE.trickles(Duration::from_secs(10), 40_000));
        assert!(
            !RULE.trickles(Duration::from_secs(40), 10_000_000),
            "the deadline is too_slow's, not a trickle"
        );
        let off = BodyRate {
            min_bytes_per_second: 0,
            ..RULE
        };
        assert!(!off.trickles(Duration::from_secs(29), 0));
    }

    #[test]
    fn next_deadline_follows_the_bytes() {
        assert_eq!(
            RULE.next_deadline(0),
            Duration::from_secs(2),
            "never before the grace ends"
        );
        assert_eq!(RULE.next_deadline(4_999), Duration::from_secs(5));
        assert_eq!(
            RULE.next_deadline(10_000_000),
            Duration::from_secs(30),
            "capped by the deadline"
        );
        // The deadline it gives is exactly where too_slow starts to hold.
        let at = RULE.next_deadline(4_999);
        assert!(!RULE.too_slow(at - Duration::from_millis(1), 4_999));
        assert!(RULE.too_slow(at + Duration::from_millis(1), 4_999));
    }
}
