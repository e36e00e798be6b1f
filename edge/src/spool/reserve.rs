//! A little space kept back in the spool directory. On a disk so full that not even the
//! checkpoint can be written, nothing the origin has confirmed could be deleted and the
//! spool would stay full for good: the reserve is given up so the checkpoint can be
//! written (and delivered segments deleted), and made again afterwards.

use std::path::Path;

/// Makes the reserve if it is missing (a no-op when it is there; silent when there is no
/// room for it yet: the next checkpoint tries again).
pub(super) fn ensure(dir: &Path) {
    let path = dir.join(FILE_NAME);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == RESERVE_BYTES as u64) {
        return;
    }
    // Written out, not sized: a sparse file would hold no space at all.
    if std::fs::write(&path, [0u8; RESERVE_BYTES]).is_err() {
        let _ = std::fs::remove_file(&path);
    }
}

/// Frees the reserve's space.
pub(super) fn release(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(FILE_NAME));
}

const FILE_NAME: &str = "reserve";
/// Room for a checkpoint's temp file many times over, on any block size.
const RESERVE_BYTES: usize = 256 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_released_and_made_again() {
        let dir = tempfile::tempdir().unwrap();
        ensure(dir.path());
        let path = dir.path().join(FILE_NAME);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            RESERVE_BYTES as u64
        );
        release(dir.path());
        assert!(!path.exists());
        std::fs::write(&path, b"short").unwrap();
        ensure(dir.path());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            RESERVE_BYTES as u64
        );
    }
}
