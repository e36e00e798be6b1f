//! One round of the agent's decisions, without I/O: the drain flag and local health go
//! in, with the time; out comes the route change to carry out, and whether the peer
//! guard must be asked first (a health withdraw while other PoPs may be down too).

use crate::hysteresis::{Change, Machine, Policy, Route, Time, Why};

pub struct Agent {
    machine: Machine,
    drained: bool,
    /// Whether a peer guard is configured: health withdraws then need its word.
    guarded: bool,
}

/// What one round decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Round {
    pub change: Option<Change>,
    /// The drain flag changed this round.
    pub drain_changed: bool,
    /// `change` is a health withdraw: ask the guard, and [`Agent::veto`] if it refuses.
    pub ask_guard: bool,
}

impl Agent {
    pub fn new(policy: Policy, guarded: bool) -> Self {
        Self {
            machine: Machine::new(policy),
            drained: false,
            guarded,
        }
    }

    pub fn round(&mut self, now: Time, healthy: bool, drain_requested: bool) -> Round {
        let drain_changed = drain_requested != self.drained;
        let mut change = None;
        if drain_changed {
            self.drained = drain_requested;
            change = self.machine.set_drained(now, drain_requested);
        }
        let change = change.or(self.machine.observe(now, healthy));
        Round {
            change,
            drain_changed,
            ask_guard: change == Some(Change::Withdraw) && !self.drained && self.guarded,
        }
    }

    /// The guard refused this round's withdraw: the route stays announced.
    pub fn veto(&mut self) {
        self.machine.withdraw_vetoed();
    }

    /// A reload: new timers and thresholds, and whether a guard is now configured.
    pub fn reconfigure(&mut self, policy: Policy, guarded: bool) {
        self.machine.set_policy(policy);
        self.guarded = guarded;
    }

    pub fn route(&self) -> Route {
        self.machine.route()
    }

    pub fn why(&self) -> Why {
        self.machine.why()
    }

    pub fn drained(&self) -> bool {
        self.drained
    }

    pub fn machine(&self) -> &Machine {
        &self.machine
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn policy() -> Policy {
        Policy {
            rise: 2,
            fall: 2,
            hold_down: Duration::ZERO,
            dampening: None,
        }
    }

    fn ms(n: u64) -> Time {
        Duration::from_millis(n)
    }

    fn announced(guarded: bool) -> Agent {
        let mut agent = Agent::new(policy(), guarded);
        agent.round(ms(0), true, false);
        assert_eq!(
            agent.round(ms(100), true, false).change,
            Some(Change::Announce)
        );
        agent
    }

    #[test]
    fn a_health_withdraw_asks_the_guard_only_when_one_is_configured() {
        let mut agent = announced(true);
        agent.round(ms(200), false, false);
        let round = agent.round(ms(300), false, false);
        assert_eq!(round.change, Some(Change::Withdraw));
        assert!(round.ask_guard);

        let mut agent = announced(false);
        agent.round(ms(200), false, false);
        assert!(!agent.round(ms(300), false, false).ask_guard);
    }

    #[test]
    fn a_veto_keeps_the_route_announced() {
        let mut agent = announced(true);
        agent.round(ms(200), false, false);
        agent.round(ms(300), false, false);
        agent.veto();
        assert_eq!(agent.route(), Route::Announced);
    }

    #[test]
    fn a_drain_withdraws_at_once_without_the_guard_and_undrain_announces() {
        let mut agent = announced(true);
        let round = agent.round(ms(200), true, true);
        assert!(round.drain_changed);
        assert_eq!(round.change, Some(Change::Withdraw));
        assert!(
            !round.ask_guard,
            "an operator's drain is not a health withdraw"
        );
        assert!(agent.drained());
        assert_eq!(agent.round(ms(300), true, true).change, None);
        let mut changes = Vec::new();
        for t in 4..10 {
            let round = agent.round(ms(t * 100), true, false);
            changes.extend(round.change);
        }
        assert_eq!(changes, [Change::Announce]);
    }
}
