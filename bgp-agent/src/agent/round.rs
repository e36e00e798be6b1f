//! One round of the agent's decisions, without I/O, in two steps: a round is proposed
//! (would these inputs withdraw the route for health? then the peer guard is asked),
//! and committed with the drain flag, local health, the time and the guard's verdict;
//! out comes the route change to carry out. Nothing decided is undone afterwards.
//!
//! A withdraw for a drain (and, if configured, for health) is graceful: the route stays
//! announced with GRACEFUL_SHUTDOWN for `graceful_shutdown.wait`, then goes. A health
//! failure during a drain's wait, or the wait's end, withdraws; an undrain before then
//! announces plainly again.
//!
//! The degrade checks (a soft drain) only change how an announced route is preferred.

use std::time::Duration;

use crate::config::GracefulShutdown;
use crate::hysteresis::{Change, Degradation, HealthWithdraw, Machine, Policy, Route, Time, Why};
use crate::speaker::Advert;

#[derive(Clone)]
pub(super) struct Agent {
    machine: Machine,
    drained: bool,
    graceful: Option<GracefulShutdown>,
    /// A graceful shutdown under way: the withdraw is due then.
    leaving_until: Option<Time>,
    degradation: Degradation,
}

/// What one round decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Round {
    pub change: Option<Change>,
    /// The drain flag changed this round.
    pub drain_changed: bool,
}

impl Agent {
    pub(super) fn new(policy: Policy, graceful: Option<GracefulShutdown>) -> Self {
        Self {
            machine: Machine::new(policy),
            drained: false,
            graceful,
            leaving_until: None,
            degradation: Degradation::default(),
        }
    }

    /// Feeds this round's degrade checks (`ok`: all passed); returns whether the PoP is
    /// now degraded when that changed. Hysteresis only while announced: a route comes
    /// up with the checks' latest word.
    pub(super) fn observe_degrade(&mut self, now: Time, ok: bool) -> Option<bool> {
        match self.machine.route() {
            Route::Announced => {
                let policy = self.machine.policy().clone();
                self.degradation.observe(now, ok, &policy)
            }
            Route::Withdrawn => self.degradation.follow(now, ok),
        }
    }

    /// Whether the round these inputs make would withdraw the route for health (not for
    /// a drain): the question for the peer guard before [`Agent::round`] commits it.
    pub(super) fn proposes_health_withdraw(
        &self,
        now: Time,
        healthy: bool,
        drain_requested: bool,
    ) -> bool {
        let mut proposal = self.clone();
        let round = proposal.round(now, healthy, drain_requested, HealthWithdraw::Allowed);
        round.change == Some(Change::Withdraw) && proposal.why() == Why::Unhealthy
    }

    /// Commits one round: `health_withdraw` is the guard's verdict on a health withdraw
    /// (or `Allowed` with no guard, or none proposed).
    pub(super) fn round(
        &mut self,
        now: Time,
        healthy: bool,
        drain_requested: bool,
        health_withdraw: HealthWithdraw,
    ) -> Round {
        let drain_changed = drain_requested != self.drained;
        let mut change = None;
        if drain_changed {
            self.drained = drain_requested;
            change = self.machine.set_drained(now, drain_requested);
        }
        let change = change.or(self.machine.observe(now, healthy, health_withdraw));
        self.leaving_until = match (change, self.leaving_until) {
            (Some(Change::Withdraw), _) => self
                .graceful
                .as_ref()
                .filter(|g| self.drained || g.on_health_withdraw)
                .map(|g| now + g.wait),
            (Some(Change::Announce), _) => None,
            (None, Some(until)) if now >= until || (self.drained && self.machine.failing()) => None,
            (None, leaving) => leaving,
        };
        Round {
            change,
            drain_changed,
        }
    }

    /// A reload: new timers and thresholds, and the graceful shutdown (a wait under way
    /// keeps its end).
    pub(super) fn reconfigure(&mut self, policy: Policy, graceful: Option<GracefulShutdown>) {
        self.machine.set_policy(policy);
        self.graceful = graceful;
    }

    /// What BGP should carry now.
    pub(super) fn advert(&self) -> Advert {
        match (self.machine.route(), self.leaving_until) {
            (Route::Announced, _) if self.degradation.degraded() => Advert::Degraded,
            (Route::Announced, _) => Advert::Announced,
            (Route::Withdrawn, Some(_)) => Advert::GracefulShutdown,
            (Route::Withdrawn, None) => Advert::Withdrawn,
        }
    }

    /// True when the next round may change what BGP carries (the agent re-checks faster).
    pub(super) fn change_pending(&self) -> bool {
        self.machine.change_pending() || self.leaving_until.is_some() || self.degradation.pending()
    }

    /// On exit: how long to announce with GRACEFUL_SHUTDOWN before the last withdraw
    /// (`None`: withdraw at once). A wait under way keeps its end.
    pub(super) fn exit_wait(&self, now: Time) -> Option<Duration> {
        match self.advert() {
            Advert::Announced | Advert::Degraded => self.graceful.as_ref().map(|g| g.wait),
            Advert::GracefulShutdown => self.leaving_until.map(|until| until.saturating_sub(now)),
            Advert::Withdrawn => None,
        }
    }

    pub(super) fn why(&self) -> Why {
        self.machine.why()
    }

    pub(super) fn drained(&self) -> bool {
        self.drained
    }

    pub(super) fn machine(&self) -> &Machine {
        &self.machine
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::hysteresis::HealthWithdraw::{Allowed, Held};

    fn policy() -> Policy {
        Policy {
            rise: 2,
            fall: 2,
            hold_down: Duration::ZERO,
            dampening: None,
        }
    }

    fn graceful(on_health_withdraw: bool) -> Option<GracefulShutdown> {
        Some(GracefulShutdown {
            wait: Duration::from_secs(2),
            on_health_withdraw,
        })
    }

    fn ms(n: u64) -> Time {
        Duration::from_millis(n)
    }

    fn announced() -> Agent {
        announced_with(None)
    }

    fn announced_with(graceful: Option<GracefulShutdown>) -> Agent {
        let mut agent = Agent::new(policy(), graceful);
        agent.round(ms(0), true, false, Allowed);
        assert_eq!(
            agent.round(ms(100), true, false, Allowed).change,
            Some(Change::Announce)
        );
        agent
    }

    #[test]
    fn a_health_withdraw_is_proposed_without_changing_anything_then_committed() {
        let mut agent = announced();
        agent.round(ms(200), false, false, Allowed);
        assert!(agent.proposes_health_withdraw(ms(300), false, false));
        assert!(!agent.proposes_health_withdraw(ms(300), true, false));
        assert!(
            !agent.proposes_health_withdraw(ms(300), false, true),
            "an operator's drain is not a health withdraw"
        );
        assert_eq!(agent.advert(), Advert::Announced);
        let round = agent.round(ms(300), false, false, Allowed);
        assert_eq!(round.change, Some(Change::Withdraw));
        assert_eq!(agent.advert(), Advert::Withdrawn);
    }

    #[test]
    fn a_held_withdraw_keeps_the_route_announced_and_is_proposed_again() {
        let mut agent = announced();
        agent.round(ms(200), false, false, Allowed);
        assert_eq!(agent.round(ms(300), false, false, Held).change, None);
        assert_eq!(agent.advert(), Advert::Announced);
        assert!(agent.proposes_health_withdraw(ms(400), false, false));
        assert_eq!(
            agent.round(ms(400), false, false, Allowed).change,
            Some(Change::Withdraw)
        );
    }

    #[test]
    fn a_drain_withdraws_at_once_without_the_guard_and_undrain_announces() {
        let mut agent = announced();
        let round = agent.round(ms(200), true, true, Held);
        assert!(round.drain_changed);
        assert_eq!(
            round.change,
            Some(Change::Withdraw),
            "a drain is never held"
        );
        assert!(agent.drained());
        assert_eq!(agent.round(ms(300), true, true, Allowed).change, None);
        let mut changes = Vec::new();
        for t in 4..10 {
            let round = agent.round(ms(t * 100), true, false, Allowed);
            changes.extend(round.change);
        }
        assert_eq!(changes, [Change::Announce]);
    }

    /// Each round's advert from `from` ms in 100 ms steps.
    fn adverts(agent: &mut Agent, from: u64, rounds: &[(bool, bool)]) -> Vec<Advert> {
        rounds
            .iter()
            .enumerate()
            .map(|(i, &(healthy, drained))| {
                agent.round(ms(from + i as u64 * 100), healthy, drained, Allowed);
                agent.advert()
            })
            .collect()
    }

    #[test]
    fn a_drain_announces_graceful_shutdown_for_the_wait_then_withdraws() {
        let mut agent = announced_with(graceful(false));
        let round = agent.round(ms(200), true, true, Allowed);
        assert_eq!(round.change, Some(Change::Withdraw));
        assert_eq!(agent.advert(), Advert::GracefulShutdown);
        assert!(agent.change_pending());
        let seen = adverts(&mut agent, 300, &[(true, true); 20]);
        // Due at 2,200: the rounds at 300..2,100 keep it, 2,200 withdraws.
        assert!(
            seen[..19].iter().all(|a| *a == Advert::GracefulShutdown),
            "{seen:?}"
        );
        assert_eq!(seen[19], Advert::Withdrawn);
        assert!(!agent.change_pending());
    }

    #[test]
    fn an_undrain_during_the_wait_announces_plainly_again() {
        let mut agent = announced_with(graceful(false));
        agent.round(ms(200), true, true, Allowed);
        let round = agent.round(ms(300), true, false, Allowed);
        assert_eq!(round.change, Some(Change::Announce));
        assert_eq!(agent.advert(), Advert::Announced);
        assert_eq!(
            adverts(&mut agent, 400, &[(true, false); 30]),
            [Advert::Announced; 30]
        );
    }

    #[test]
    fn a_health_failure_during_a_drain_wait_withdraws_at_once() {
        let mut agent = announced_with(graceful(false));
        agent.round(ms(200), true, true, Allowed);
        // fall = 2 failing rounds: the edge cannot serve what the community still draws.
        let seen = adverts(&mut agent, 300, &[(false, true), (false, true)]);
        assert_eq!(seen, [Advert::GracefulShutdown, Advert::Withdrawn]);
    }

    #[test]
    fn health_withdraws_are_immediate_unless_configured() {
        let mut agent = announced_with(graceful(false));
        agent.round(ms(200), false, false, Allowed);
        assert_eq!(
            agent.round(ms(300), false, false, Allowed).change,
            Some(Change::Withdraw)
        );
        assert_eq!(agent.advert(), Advert::Withdrawn);

        let mut agent = announced_with(graceful(true));
        agent.round(ms(200), false, false, Allowed);
        agent.round(ms(300), false, false, Allowed);
        assert_eq!(agent.advert(), Advert::GracefulShutdown);
        let seen = adverts(&mut agent, 400, &[(false, false); 20]);
        assert_eq!(seen[18], Advert::GracefulShutdown);
        assert_eq!(seen[19], Advert::Withdrawn);
    }

    #[test]
    fn a_held_graceful_withdraw_stays_announced() {
        let mut agent = announced_with(graceful(true));
        agent.round(ms(200), false, false, Allowed);
        agent.round(ms(300), false, false, Held);
        assert_eq!(agent.advert(), Advert::Announced);
        assert_eq!(agent.exit_wait(ms(300)), Some(Duration::from_secs(2)));
    }

    #[test]
    fn exit_waits_the_full_time_when_announced_and_the_rest_when_leaving() {
        let agent = announced_with(graceful(false));
        assert_eq!(agent.exit_wait(ms(200)), Some(Duration::from_secs(2)));
        let mut agent = announced_with(graceful(false));
        agent.round(ms(200), true, true, Allowed);
        assert_eq!(agent.exit_wait(ms(1_200)), Some(Duration::from_secs(1)));
        agent.round(ms(2_200), true, true, Allowed);
        assert_eq!(agent.exit_wait(ms(2_300)), None);
        assert_eq!(announced().exit_wait(ms(200)), None);
    }

    #[test]
    fn a_degraded_announced_route_is_advertised_degraded_and_leaves_gracefully() {
        let mut agent = announced_with(graceful(false));
        assert_eq!(agent.observe_degrade(ms(200), false), None);
        assert_eq!(agent.observe_degrade(ms(300), false), Some(true));
        assert_eq!(agent.advert(), Advert::Degraded);
        // Degradation never withdraws; a drain still leaves through 65535:0.
        agent.round(ms(300), true, false, Allowed);
        assert_eq!(agent.advert(), Advert::Degraded);
        agent.round(ms(400), true, true, Allowed);
        assert_eq!(agent.advert(), Advert::GracefulShutdown);
        assert_eq!(agent.exit_wait(ms(400)), Some(Duration::from_secs(2)));
        // Withdrawn, degraded or not, is withdrawn; it comes up as the checks say now.
        let mut agent = Agent::new(policy(), None);
        assert_eq!(agent.observe_degrade(ms(0), false), Some(true));
        assert_eq!(agent.advert(), Advert::Withdrawn);
        assert_eq!(agent.observe_degrade(ms(100), true), Some(false));
        agent.round(ms(100), true, false, Allowed);
        agent.round(ms(200), true, false, Allowed);
        assert_eq!(agent.advert(), Advert::Announced);
    }
}
