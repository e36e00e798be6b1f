//! A circuit breaker for the origin: after `failures` consecutive failed deliveries it
//! opens and stops sending for `open_for`; then one probe is let through (half-open); a
//! success closes it, a failure opens it again. When the sink reports the origin
//! reachable again (a reconnect), an open breaker goes half-open at once instead of
//! sitting out `open_for`. Pure: time is an argument.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Closed,
    Open,
    HalfOpen,
}

#[derive(Debug)]
pub(super) struct Breaker {
    failures_to_open: u32,
    open_for: Duration,
    consecutive_failures: u32,
    opened_at: Option<Instant>,
    probe_out: bool,
}

/// What the caller may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Permit {
    Send,
    /// Send this one as the half-open probe.
    Probe,
    /// Wait at least this long before asking again.
    Wait(Duration),
}

impl Breaker {
    pub(super) fn new(failures_to_open: u32, open_for: Duration) -> Self {
        Self {
            failures_to_open: failures_to_open.max(1),
            open_for,
            consecutive_failures: 0,
            opened_at: None,
            probe_out: false,
        }
    }

    pub(super) fn state(&self, now: Instant) -> State {
        match self.opened_at {
            None => State::Closed,
            Some(at) if now < at + self.open_for => State::Open,
            Some(_) => State::HalfOpen,
        }
    }

    pub(super) fn permit(&mut self, now: Instant) -> Permit {
        match self.state(now) {
            State::Closed => Permit::Send,
            State::Open => Permit::Wait(
                self.opened_at
                    .map_or(self.open_for, |at| at + self.open_for - now),
            ),
            State::HalfOpen if self.probe_out => Permit::Wait(self.open_for / 4),
            State::HalfOpen => {
                self.probe_out = true;
                Permit::Probe
            }
        }
    }

    pub(super) fn on_success(&mut self) {
        self.consecutive_failures = 0;
        self.opened_at = None;
        self.probe_out = false;
    }

    /// The origin is reachable again: let the probe through now.
    pub(super) fn on_origin_back(&mut self, now: Instant) {
        if self.state(now) == State::Open {
            self.opened_at = now.checked_sub(self.open_for).or(self.opened_at);
        }
    }

    pub(super) fn on_failure(&mut self, now: Instant) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let probe_failed = self.probe_out;
        self.probe_out = false;
        if probe_failed || self.consecutive_failures >= self.failures_to_open {
            self.opened_at = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_probes_once() {
        let t0 = Instant::now();
        let mut b = Breaker::new(3, Duration::from_secs(10));
        b.on_failure(t0);
        b.on_failure(t0);
        b.on_success();
        b.on_failure(t0);
        b.on_failure(t0);
        assert_eq!(b.permit(t0), Permit::Send, "successes reset the count");
        b.on_failure(t0);
        assert_eq!(b.state(t0), State::Open);
        assert_eq!(
            b.permit(t0 + Duration::from_secs(4)),
            Permit::Wait(Duration::from_secs(6))
        );
        let later = t0 + Duration::from_secs(10);
        assert_eq!(b.permit(later), Permit::Probe);
        assert!(
            matches!(b.permit(later), Permit::Wait(_)),
            "one probe at a time"
        );
        b.on_failure(later);
        assert_eq!(b.state(later), State::Open, "a failed probe reopens");
        let again = later + Duration::from_secs(10);
        assert_eq!(b.permit(again), Permit::Probe);
        b.on_success();
        assert_eq!(
            (b.state(again), b.permit(again)),
            (State::Closed, Permit::Send)
        );
    }

    #[test]
    fn a_reconnect_lets_the_probe_through_at_once() {
        let t0 = Instant::now() + Duration::from_secs(60);
        let mut b = Breaker::new(1, Duration::from_secs(30));
        b.on_origin_back(t0);
        assert_eq!(b.state(t0), State::Closed, "nothing to do when closed");
        b.on_failure(t0);
        let soon = t0 + Duration::from_secs(1);
        assert_eq!(b.state(soon), State::Open);
        b.on_origin_back(soon);
        assert_eq!(b.permit(soon), Permit::Probe);
        b.on_failure(soon);
        assert_eq!(
            b.permit(soon),
            Permit::Wait(Duration::from_secs(30)),
            "a failed probe opens it for the full time again"
        );
    }
}
