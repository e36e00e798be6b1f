//! systemd's watchdog (`WatchdogSec=`): the decision loop proves it is alive once a
//! round, so a hung agent (stopped, deadlocked, stuck in a call) is killed and the
//! unit's `ExecStopPost=` withdraws, instead of the route freezing as it was.
//!
//! Under ExaBGP the agent is ExaBGP's child and the unit's main process is ExaBGP: with
//! `NotifyAccess=all` on ExaBGP's unit the agent's pings keep ExaBGP alive, and a hung
//! agent gets ExaBGP killed, which drops the session and so the route. That is why
//! `WATCHDOG_PID` (ExaBGP's PID there) is not required to be ours.

use std::time::Duration;

use sd_notify::NotifyState;

/// The watchdog the service manager set, if any.
#[derive(Clone, Copy, Debug)]
pub(super) struct Watchdog {
    period: Option<Duration>,
}

impl Watchdog {
    /// From `WATCHDOG_USEC`.
    pub(super) fn from_env() -> Self {
        let period = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|usec| usec.parse().ok())
            .filter(|usec| *usec > 0)
            .map(Duration::from_micros);
        Self { period }
    }

    /// The agent has withdrawn and is deciding: `Type=notify` units count as started.
    pub(super) fn ready(&self) {
        notify(NotifyState::Ready);
    }

    /// One round done.
    pub(super) fn alive(&self) {
        if self.period.is_some() {
            notify(NotifyState::Watchdog);
        }
    }

    /// `pause`, short enough that a healthy agent pings several times per period.
    pub(super) fn bound(&self, pause: Duration) -> Duration {
        self.period.map_or(pause, |period| pause.min(period / 4))
    }
}

fn notify(state: NotifyState) {
    if let Err(e) = sd_notify::notify(&[state]) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_bounded_by_a_quarter_of_the_period() {
        let watchdog = Watchdog {
            period: Some(Duration::from_secs(2)),
        };
        assert_eq!(
            watchdog.bound(Duration::from_secs(5)),
            Duration::from_millis(500)
        );
        assert_eq!(
            watchdog.bound(Duration::from_millis(100)),
            Duration::from_millis(100)
        );
        let none = Watchdog { period: None };
        assert_eq!(none.bound(Duration::from_secs(5)), Duration::from_secs(5));
    }
}
