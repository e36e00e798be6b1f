//! When to announce and when to withdraw: a pure state machine fed check results and
//! the time. No I/O, so every rule is tested with a fake clock.
//!
//! - Start withdrawn; announce after `rise` consecutive healthy rounds.
//! - Withdraw after `fall` consecutive unhealthy rounds (a failing PoP is never kept
//!   announced by dampening or hold-down: those only delay the way back).
//! - After a withdraw, come back only once health has been unbroken for `hold_down`
//!   (any failed round restarts the wait) and `hold_down` has passed since the withdraw.
//!   A struggling edge passes checks for a few seconds between short failures; counting
//!   `rise` rounds alone would re-announce in each of those stretches.
//! - The wait stretches with the flap history: with the decayed penalty at k withdraws'
//!   worth, the route needs k × `hold_down` of unbroken health (never less than 1 ×).
//! - RFC 2439-style flap dampening: each withdraw adds `penalty`; the penalty halves every
//!   `half_life`; at `suppress` re-announcing is suppressed until the penalty decays below
//!   `reuse`, or `max_suppress` has passed.
//! - Drain: withdraw now and stay withdrawn until undrained.
//! - A withdraw for health may be held back by the caller ([`HealthWithdraw::Held`]: the
//!   peer guard's veto, an input to the round): the route stays announced, nothing about
//!   it changes, and the next failing round asks again.
//!
//! Beside it, [`Degradation`] (a soft drain) changes only how an announced route is
//! preferred: degraded after `fall` failing rounds of the degrade checks, normal again
//! after `hold_down` of unbroken passing ones. While withdrawn there is no UPDATE to
//! save, so it follows the checks' latest word (see [`Degradation::follow`]).

use std::time::Duration;

/// A point in time, as a duration since any fixed origin (the agent uses a monotonic
/// clock; tests use a fake one).
pub(crate) type Time = Duration;

/// When the route may change: what the hysteresis decides with.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Passing rounds in a row before a withdrawn route returns.
    pub rise: u32,
    /// Failing rounds in a row before an announced route is withdrawn.
    pub fall: u32,
    /// Unbroken health needed after a withdraw before the route returns.
    pub hold_down: Duration,
    /// Flap dampening; `None`: off.
    pub dampening: Option<Dampening>,
}

/// RFC 2439-style flap dampening: a penalty per withdraw that decays over time.
#[derive(Clone, Debug, PartialEq)]
pub struct Dampening {
    /// Added at each withdraw.
    pub penalty: f64,
    /// The penalty halves every this long.
    pub half_life: Duration,
    /// Above this the route stays withdrawn.
    pub suppress: f64,
    /// Below this a suppressed route may return.
    pub reuse: f64,
    /// The longest a route stays suppressed.
    pub max_suppress: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Route {
    Announced,
    Withdrawn,
}

/// What the speaker must do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Announce,
    Withdraw,
}

/// Whether a round may withdraw for failing health (a drain always may): the peer
/// guard's verdict, decided before the round, never undone after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HealthWithdraw {
    Allowed,
    Held,
}

/// Why the machine holds its current state (for `status` and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Why {
    Starting,
    Healthy,
    Rising,
    Falling,
    Unhealthy,
    HoldDown,
    Suppressed,
    Drained,
}

#[derive(Clone, Debug)]
pub(crate) struct Machine {
    policy: Policy,
    route: Route,
    why: Why,
    ok_streak: u32,
    fail_streak: u32,
    withdrawn_at: Option<Time>,
    /// Start of the current run of healthy rounds.
    healthy_since: Option<Time>,
    penalty: f64,
    penalty_at: Time,
    suppressed_since: Option<Time>,
    drained: bool,
    transitions: u64,
}

impl Machine {
    pub(crate) fn new(policy: Policy) -> Self {
        Self {
            policy,
            route: Route::Withdrawn,
            why: Why::Starting,
            ok_streak: 0,
            fail_streak: 0,
            withdrawn_at: None,
            healthy_since: None,
            penalty: 0.0,
            penalty_at: Time::ZERO,
            suppressed_since: None,
            drained: false,
            transitions: 0,
        }
    }

    /// Feeds one round of local checks (`healthy` = every local check passed);
    /// `health_withdraw` says whether failing health may withdraw this round.
    pub(crate) fn observe(
        &mut self,
        now: Time,
        healthy: bool,
        health_withdraw: HealthWithdraw,
    ) -> Option<Change> {
        if healthy {
            self.ok_streak = self.ok_streak.saturating_add(1);
            self.fail_streak = 0;
            self.healthy_since.get_or_insert(now);
        } else {
            self.fail_streak = self.fail_streak.saturating_add(1);
            self.ok_streak = 0;
            self.healthy_since = None;
        }
        self.decide(now, health_withdraw)
    }

    /// Drain (withdraw and hold) or undrain. Health alone withdraws only in
    /// [`Machine::observe`], where the caller says whether it may.
    pub(crate) fn set_drained(&mut self, now: Time, drained: bool) -> Option<Change> {
        self.drained = drained;
        self.decide(now, HealthWithdraw::Held)
    }

    /// A reloaded policy: streaks, penalty, hold-down and route carry over, so a reload
    /// never moves the route by itself; the next round decides under the new rules.
    pub(crate) fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    pub(crate) fn route(&self) -> Route {
        self.route
    }

    pub(crate) fn why(&self) -> Why {
        self.why
    }

    pub(crate) fn transitions(&self) -> u64 {
        self.transitions
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The last `fall` rounds all failed.
    pub(crate) fn failing(&self) -> bool {
        self.fail_streak >= self.policy.fall
    }

    /// True when the next round decides a pending change (the agent re-checks faster).
    pub(crate) fn change_pending(&self) -> bool {
        match self.route {
            Route::Announced => self.fail_streak > 0,
            Route::Withdrawn => self.ok_streak > 0 && !self.drained,
        }
    }

    /// The decayed dampening penalty at `now`.
    pub(crate) fn penalty(&self, now: Time) -> f64 {
        match &self.policy.dampening {
            Some(d) => decay(
                self.penalty,
                now.saturating_sub(self.penalty_at),
                d.half_life,
            ),
            None => 0.0,
        }
    }

    pub(crate) fn suppressed(&self) -> bool {
        self.suppressed_since.is_some()
    }

    fn decide(&mut self, now: Time, health_withdraw: HealthWithdraw) -> Option<Change> {
        self.update_suppression(now);
        match self.route {
            Route::Announced => {
                self.why = if self.drained {
                    Why::Drained
                } else if self.fail_streak >= self.policy.fall {
                    Why::Unhealthy
                } else if self.fail_streak > 0 {
                    Why::Falling
                } else {
                    Why::Healthy
                };
                let withdraw = match self.why {
                    Why::Drained => true,
                    Why::Unhealthy => health_withdraw == HealthWithdraw::Allowed,
                    _ => false,
                };
                if !withdraw {
                    return None;
                }
                self.withdraw(now);
                Some(Change::Withdraw)
            }
            Route::Withdrawn => {
                self.why = if self.drained {
                    Why::Drained
                } else if self.ok_streak < self.policy.rise {
                    if self.ok_streak > 0 {
                        Why::Rising
                    } else {
                        Why::Unhealthy
                    }
                } else if self.held_down(now) {
                    Why::HoldDown
                } else if self.suppressed() {
                    Why::Suppressed
                } else {
                    self.route = Route::Announced;
                    self.transitions += 1;
                    self.why = Why::Healthy;
                    return Some(Change::Announce);
                };
                None
            }
        }
    }

    fn withdraw(&mut self, now: Time) {
        self.route = Route::Withdrawn;
        self.transitions += 1;
        self.withdrawn_at = Some(now);
        if let Some(d) = &self.policy.dampening {
            self.penalty = self.penalty(now) + d.penalty;
            self.penalty_at = now;
            if self.penalty >= d.suppress && self.suppressed_since.is_none() {
                self.suppressed_since = Some(now);
            }
        }
    }

    /// Still inside the hold-down: too soon after the withdraw, or health not yet
    /// unbroken for the (flap-stretched) hold-down.
    fn held_down(&self, now: Time) -> bool {
        let Some(withdrawn_at) = self.withdrawn_at else {
            return false;
        };
        let healthy_since = self.healthy_since.unwrap_or(now);
        now < withdrawn_at + self.policy.hold_down
            || now < healthy_since + self.policy.hold_down.mul_f64(self.flap_stretch(now))
    }

    /// How many withdraws' worth of penalty is still remembered, at least 1.
    fn flap_stretch(&self, now: Time) -> f64 {
        match &self.policy.dampening {
            Some(d) => (self.penalty(now) / d.penalty).max(1.0),
            None => 1.0,
        }
    }

    fn update_suppression(&mut self, now: Time) {
        let (Some(since), Some(d)) = (self.suppressed_since, &self.policy.dampening) else {
            return;
        };
        if self.penalty(now) < d.reuse || now >= since + d.max_suppress {
            self.suppressed_since = None;
        }
    }
}

/// Whether the degrade checks make the PoP less preferred, with the machine's `fall`
/// and `hold_down` as its hysteresis.
#[derive(Clone, Debug, Default)]
pub(crate) struct Degradation {
    degraded: bool,
    fail_streak: u32,
    passing_since: Option<Time>,
}

impl Degradation {
    /// Feeds one round of degrade checks; returns the new state when it changed.
    pub(crate) fn observe(&mut self, now: Time, ok: bool, policy: &Policy) -> Option<bool> {
        if ok {
            self.fail_streak = 0;
            self.passing_since.get_or_insert(now);
        } else {
            self.fail_streak = self.fail_streak.saturating_add(1);
            self.passing_since = None;
        }
        let degraded = if self.degraded {
            self.passing_since
                .is_none_or(|since| now < since + policy.hold_down)
        } else {
            self.fail_streak >= policy.fall
        };
        (degraded != self.degraded).then(|| {
            self.degraded = degraded;
            degraded
        })
    }

    /// Takes the round's word at once, without hysteresis (nothing is announced whose
    /// attributes could churn); returns the new state when it changed.
    pub(crate) fn follow(&mut self, now: Time, ok: bool) -> Option<bool> {
        let was = self.degraded;
        *self = Degradation {
            degraded: !ok,
            fail_streak: u32::from(!ok),
            passing_since: ok.then_some(now),
        };
        (was != self.degraded).then_some(self.degraded)
    }

    pub(crate) fn degraded(&self) -> bool {
        self.degraded
    }

    /// True when the next rounds may change the state (the agent re-checks faster).
    pub(crate) fn pending(&self) -> bool {
        if self.degraded {
            self.passing_since.is_some()
        } else {
            self.fail_streak > 0
        }
    }
}

fn decay(penalty: f64, elapsed: Duration, half_life: Duration) -> f64 {
    if half_life.is_zero() {
        return 0.0;
    }
    penalty * 0.5f64.powf(elapsed.as_secs_f64() / half_life.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::HealthWithdraw::{Allowed, Held};
    use super::*;

    fn ms(n: u64) -> Time {
        Duration::from_millis(n)
    }

    fn policy() -> Policy {
        Policy {
            rise: 3,
            fall: 2,
            hold_down: Duration::from_secs(5),
            dampening: Some(Dampening {
                penalty: 1000.0,
                half_life: Duration::from_secs(30),
                suppress: 2500.0,
                reuse: 750.0,
                max_suppress: Duration::from_secs(300),
            }),
        }
    }

    /// Feeds `results` at a fixed interval from `start`; returns the changes with times.
    fn run(m: &mut Machine, start: u64, step: u64, results: &[bool]) -> Vec<(u64, Change)> {
        let mut changes = Vec::new();
        for (i, ok) in results.iter().enumerate() {
            let t = start + i as u64 * step;
            if let Some(c) = m.observe(ms(t), *ok, Allowed) {
                changes.push((t, c));
            }
        }
        changes
    }

    #[test]
    fn starts_withdrawn_and_rises_after_rise_successes() {
        let mut m = Machine::new(policy());
        assert_eq!(m.route(), Route::Withdrawn);
        assert_eq!(run(&mut m, 0, 100, &[true, true]), vec![]);
        assert_eq!(m.why(), Why::Rising);
        assert_eq!(
            run(&mut m, 200, 100, &[true]),
            vec![(200, Change::Announce)]
        );
        assert_eq!(m.route(), Route::Announced);
    }

    #[test]
    fn a_new_policy_keeps_the_route_and_applies_from_the_next_round() {
        let mut m = Machine::new(policy());
        run(&mut m, 0, 100, &[true; 3]);
        assert_eq!(m.route(), Route::Announced);
        let mut stricter = policy();
        stricter.fall = 4;
        m.set_policy(stricter);
        assert_eq!(m.route(), Route::Announced);
        assert_eq!(run(&mut m, 300, 100, &[false; 3]), vec![]);
        assert_eq!(
            run(&mut m, 600, 100, &[false]),
            vec![(600, Change::Withdraw)]
        );
    }

    #[test]
    fn a_failure_streak_shorter_than_fall_does_not_withdraw() {
        let mut m = Machine::new(policy());
        run(&mut m, 0, 100, &[true; 3]);
        assert_eq!(run(&mut m, 300, 100, &[false, true, false, true]), vec![]);
        assert_eq!(m.route(), Route::Announced);
        assert_eq!(
            run(&mut m, 700, 100, &[false, false]),
            vec![(800, Change::Withdraw)]
        );
        assert_eq!(m.why(), Why::Unhealthy);
    }

    #[test]
    fn hold_down_delays_the_way_back() {
        let mut m = Machine::new(policy());
        run(&mut m, 0, 100, &[true; 3]);
        run(&mut m, 300, 100, &[false, false]); // withdrawn at 400
        assert_eq!(run(&mut m, 500, 100, &[true; 10]), vec![]);
        assert_eq!(m.why(), Why::HoldDown);
        // Healthy since 500: 5 s of unbroken health.
        assert_eq!(m.observe(ms(5_499), true, Allowed), None);
        assert_eq!(m.observe(ms(5_500), true, Allowed), Some(Change::Announce));
    }

    #[test]
    fn a_failure_during_the_hold_down_restarts_it() {
        let mut m = Machine::new(policy());
        run(&mut m, 0, 100, &[true; 3]);
        run(&mut m, 300, 100, &[false, false]); // withdrawn at 400
        assert_eq!(run(&mut m, 500, 100, &[true; 40]), vec![]);
        assert_eq!(m.observe(ms(4_500), false, Allowed), None);
        // 5 s after the withdraw, but healthy only since 4,600.
        assert_eq!(run(&mut m, 4_600, 100, &[true; 50]), vec![]);
        assert_eq!(m.why(), Why::HoldDown);
        assert_eq!(m.observe(ms(9_600), true, Allowed), Some(Change::Announce));
    }

    #[test]
    fn a_second_withdraw_soon_after_stretches_the_hold_down() {
        let mut m = Machine::new(policy());
        run(&mut m, 0, 100, &[true; 3]);
        run(&mut m, 300, 100, &[false, false]); // withdrawn at 400
        let back = run(&mut m, 500, 100, &[true; 51]);
        assert_eq!(back, vec![(5_500, Change::Announce)]);
        run(&mut m, 5_600, 100, &[false, false]); // withdrawn again at 5,700
        let stretch = m.penalty(ms(5_700)) / 1000.0;
        assert!((1.8..2.0).contains(&stretch), "{stretch}");
        let back = run(&mut m, 5_800, 100, &[true; 150]);
        let (at, change) = back[0];
        assert_eq!(change, Change::Announce);
        // Health from 5,800 must outlast 5 s × the penalty, which decays meanwhile:
        // about 7.9 s (one withdraw alone would need 5 s).
        assert!((13_500..14_000).contains(&at), "back at {at}");
    }

    #[test]
    fn repeated_flaps_are_suppressed_until_the_penalty_decays() {
        let mut m = Machine::new(policy());
        let mut t = 0;
        let mut withdraws = 0;
        // Three full flaps, each waiting out the hold-down.
        for _ in 0..3 {
            while m.route() == Route::Withdrawn && !m.suppressed() {
                m.observe(ms(t), true, Allowed);
                t += 100;
            }
            if m.suppressed() {
                break;
            }
            m.observe(ms(t), false, Allowed);
            t += 100;
            if m.observe(ms(t), false, Allowed) == Some(Change::Withdraw) {
                withdraws += 1;
            }
            t += 100;
        }
        assert_eq!(withdraws, 3);
        assert!(m.suppressed(), "penalty {}", m.penalty(ms(t)));
        // Healthy from now on: held back until 3000 decays below 750 (two half-lives).
        let mut announced_at = None;
        while announced_at.is_none() && t < 200_000 {
            if m.observe(ms(t), true, Allowed) == Some(Change::Announce) {
                announced_at = Some(t);
            }
            t += 1000;
        }
        let back = announced_at.expect("reuse threshold reached");
        assert!(m.penalty(ms(back)) < 750.0);
        assert!(
            back > 55_000,
            "suppressed about two half-lives, back at {back}"
        );
    }

    #[test]
    fn max_suppress_caps_suppression() {
        let mut p = policy();
        p.dampening.as_mut().unwrap().half_life = Duration::from_secs(3600);
        p.dampening.as_mut().unwrap().max_suppress = Duration::from_secs(60);
        p.hold_down = Duration::ZERO;
        let mut m = Machine::new(p);
        let mut t = 0;
        for _ in 0..3 {
            run(&mut m, t, 100, &[true; 3]);
            run(&mut m, t + 300, 100, &[false; 2]);
            t += 500;
        }
        assert!(m.suppressed());
        let since = t - 100;
        assert_eq!(run(&mut m, since + 58_800, 100, &[true; 3]), vec![]);
        assert_eq!(m.why(), Why::Suppressed);
        assert_eq!(
            m.observe(ms(since + 60_000), true, Allowed),
            Some(Change::Announce)
        );
    }

    #[test]
    fn drain_withdraws_now_and_holds() {
        let mut m = Machine::new(policy());
        run(&mut m, 0, 100, &[true; 3]);
        assert_eq!(m.set_drained(ms(300), true), Some(Change::Withdraw));
        assert_eq!(run(&mut m, 400, 100, &[true; 100]), vec![]);
        assert_eq!(m.why(), Why::Drained);
        // Undrain: the health streak is already there, but the hold-down still applies.
        assert_eq!(m.set_drained(ms(10_400), false), Some(Change::Announce));
    }

    #[test]
    fn a_held_health_withdraw_changes_nothing_and_the_next_round_asks_again() {
        let mut m = Machine::new(Policy {
            dampening: Some(Dampening {
                penalty: 1000.0,
                half_life: Duration::from_secs(60),
                suppress: 500.0,
                reuse: 250.0,
                max_suppress: Duration::from_secs(600),
            }),
            ..policy()
        });
        run(&mut m, 0, 100, &[true; 3]);
        let announced = m.transitions();
        assert_eq!(m.observe(ms(300), false, Held), None);
        assert_eq!(m.observe(ms(400), false, Held), None, "fall reached, held");
        assert_eq!(m.route(), Route::Announced);
        assert_eq!(m.why(), Why::Unhealthy);
        assert_eq!(m.transitions(), announced);
        assert_eq!(m.penalty(ms(400)), 0.0);
        assert!(
            !m.suppressed(),
            "a withdraw that did not happen suppresses nothing"
        );
        assert_eq!(m.observe(ms(500), false, Allowed), Some(Change::Withdraw));
        assert!(m.suppressed());
    }

    #[test]
    fn a_drain_is_never_held() {
        let mut m = Machine::new(policy());
        run(&mut m, 0, 100, &[true; 3]);
        m.observe(ms(300), false, Held);
        assert_eq!(m.set_drained(ms(400), true), Some(Change::Withdraw));
        assert_eq!(m.why(), Why::Drained);
    }

    /// Jittered 1 Hz / 50 % flapping for 60 s (half-periods 0.25–0.75 s), checks every
    /// 100 ms: at most two route changes.
    #[test]
    fn jittered_flapping_for_a_minute_makes_at_most_two_changes() {
        let mut rng = 0x2545F4914F6CDD1Du64;
        for trial in 0..50 {
            let mut p = policy();
            p.rise = 10;
            p.fall = 3;
            let mut m = Machine::new(p);
            // Healthy and announced first.
            run(&mut m, 0, 100, &[true; 10]);
            let mut edges = Vec::new();
            let mut t = 1000u64;
            let mut up = true;
            while t < 61_000 {
                let half = between(&mut rng, 250, 750);
                edges.push((t, up));
                t += half;
                up = !up;
            }
            let mut changes = 0;
            let mut t = 1000;
            while t < 61_000 {
                let healthy = edges.iter().rev().find(|(at, _)| *at <= t).unwrap().1;
                changes += m.observe(ms(t), healthy, Allowed).is_some() as u32;
                t += 100;
            }
            assert!(changes <= 2, "trial {trial}: {changes} changes");
        }
    }

    /// Short failures (0.1–1.5 s) between healthy stretches of 1–4 s, for a minute,
    /// checked at the agent's default intervals and policy: the first real failure is
    /// withdrawn within 1 s, and the route changes at most twice.
    #[test]
    fn irregular_flapping_for_a_minute_makes_at_most_two_changes() {
        let config = crate::config::Settings::parse(AGENT_DEFAULTS).unwrap();
        let mut rng = 0x9E3779B97F4A7C15u64;
        for trial in 0..200 {
            let mut m = Machine::new(config.policy.clone());
            let mut edges = vec![(0u64, true)];
            let mut t = 10_000;
            while t < 70_000 {
                edges.push((t, false));
                t += between(&mut rng, 100, 1_500);
                edges.push((t, true));
                t += between(&mut rng, 1_000, 4_000);
            }
            let health = |t: u64| edges.iter().rev().find(|(at, _)| *at <= t).unwrap().1;
            let (mut t, mut changes, mut first_withdraw) = (0u64, 0, None);
            while t < 70_000 {
                if let Some(change) = m.observe(ms(t), health(t), Allowed) {
                    if t >= 10_000 {
                        changes += 1;
                    }
                    if change == Change::Withdraw && first_withdraw.is_none() {
                        first_withdraw = Some(t);
                    }
                }
                let step = if m.change_pending() {
                    config.fast_interval
                } else {
                    config.interval
                };
                t += step.as_millis() as u64;
            }
            assert!(changes <= 2, "trial {trial}: {changes} changes");
            // The first failure that lasts `fall` fast rounds past one interval.
            let lasting = edges
                .windows(2)
                .find(|w| !w[0].1 && w[1].0 - w[0].0 >= 800)
                .map(|w| w[0].0);
            if let Some(down) = lasting {
                assert!(
                    first_withdraw.is_some_and(|at| at <= down + 1_000),
                    "trial {trial}: down at {down}, first withdraw {first_withdraw:?}"
                );
            }
        }
    }

    #[test]
    fn degradation_follows_fall_and_leaves_after_unbroken_hold_down() {
        let p = policy();
        let mut d = Degradation::default();
        assert_eq!(d.observe(ms(0), false, &p), None);
        assert!(d.pending());
        assert_eq!(d.observe(ms(100), false, &p), Some(true));
        assert!(d.degraded());
        // Passing again: 5 s of it, restarted by a failure.
        assert_eq!(d.observe(ms(200), true, &p), None);
        assert_eq!(d.observe(ms(3_000), false, &p), None);
        assert_eq!(d.observe(ms(3_100), true, &p), None);
        assert_eq!(d.observe(ms(8_000), true, &p), None);
        assert_eq!(d.observe(ms(8_100), true, &p), Some(false));
        assert!(!d.pending());
        // A single failure is not enough (fall 2).
        assert_eq!(d.observe(ms(8_200), false, &p), None);
        assert_eq!(d.observe(ms(8_300), true, &p), None);
        assert!(!d.degraded());
        // Following: at once, both ways.
        assert_eq!(d.follow(ms(8_400), false), Some(true));
        assert_eq!(d.follow(ms(8_500), true), Some(false));
        assert_eq!(d.follow(ms(8_600), true), None);
    }

    /// A seeded xorshift draw in `low..=high`.
    fn between(state: &mut u64, low: u64, high: u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        low + *state % (high - low + 1)
    }

    /// The agent's defaults: everything optional left out.
    const AGENT_DEFAULTS: &str = r#"
pop: fra1
prefixes: ["192.0.2.10/32"]
state_dir: /var/lib/bgp-agent
admin_listen: 127.0.0.1:9181
checks: [{ name: edge, kind: http, url: "http://127.0.0.1:9180/readyz" }]
speaker: { kind: bird, include_file: /run/bgp-agent/anycast.conf, socket: /run/bird/bird.ctl }
"#;

    proptest! {
        /// Whatever the sequence, the route is never announced while the last `fall`
        /// rounds all failed, nor while drained.
        #[test]
        fn never_announced_while_failing_beyond_fall(
            rounds in proptest::collection::vec((any::<bool>(), 0u64..400, proptest::option::of(any::<bool>())), 1..300)
        ) {
            let p = policy();
            let fall = p.fall as usize;
            let mut m = Machine::new(p);
            let mut t = 0;
            let mut history = Vec::new();
            let mut drained = false;
            for (healthy, step, drain) in rounds {
                t += step;
                if let Some(d) = drain.filter(|_| step % 7 == 0) {
                    drained = d;
                    m.set_drained(ms(t), d);
                }
                m.observe(ms(t), healthy, Allowed);
                history.push(healthy);
                let failing = history.len() >= fall && history[history.len() - fall..].iter().all(|ok| !ok);
                if failing || drained {
                    prop_assert_eq!(m.route(), Route::Withdrawn);
                }
            }
        }
    }
}
