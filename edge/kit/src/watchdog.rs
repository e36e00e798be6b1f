//! systemd's `Type=notify` and watchdog (`WatchdogSec=`): a service says when it is
//! ready, and proves it is alive while it makes progress, so a hung process (stopped,
//! deadlocked, stuck in a call) is killed and restarted instead of holding its place.
//!
//! `WATCHDOG_PID` is not required to be ours: under ExaBGP the bgp-agent is ExaBGP's
//! child and the unit's main process is ExaBGP (`NotifyAccess=all` there).

use std::time::Duration;

use sd_notify::NotifyState;

/// The watchdog the service manager set, if any.
#[derive(Clone, Copy, Debug)]
pub struct Watchdog {
    period: Option<Duration>,
}

impl Watchdog {
    /// From `WATCHDOG_USEC`.
    pub fn from_env() -> Self {
        let period = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|usec| usec.parse().ok())
            .filter(|usec| *usec > 0)
            .map(Duration::from_micros);
        Self { period }
    }

    /// Start-up is done: `Type=notify` units count as started.
    pub fn ready(&self) {
        notify(NotifyState::Ready);
    }

    /// Shutting down: systemd shows the unit as deactivating.
    pub fn stopping(&self) {
        notify(NotifyState::Stopping);
    }

    /// Progress made: one ping, if the service manager watches.
    pub fn alive(&self) {
        if self.period.is_some() {
            notify(NotifyState::Watchdog);
        }
    }

    /// `pause`, short enough that a healthy service pings several times per period.
    pub fn bound(&self, pause: Duration) -> Duration {
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
