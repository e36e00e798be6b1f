//! Whether the edge is alive, for systemd's watchdog (`WatchdogSec=` in edge.service).
//! The control plane's runtime pings only while every worker's runtime turns and the
//! spool's writer is not stuck in a write or fsync, so a hung edge (a worker spinning in
//! a future that never yields, a disk that stopped answering, a stopped process) is
//! killed and restarted, and recovery reads what is really on disk. `/readyz` fails
//! first for a stalled disk (`spool.stall_timeout`), so the PoP is withdrawn before the
//! restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use edge_kit::watchdog::Watchdog;

use crate::spool::Spool;

/// Each worker runtime's latest turn, written by a task on that runtime.
#[derive(Debug)]
pub(crate) struct Heartbeats {
    epoch: Instant,
    /// Milliseconds from `epoch` of each worker's latest beat.
    beats: Box<[AtomicU64]>,
}

impl Heartbeats {
    /// `workers` heartbeats, each beating at `now`.
    pub(crate) fn new(workers: usize, now: Instant) -> Self {
        Self {
            epoch: now,
            beats: (0..workers).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Worker `worker`'s runtime turned at `now`.
    pub(crate) fn beat(&self, worker: usize, now: Instant) {
        if let Some(beat) = self.beats.get(worker) {
            beat.store(self.millis(now), Ordering::Release);
        }
    }

    /// The worker silent longest at `now`, and for how long.
    pub(crate) fn stalest(&self, now: Instant) -> Option<(usize, Duration)> {
        let now = self.millis(now);
        self.beats
            .iter()
            .map(|beat| beat.load(Ordering::Acquire))
            .enumerate()
            .min_by_key(|(_, beat)| *beat)
            .map(|(worker, beat)| (worker, Duration::from_millis(now.saturating_sub(beat))))
    }

    fn millis(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }
}

/// Why the edge is not alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hang {
    /// A worker's runtime has not turned for this long.
    Worker { index: usize, silent: Duration },
    /// The spool's writer has waited this long for one write or fsync.
    Disk { waiting: Duration },
}

impl std::fmt::Display for Hang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hang::Worker { index, silent } => {
                write!(f, "worker {index}'s runtime has not turned for {silent:?}")
            }
            Hang::Disk { waiting } => {
                write!(f, "a spool write or fsync has not returned for {waiting:?}")
            }
        }
    }
}

/// Why the edge is hung at `now`, if it is: a worker silent past [`WORKER_SILENCE`],
/// or a disk stalled past `spool.stall_timeout` (`disk_waiting`).
pub(crate) fn hang(
    heartbeats: &Heartbeats,
    disk_waiting: Option<Duration>,
    now: Instant,
) -> Option<Hang> {
    if let Some(waiting) = disk_waiting {
        return Some(Hang::Disk { waiting });
    }
    heartbeats
        .stalest(now)
        .filter(|(_, silent)| *silent > WORKER_SILENCE)
        .map(|(index, silent)| Hang::Worker { index, silent })
}

/// Pings `watchdog` while the edge is alive; logs when it stops being so, and when it
/// is again. Runs until the process ends.
pub(crate) async fn feed(watchdog: Watchdog, heartbeats: Arc<Heartbeats>, spool: Arc<Spool>) {
    let mut hung = false;
    loop {
        let now = Instant::now();
        match hang(&heartbeats, spool.disk_stalled_for(now), now) {
            None => {
                if std::mem::take(&mut hung) {
                    tracing::info!("the edge makes progress again; pinging systemd's watchdog");
                }
                watchdog.alive();
            }
            Some(why) => {
                if !std::mem::replace(&mut hung, true) {
                    tracing::error!(%why, "the edge is hung: no more pings to systemd's watchdog, which restarts it past WatchdogSec");
                }
            }
        }
        tokio::time::sleep(watchdog.bound(CHECK_EVERY)).await;
    }
}

/// Runs on a worker's runtime until that runtime ends: its heartbeat.
pub(crate) async fn beat(heartbeats: Arc<Heartbeats>, worker: usize) {
    loop {
        heartbeats.beat(worker, Instant::now());
        tokio::time::sleep(BEAT_EVERY).await;
    }
}

/// How often a worker beats.
const BEAT_EVERY: Duration = Duration::from_secs(1);
/// A worker silent this long is hung: ten beats missed, which no scheduling delay on a
/// busy machine explains.
const WORKER_SILENCE: Duration = Duration::from_secs(10);
/// How often the edge judges itself (at least four times per watchdog period).
const CHECK_EVERY: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_beating_is_alive() {
        let start = Instant::now();
        let heartbeats = Heartbeats::new(2, start);
        let now = start + Duration::from_secs(30);
        heartbeats.beat(0, now - Duration::from_secs(1));
        heartbeats.beat(1, now - Duration::from_secs(2));
        assert_eq!(heartbeats.stalest(now), Some((1, Duration::from_secs(2))));
        assert_eq!(hang(&heartbeats, None, now), None);
    }

    #[test]
    fn a_worker_silent_past_the_bound_is_a_hang_and_named() {
        let start = Instant::now();
        let heartbeats = Heartbeats::new(3, start);
        let now = start + WORKER_SILENCE + Duration::from_millis(1);
        heartbeats.beat(0, now);
        heartbeats.beat(2, now);
        assert_eq!(
            hang(&heartbeats, None, now),
            Some(Hang::Worker {
                index: 1,
                silent: WORKER_SILENCE + Duration::from_millis(1)
            })
        );
        assert_eq!(
            hang(&heartbeats, None, start + WORKER_SILENCE),
            None,
            "at the bound itself, still alive"
        );
    }

    #[test]
    fn a_stalled_disk_is_a_hang_even_with_workers_beating() {
        let now = Instant::now();
        let heartbeats = Heartbeats::new(1, now);
        let waiting = Duration::from_secs(6);
        assert_eq!(
            hang(&heartbeats, Some(waiting), now),
            Some(Hang::Disk { waiting })
        );
    }

    #[test]
    fn a_beat_newer_than_the_check_counts_as_no_silence() {
        let start = Instant::now();
        let heartbeats = Heartbeats::new(1, start);
        heartbeats.beat(0, start + Duration::from_secs(5));
        assert_eq!(
            heartbeats.stalest(start + Duration::from_secs(1)),
            Some((0, Duration::ZERO))
        );
    }
}
