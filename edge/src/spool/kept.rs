//! Bytes the spool keeps beside its segments, in `dead-letter/` and `quarantine/` (and
//! `replay/` while a replay is queued). The edge never deletes from the first two, so
//! they count toward `spool.max_bytes`: without that they could fill the disk unseen.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{dead_letters, quarantine, replay};

/// The bytes in each of the two directories, as last measured (plus dead letters stored
/// since).
#[derive(Debug, Default)]
pub(crate) struct KeptBytes {
    dead_letter: AtomicU64,
    quarantine: AtomicU64,
    replay_queued: AtomicU64,
}

impl KeptBytes {
    /// Measures both directories under `spool_dir`.
    pub(crate) fn measure(spool_dir: &Path) -> Self {
        let kept = Self::default();
        kept.remeasure(spool_dir);
        kept
    }

    /// Measures both directories again (an operator may have removed files).
    pub(crate) fn remeasure(&self, spool_dir: &Path) {
        let dead_letters = spool_dir.join(dead_letters::DIR);
        self.dead_letter.store(
            dir_bytes(&dead_letters) + dir_bytes(&dead_letters.join(dead_letters::RETRY_DIR)),
            Ordering::Release,
        );
        self.quarantine.store(
            dir_bytes(&spool_dir.join(quarantine::DIR)),
            Ordering::Release,
        );
        self.replay_queued
            .store(dir_bytes(&spool_dir.join(replay::DIR)), Ordering::Release);
    }

    /// A dead letter of `bytes` was stored.
    pub(crate) fn add_dead_letter(&self, bytes: u64) {
        self.dead_letter.fetch_add(bytes, Ordering::AcqRel);
    }

    pub(crate) fn dead_letter(&self) -> u64 {
        self.dead_letter.load(Ordering::Acquire)
    }

    pub(crate) fn quarantine(&self) -> u64 {
        self.quarantine.load(Ordering::Acquire)
    }

    pub(crate) fn total(&self) -> u64 {
        self.dead_letter() + self.quarantine() + self.replay_queued.load(Ordering::Acquire)
    }
}

/// The bytes of the files directly in `dir` (0 when it does not exist).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(|entry| entry.ok()?.metadata().ok())
            .filter(std::fs::Metadata::is_file)
            .map(|meta| meta.len())
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directories_are_measured_and_dead_letters_added() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(KeptBytes::measure(dir.path()).total(), 0);
        std::fs::create_dir(dir.path().join(dead_letters::DIR)).unwrap();
        std::fs::write(dir.path().join(dead_letters::DIR).join("1.rec"), [0; 100]).unwrap();
        quarantine::keep(dir.path(), "tail-1", &[0; 50], "test").unwrap();
        let kept = KeptBytes::measure(dir.path());
        assert_eq!(kept.dead_letter(), 100);
        assert!(kept.quarantine() > 50, "the tail and its note");
        kept.add_dead_letter(10);
        assert_eq!(kept.dead_letter(), 110);
        std::fs::remove_file(dir.path().join(dead_letters::DIR).join("1.rec")).unwrap();
        kept.remeasure(dir.path());
        assert_eq!(kept.dead_letter(), 0);
    }
}
