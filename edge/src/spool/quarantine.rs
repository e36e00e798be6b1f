//! `<spool.dir>/quarantine/`: where spool bytes go that nothing will deliver from but
//! that must not be deleted: a segment that cannot be read, a delivered segment that
//! held damaged records, the bytes of a whole but damaged frame cut off the newest
//! segment. Each file has a `.why` note beside it. An operator (or `edge spool-verify`)
//! looks here; the edge never deletes from it.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use edge_kit::clock::unix_ms;

use super::checkpoint::{create_dir_durably, sync_dir};

/// Moves `path` (a file in the spool directory) into quarantine, durably, with `why`.
pub(crate) fn move_in(spool_dir: &Path, path: &Path, why: &str) -> io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("segment");
    let to = free_name(spool_dir, name)?;
    fs::rename(path, &to)?;
    note(&to, why)?;
    sync_dir(to.parent().unwrap_or(spool_dir))?;
    sync_dir(spool_dir)
}

/// Keeps `bytes` in quarantine as `name`, durably, with `why`.
pub(crate) fn keep(spool_dir: &Path, name: &str, bytes: &[u8], why: &str) -> io::Result<()> {
    let to = free_name(spool_dir, name)?;
    let mut file = OpenOptions::new().write(true).create_new(true).open(&to)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    note(&to, why)?;
    sync_dir(to.parent().unwrap_or(spool_dir))
}

/// What is in quarantine: each kept file and its note.
pub(crate) fn list(spool_dir: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    let dir = spool_dir.join(DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut kept = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == NOTE) {
            continue;
        }
        let why = fs::read_to_string(note_path(&path)).unwrap_or_default();
        kept.push((path, why.trim().to_owned()));
    }
    kept.sort();
    Ok(kept)
}

/// A name in quarantine not taken yet: `name`, else `name.1`, `name.2`…
fn free_name(spool_dir: &Path, name: &str) -> io::Result<PathBuf> {
    let dir = spool_dir.join(DIR);
    create_dir_durably(&dir)?;
    let mut candidate = dir.join(name);
    let mut n = 0;
    while candidate.exists() {
        n += 1;
        candidate = dir.join(format!("{name}.{n}"));
    }
    Ok(candidate)
}

fn note(kept: &Path, why: &str) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(note_path(kept))?;
    writeln!(file, "{} unix_ms {}", why, unix_ms())?;
    file.sync_all()
}

fn note_path(kept: &Path) -> PathBuf {
    let mut name = kept.as_os_str().to_owned();
    name.push(".");
    name.push(NOTE);
    PathBuf::from(name)
}

pub(crate) const DIR: &str = "quarantine";
const NOTE: &str = "why";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_and_kept_files_stay_with_their_notes_and_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let segment = dir.path().join("00000000000000000001.seg");
        fs::write(&segment, b"unreadable").unwrap();
        move_in(dir.path(), &segment, "bad header").unwrap();
        assert!(!segment.exists());
        fs::write(&segment, b"again").unwrap();
        move_in(dir.path(), &segment, "bad header, again").unwrap();
        keep(dir.path(), "tail-1", b"cut", "a damaged last frame").unwrap();
        let kept = list(dir.path()).unwrap();
        let names: Vec<String> = kept
            .iter()
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "00000000000000000001.seg",
                "00000000000000000001.seg.1",
                "tail-1"
            ]
        );
        assert!(kept[1].1.starts_with("bad header, again"), "{kept:?}");
        assert_eq!(fs::read(&kept[2].0).unwrap(), b"cut");
    }
}
