//! `backhaul.max_rate`: when the next delivery may start. Pure: the caller passes the
//! clock. A generic cell rate (each start moves the next allowed one on by 1/rate) with
//! a tenth of a second of slack, so the pace holds on average without a timer per event.

use std::time::{Duration, Instant};

/// The pace of delivery starts.
#[derive(Debug)]
pub(super) struct Pace {
    interval: Duration,
    slack: Duration,
    /// When the next start would be on time if none came early.
    due: Option<Instant>,
}

impl Pace {
    /// `per_second` starts a second at most.
    pub(super) fn new(per_second: u32) -> Self {
        let interval = Duration::from_secs(1) / per_second.max(1);
        Self {
            interval,
            slack: SLACK.max(interval) - interval,
            due: None,
        }
    }

    /// Takes one start at `now`, or says from when one may be taken.
    pub(super) fn start(&mut self, now: Instant) -> Result<(), Instant> {
        let due = self.due.unwrap_or(now);
        if let Some(early) = due.checked_sub(self.slack)
            && now < early
        {
            return Err(early);
        }
        self.due = Some(due.max(now) + self.interval);
        Ok(())
    }
}

/// How far ahead of the pace starts may run: a burst of a tenth of a second's worth.
const SLACK: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_keep_to_the_rate_with_a_tenth_of_a_second_of_slack() {
        let t0 = Instant::now();
        let mut pace = Pace::new(100);
        let burst = (0..50).take_while(|_| pace.start(t0).is_ok()).count();
        assert_eq!(burst, 10, "a tenth of a second's worth at once");
        let next = pace.start(t0).unwrap_err();
        assert_eq!(next, t0 + Duration::from_millis(10));
        // Driven by what it answers for ten seconds: 1,000 starts, give or take the burst.
        let mut now = next;
        let mut started = 0;
        while now < t0 + Duration::from_secs(10) {
            match pace.start(now) {
                Ok(()) => started += 1,
                Err(at) => now = at,
            }
        }
        assert!((1_000..=1_010).contains(&(started + burst)), "{started}");
    }

    #[test]
    fn an_idle_pace_does_not_bank_starts() {
        let t0 = Instant::now();
        let mut pace = Pace::new(10);
        assert!(pace.start(t0).is_ok());
        let later = t0 + Duration::from_secs(60);
        assert!(pace.start(later).is_ok());
        assert!(
            pace.start(later).is_err(),
            "one a tenth of a second at 10/s"
        );
        assert_eq!(pace.start(later), Err(later + Duration::from_millis(100)));
    }

    #[test]
    fn a_rate_over_a_million_still_moves() {
        let t0 = Instant::now();
        let mut pace = Pace::new(u32::MAX);
        assert!((0..1000).all(|_| pace.start(t0).is_ok()));
    }
}
