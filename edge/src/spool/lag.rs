//! How many bytes of the spool the origin has not confirmed yet, without remembering
//! every record: cumulative byte marks at least [`MARK_SPACING`] apart, so the figure is
//! exact once everything is delivered and otherwise errs high by less than one spacing.

use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(super) struct LagBytes {
    appended: u64,
    delivered: u64,
    last_seq: u64,
    /// Sequence number → bytes appended up to and including it.
    marks: BTreeMap<u64, u64>,
}

impl LagBytes {
    /// Records `bytes` appended with sequence numbers up to `last_seq`.
    pub(super) fn appended(&mut self, last_seq: u64, bytes: u64) {
        self.appended += bytes;
        self.last_seq = last_seq;
        let last_mark = self
            .marks
            .last_key_value()
            .map_or(self.delivered, |(_, total)| *total);
        if self.appended - last_mark >= MARK_SPACING {
            self.marks.insert(last_seq, self.appended);
        }
    }

    /// The origin confirmed everything up to `seq`.
    pub(super) fn delivered_through(&mut self, seq: u64) {
        if seq >= self.last_seq {
            self.delivered = self.appended;
            self.marks.clear();
            return;
        }
        if let Some((_, total)) = self.marks.range(..=seq).next_back() {
            self.delivered = self.delivered.max(*total);
        }
        self.marks = self.marks.split_off(&(seq + 1));
    }

    pub(super) fn lag(&self) -> u64 {
        self.appended - self.delivered
    }
}

pub(super) const MARK_SPACING: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_when_caught_up_and_never_low() {
        let mut lag = LagBytes::default();
        for seq in 1..=1000u64 {
            lag.appended(seq, 10_000);
        }
        assert_eq!(lag.lag(), 10_000_000);
        lag.delivered_through(500);
        let exact = 500 * 10_000;
        assert!(
            lag.lag() >= exact && lag.lag() < exact + MARK_SPACING,
            "{}",
            lag.lag()
        );
        lag.delivered_through(400);
        assert!(
            lag.lag() >= exact,
            "an older checkpoint never lowers the delivered count"
        );
        lag.delivered_through(1000);
        assert_eq!(lag.lag(), 0);
        lag.appended(1001, 7);
        assert_eq!(lag.lag(), 7);
    }

    #[test]
    fn marks_stay_few() {
        let mut lag = LagBytes::default();
        for seq in 1..=100_000u64 {
            lag.appended(seq, 1_000);
        }
        assert!(
            lag.marks.len() <= 100,
            "{} marks for 100 MB",
            lag.marks.len()
        );
    }
}
