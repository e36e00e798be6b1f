//! Whether under-attack mode holds: the operator's mode, the SYN rate with hysteresis for
//! `auto`, and the open ranges' health. Pure: the clock and the measured rate come in as
//! arguments, so every path is tested without a packet.
//!
//! The shield fails open: with no usable provider list (missing, empty or older than
//! `max_age`) it stays down whatever the mode, because dropping every sender but the
//! management ranges would do the attacker's work.

use serde::Deserialize;

/// What the operator asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Never (the default).
    Off,
    /// Now, until turned off.
    On,
    /// While new SYNs to the served ports stay above a threshold.
    Auto,
}

impl Mode {
    /// As written in the config and the override file.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::On => "on",
            Mode::Auto => "auto",
        }
    }
}

/// The shield's verdict for this tick, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether only the open ranges reach the served ports.
    pub up: bool,
    /// Why.
    pub why: Why,
}

/// Why the shield is up or down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Mode `off`.
    Off,
    /// Mode `on`.
    Forced,
    /// Mode `auto`, the SYN rate crossed `syn_on` and has not stayed under `syn_off` for
    /// `hold` since.
    SynRate,
    /// Mode `auto`, calm.
    Calm,
    /// No usable provider list: down whatever the mode.
    FailOpen,
}

impl Why {
    /// The `why` label of the metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Off => "off",
            Why::Forced => "forced",
            Why::SynRate => "syn_rate",
            Why::Calm => "calm",
            Why::FailOpen => "fail_open",
        }
    }
}

/// The automatic mode's memory between ticks.
#[derive(Clone, Debug)]
pub struct Shield {
    syn_on: u64,
    syn_off: u64,
    hold_ms: u64,
    attacked: bool,
    calm_since_ms: Option<u64>,
}

impl Shield {
    /// Raised at `syn_on` new SYNs/s, lowered after `hold_ms` under `syn_off`.
    pub fn new(syn_on: u64, syn_off: u64, hold_ms: u64) -> Self {
        Self {
            syn_on,
            syn_off,
            hold_ms,
            attacked: false,
            calm_since_ms: None,
        }
    }

    /// The verdict at `now_ms` for `mode`, with `syn_rate` new SYNs/s measured since the
    /// last tick and whether any provider list is usable. The rate is tracked in every
    /// mode, so switching to `auto` mid-attack raises the shield at once.
    pub fn decide(&mut self, now_ms: u64, mode: Mode, syn_rate: u64, usable: bool) -> Verdict {
        if syn_rate >= self.syn_on {
            self.attacked = true;
            self.calm_since_ms = None;
        } else if self.attacked && syn_rate < self.syn_off {
            let since = *self.calm_since_ms.get_or_insert(now_ms);
            if now_ms.saturating_sub(since) >= self.hold_ms {
                self.attacked = false;
                self.calm_since_ms = None;
            }
        } else {
            self.calm_since_ms = None;
        }
        let (up, why) = match mode {
            _ if !usable => (false, Why::FailOpen),
            Mode::Off => (false, Why::Off),
            Mode::On => (true, Why::Forced),
            Mode::Auto if self.attacked => (true, Why::SynRate),
            Mode::Auto => (false, Why::Calm),
        };
        Verdict { up, why }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shield() -> Shield {
        Shield::new(1000, 100, 5_000)
    }

    #[test]
    fn auto_rises_at_the_threshold_and_falls_after_a_calm_hold() {
        let mut s = shield();
        let up = |v: Verdict| v.up;
        assert!(!up(s.decide(0, Mode::Auto, 999, true)));
        assert_eq!(
            s.decide(1_000, Mode::Auto, 1_000, true),
            Verdict {
                up: true,
                why: Why::SynRate
            }
        );
        // Between the thresholds: still attacked, and the calm clock does not run.
        assert!(up(s.decide(2_000, Mode::Auto, 500, true)));
        assert!(up(s.decide(3_000, Mode::Auto, 50, true)));
        assert!(up(s.decide(7_999, Mode::Auto, 50, true)));
        assert_eq!(
            s.decide(8_000, Mode::Auto, 50, true),
            Verdict {
                up: false,
                why: Why::Calm
            }
        );
    }

    #[test]
    fn a_burst_during_the_hold_starts_the_calm_over() {
        let mut s = shield();
        s.decide(0, Mode::Auto, 5_000, true);
        s.decide(1_000, Mode::Auto, 10, true);
        s.decide(4_000, Mode::Auto, 300, true);
        assert!(s.decide(5_000, Mode::Auto, 10, true).up);
        assert!(s.decide(9_999, Mode::Auto, 10, true).up);
        assert!(!s.decide(10_000, Mode::Auto, 10, true).up);
    }

    #[test]
    fn the_operator_decides_in_on_and_off_and_no_list_fails_open() {
        let mut s = shield();
        assert_eq!(s.decide(0, Mode::On, 0, true).why, Why::Forced);
        assert_eq!(
            s.decide(1, Mode::Off, 1_000_000, true),
            Verdict {
                up: false,
                why: Why::Off
            }
        );
        // The flood seen while off counts once auto is chosen.
        assert_eq!(s.decide(2, Mode::Auto, 0, true).why, Why::SynRate);
        for mode in [Mode::On, Mode::Auto] {
            assert_eq!(
                s.decide(3, mode, 1_000_000, false),
                Verdict {
                    up: false,
                    why: Why::FailOpen
                }
            );
        }
    }
}
