//! When the writer commits: the group-commit policy, pure (counts and the clock in, a
//! decision out), so that it is tested with a scripted clock.
//!
//! With `max_batch_delay` set and concurrent senders (the last batch had company), a
//! batch waits to grow as large as the last one, up to that long and never longer than
//! half the last fdatasync took: on a slow disk every sender joins one batch and the
//! disk syncs once for all of them; where the disk is fast and the CPU the limit,
//! waiting for everyone would leave the core idle through each fdatasync, so a batch
//! takes what arrived while the previous one was syncing plus a short wait. A lone sender
//! is never delayed. With 0, batches form on their own while the previous fdatasync runs.

use std::time::{Duration, Instant};

/// The policy and what it learnt from the last batch.
#[derive(Debug)]
pub(super) struct GroupCommit {
    max_batch_delay: Duration,
    /// Appends in the last committed batch: how much company a sender has.
    last_batch_len: usize,
    /// How long the last fdatasync took.
    last_sync: Duration,
}

/// What the writer does with the commands queued so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Commit them now.
    Commit,
    /// Wait for more until `until`, taking at most `room` more.
    Wait { until: Instant, room: usize },
}

impl GroupCommit {
    pub(super) fn new(max_batch_delay: Duration) -> Self {
        Self {
            max_batch_delay,
            last_batch_len: 0,
            last_sync: Duration::ZERO,
        }
    }

    /// `queued` commands are taken; the first of them arrived at `started`.
    pub(super) fn next(&self, queued: usize, started: Instant, now: Instant) -> Next {
        let linger = self.max_batch_delay.min(self.last_sync / 2);
        if linger.is_zero() || self.last_batch_len <= 1 {
            return Next::Commit;
        }
        let until = started + linger;
        if queued >= self.last_batch_len.min(MAX_BATCH_RECORDS) || now >= until {
            return Next::Commit;
        }
        Next::Wait {
            until,
            room: MAX_BATCH_RECORDS - queued,
        }
    }

    /// A batch of `appends` was committed.
    pub(super) fn committed(&mut self, appends: usize) {
        self.last_batch_len = appends;
    }

    /// An fdatasync took `took`.
    pub(super) fn synced(&mut self, took: Duration) {
        self.last_sync = took;
    }
}

/// The most commands one batch takes.
pub(super) const MAX_BATCH_RECORDS: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    const DELAY: Duration = Duration::from_millis(2);

    /// After a batch of `batch` whose fdatasync took 10 ms (a slow disk).
    fn after(batch: usize, delay: Duration) -> GroupCommit {
        let mut policy = GroupCommit::new(delay);
        policy.committed(batch);
        policy.synced(Duration::from_millis(10));
        policy
    }

    #[test]
    fn a_lone_sender_and_a_zero_delay_never_wait() {
        let t0 = Instant::now();
        for last in [0, 1] {
            assert_eq!(after(last, DELAY).next(1, t0, t0), Next::Commit);
        }
        for last in [0, 1, 2, 64, 10_000] {
            assert_eq!(after(last, Duration::ZERO).next(1, t0, t0), Next::Commit);
        }
    }

    #[test]
    fn a_batch_waits_to_grow_as_large_as_the_last_and_no_longer() {
        let t0 = Instant::now();
        let policy = after(64, DELAY);
        for queued in 1..64 {
            for waited in [Duration::ZERO, Duration::from_micros(1999)] {
                assert_eq!(
                    policy.next(queued, t0, t0 + waited),
                    Next::Wait {
                        until: t0 + DELAY,
                        room: MAX_BATCH_RECORDS - queued
                    },
                    "{queued} queued after {waited:?}"
                );
            }
            assert_eq!(policy.next(queued, t0, t0 + DELAY), Next::Commit);
        }
        for queued in [64, 65, 4096] {
            assert_eq!(policy.next(queued, t0, t0), Next::Commit);
        }
    }

    #[test]
    fn a_batch_waits_at_most_half_the_last_fdatasync() {
        let t0 = Instant::now();
        let mut policy = after(64, DELAY);
        for (sync, linger) in [
            (Duration::from_micros(200), Duration::from_micros(100)),
            (Duration::from_millis(3), Duration::from_micros(1500)),
            (Duration::from_millis(30), DELAY),
        ] {
            policy.synced(sync);
            assert_eq!(
                policy.next(1, t0, t0),
                Next::Wait {
                    until: t0 + linger,
                    room: MAX_BATCH_RECORDS - 1
                },
                "after an fdatasync of {sync:?}"
            );
            assert_eq!(policy.next(1, t0, t0 + linger), Next::Commit);
        }
        policy.synced(Duration::ZERO);
        assert_eq!(
            policy.next(1, t0, t0),
            Next::Commit,
            "no fdatasync timed yet"
        );
    }

    #[test]
    fn the_target_never_exceeds_one_batch() {
        let t0 = Instant::now();
        let policy = after(100_000, DELAY);
        assert!(matches!(
            policy.next(MAX_BATCH_RECORDS - 1, t0, t0),
            Next::Wait { room: 1, .. }
        ));
        assert_eq!(policy.next(MAX_BATCH_RECORDS, t0, t0), Next::Commit);
    }

    #[test]
    fn the_policy_follows_the_last_batch() {
        let t0 = Instant::now();
        let mut policy = after(8, DELAY);
        assert!(matches!(policy.next(4, t0, t0), Next::Wait { .. }));
        policy.committed(1);
        assert_eq!(policy.next(4, t0, t0), Next::Commit);
        policy.committed(3);
        assert!(matches!(policy.next(2, t0, t0), Next::Wait { .. }));
        assert_eq!(policy.next(3, t0, t0), Next::Commit);
    }
}
