//! An operator's pause of the backhaul (`edge backhaul pause`): a note in the spool
//! directory, so that it outlives a restart and is set the same way whether the edge runs
//! or not. While it holds, the edge stores and acknowledges as always (the spool fills,
//! `/readyz` stays green up to the high-water mark) but starts no delivery.

use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::durable::{replace_durably, sync_dir};

/// A pause as the operator set it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackhaulPause {
    /// When it was set (Unix milliseconds).
    pub since_ms: u64,
    /// When it ends by itself; `None`: at `edge backhaul resume`.
    pub until_ms: Option<u64>,
    /// What the operator said.
    pub reason: String,
}

impl BackhaulPause {
    /// Whether deliveries are held at `now_ms`.
    pub fn holds(&self, now_ms: u64) -> bool {
        self.until_ms.is_none_or(|until| now_ms < until)
    }
}

/// Sets `pause` in `spool_dir`, durably (replacing one set before).
pub fn set(spool_dir: &Path, pause: &BackhaulPause) -> io::Result<()> {
    replace_durably(spool_dir, FILE_NAME, TEMP_NAME, &serde_json::to_vec(pause)?)
}

/// Lifts the pause in `spool_dir`, durably; whether one was set.
pub fn clear(spool_dir: &Path) -> io::Result<bool> {
    match fs::remove_file(spool_dir.join(FILE_NAME)) {
        Ok(()) => sync_dir(spool_dir).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The pause set in `spool_dir`, if any. A note that cannot be read is an error: the
/// edge then keeps the state it had, and says so.
pub fn read(spool_dir: &Path) -> io::Result<Option<BackhaulPause>> {
    match fs::read(spool_dir.join(FILE_NAME)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

const FILE_NAME: &str = "backhaul-paused";
const TEMP_NAME: &str = "backhaul-paused.tmp";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_set_read_lifted_and_ends_by_itself() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let pause = BackhaulPause {
            since_ms: 1_000,
            until_ms: Some(61_000),
            reason: "origin deploy".into(),
        };
        set(dir.path(), &pause).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(pause.clone()));
        assert!(pause.holds(60_999) && !pause.holds(61_000));
        assert!(
            BackhaulPause {
                until_ms: None,
                ..pause
            }
            .holds(u64::MAX)
        );
        assert!(clear(dir.path()).unwrap());
        assert!(!clear(dir.path()).unwrap());
        assert_eq!(read(dir.path()).unwrap(), None);
        fs::write(dir.path().join(FILE_NAME), b"{").unwrap();
        assert_eq!(
            read(dir.path()).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
