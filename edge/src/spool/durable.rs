//! Durable file operations of the spool directory (and of the provider lists beside it):
//! a file replaced whole or not at all, a removal, a new directory, each made durable by
//! an fsync of the directory that holds the change. Without that fsync a power cut can
//! undo a rename, a removal or a whole directory that was already relied on.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Makes `dir/name` hold `bytes`, whole or not at all, durably: written to `temp`,
/// fsynced, renamed over it, the directory fsynced.
pub(crate) fn replace_durably(dir: &Path, name: &str, temp: &str, bytes: &[u8]) -> io::Result<()> {
    let temp = dir.join(temp);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&temp, dir.join(name))?;
    sync_dir(dir)
}

/// Removes `path` (gone already is fine: a purge and a resend may meet) and makes that
/// durable.
pub(crate) fn remove_durably(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Gives `path` the owner of `like`: an operator runs the commands as root, and the edge
/// (its own user) must be able to remove what it resends from a queue.
pub(crate) fn owned_like(path: &Path, like: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let owner = fs::metadata(like)?;
    std::os::unix::fs::chown(path, Some(owner.uid()), Some(owner.gid()))
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `dir` and any missing parents durably: each new directory's entry is fsynced
/// in its parent, or a power cut could take the directory, and all that was fsynced into
/// it, away.
pub(crate) fn create_dir_durably(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durably(parent)?;
    }
    match fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    sync_dir(
        dir.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
}
