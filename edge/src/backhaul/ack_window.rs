//! What the delivery loop knows about the records it has read: which are still out, how
//! old the oldest of them is, and how far the origin has confirmed without a gap (the
//! only point the checkpoint may move to). Pure: no I/O, the time passed in.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug)]
pub(super) struct AckWindow {
    /// Every sequence number up to this one is confirmed.
    confirmed: u64,
    /// Where the checkpoint on disk stands.
    checkpointed: u64,
    /// Confirmed beyond `confirmed`, waiting for the gap before them to close.
    done: BTreeSet<u64>,
    /// Read and not confirmed: sequence number → when the edge received it (ms).
    outstanding: BTreeMap<u64, u64>,
}

impl AckWindow {
    /// A window after the checkpoint `checkpoint`.
    pub(super) fn new(checkpoint: u64) -> Self {
        Self {
            confirmed: checkpoint,
            checkpointed: checkpoint,
            done: BTreeSet::new(),
            outstanding: BTreeMap::new(),
        }
    }

    /// A record was read from the spool and goes out.
    pub(super) fn read(&mut self, seq: u64, received_ms: u64) {
        self.outstanding.insert(seq, received_ms);
    }

    /// The origin has `seq` (or it was kept as a dead letter).
    pub(super) fn finished(&mut self, seq: u64) {
        self.outstanding.remove(&seq);
        self.done.insert(seq);
        while self.done.remove(&(self.confirmed + 1)) {
            self.confirmed += 1;
        }
    }

    pub(super) fn confirmed(&self) -> u64 {
        self.confirmed
    }

    /// Durable records up to `durable_seq` the origin has not confirmed.
    pub(super) fn lag(&self, durable_seq: u64) -> u64 {
        durable_seq.saturating_sub(self.confirmed)
    }

    /// Age of the oldest record read but not confirmed; 0 when none is out.
    pub(super) fn oldest_age_ms(&self, now_ms: u64) -> u64 {
        // The lowest sequence number out was received first.
        self.outstanding
            .first_key_value()
            .map_or(0, |(_, received_ms)| now_ms.saturating_sub(*received_ms))
    }

    /// Where the checkpoint should move, if it is behind what is confirmed.
    pub(super) fn checkpoint_due(&self) -> Option<u64> {
        (self.confirmed > self.checkpointed).then_some(self.confirmed)
    }

    /// The checkpoint on disk now stands at `seq`.
    pub(super) fn checkpointed(&mut self, seq: u64) {
        self.checkpointed = self.checkpointed.max(seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirms_only_the_contiguous_prefix() {
        let mut window = AckWindow::new(10);
        for seq in 11..=15 {
            window.read(seq, 1_000 + seq);
        }
        window.finished(13);
        window.finished(12);
        assert_eq!(window.confirmed(), 10, "11 is still out");
        assert_eq!(window.checkpoint_due(), None);
        window.finished(11);
        assert_eq!(window.confirmed(), 13);
        assert_eq!(window.checkpoint_due(), Some(13));
        window.checkpointed(13);
        assert_eq!(window.checkpoint_due(), None);
        window.finished(15);
        window.finished(14);
        assert_eq!(window.confirmed(), 15);
        assert_eq!(window.lag(20), 5);
    }

    #[test]
    fn oldest_age_follows_what_is_still_out() {
        let mut window = AckWindow::new(0);
        assert_eq!(window.oldest_age_ms(5_000), 0, "nothing out");
        window.read(1, 1_000);
        window.read(2, 1_500);
        assert_eq!(window.oldest_age_ms(5_000), 4_000);
        window.finished(1);
        assert_eq!(window.oldest_age_ms(5_000), 3_500);
        window.finished(2);
        assert_eq!(window.oldest_age_ms(5_000), 0);
    }

    #[test]
    fn a_checkpoint_never_moves_back() {
        let mut window = AckWindow::new(5);
        window.read(6, 0);
        window.finished(6);
        window.checkpointed(6);
        window.checkpointed(3);
        assert_eq!(window.checkpoint_due(), None);
    }
}
