//! `<spool.dir>/quarantine/`: where spool bytes go that nothing will deliver from but
//! that must not be deleted: a segment that cannot be read, a delivered segment that
//! held damaged records, the bytes of a whole but damaged frame cut off the newest
//! segment. Each file has a `.why` note beside it. An operator (or `edge spool-verify`)
//! looks here (`edge quarantine list|show|export`); the edge never deletes from it.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use edge_kit::clock::unix_ms;

use super::durable::{create_dir_durably, sync_dir};
use super::record::Record;
use super::scan::{named_in_frames, named_without_header, scan_segment};

/// What a file in quarantine still holds.
#[derive(Debug, Default)]
pub struct Contents {
    /// Its whole records (each frame's check passed), in file order.
    pub records: Vec<Record>,
    /// Sequence numbers and event ids its damaged frames still name, unchecked.
    pub named: Vec<(u64, String)>,
    /// Why its frames cannot be checked at all (a segment header lost), if so.
    pub unreadable: Option<String>,
}

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
pub fn list(spool_dir: &Path) -> io::Result<Vec<(PathBuf, String)>> {
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

/// What the kept file `path` still holds. A segment (or dead letter) is read as the
/// spool reads one; a tail cut off a segment has no header to check its frames by, so
/// it only names what it held.
pub fn contents(path: &Path) -> io::Result<Contents> {
    let bytes = fs::read(path)?;
    let is_tail = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains(TAIL_MARK));
    if is_tail {
        return Ok(Contents {
            named: named_in_frames(&bytes),
            ..Contents::default()
        });
    }
    let scan = scan_segment(&bytes);
    if let Err(e) = &scan.format {
        return Ok(Contents {
            named: named_without_header(&bytes),
            unreadable: Some(e.to_string()),
            ..Contents::default()
        });
    }
    Ok(Contents {
        records: scan
            .records
            .iter()
            .map(|scanned| scanned.record.to_owned_record())
            .collect(),
        named: scan
            .damaged
            .iter()
            .chain(&scan.tail)
            .flat_map(|damage| damage.named.iter().cloned())
            .collect(),
        unreadable: None,
    })
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
/// In the name of a tail cut off a segment: `<segment>.tail-<offset>`.
pub(crate) const TAIL_MARK: &str = ".tail-";
const NOTE: &str = "why";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::record::tests::sample;

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

    /// A kept segment gives its whole records and names its damaged one; a cut tail and
    /// a segment without its header only name theirs.
    #[test]
    fn contents_are_the_whole_records_and_the_names_of_the_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let format = super::super::segments::new_segment_format().unwrap();
        let mut segment = format.header();
        let header_len = segment.len();
        let whole = sample(1, "evt-whole");
        whole.view().encode_frame(&format, &mut segment).unwrap();
        let tail_at = segment.len();
        sample(2, "evt-rotted")
            .view()
            .encode_frame(&format, &mut segment)
            .unwrap();
        let last = segment.len() - 1;
        segment[last] ^= 1;
        let path = dir.path().join("00000000000000000001.seg");
        fs::write(&path, &segment).unwrap();
        move_in(dir.path(), &path, "held damage").unwrap();
        keep(
            dir.path(),
            &format!("x.seg{TAIL_MARK}{tail_at}"),
            &segment[tail_at..],
            "cut",
        )
        .unwrap();
        let headless = dir.path().join("00000000000000000009.seg");
        // A frame after the first that checks under no seed the first gives: the seed
        // cannot be found again, nothing can be checked.
        let mut no_header = vec![0xee; header_len];
        no_header.extend_from_slice(&segment[tail_at..]);
        no_header.extend_from_slice(&[0x5a; 64]);
        fs::write(&headless, &no_header).unwrap();
        move_in(dir.path(), &headless, "unreadable header").unwrap();

        let kept = list(dir.path()).unwrap();
        let found: Vec<Contents> = kept.iter().map(|(p, _)| contents(p).unwrap()).collect();
        assert_eq!(found[0].records, [whole]);
        assert_eq!(found[0].named, [(2, "evt-rotted".to_owned())]);
        assert!(
            found[1].records.is_empty() && found[1].unreadable.is_some(),
            "{:?}",
            found[1]
        );
        assert_eq!(found[1].named, [(2, "evt-rotted".to_owned())]);
        assert_eq!(found[2].named, [(2, "evt-rotted".to_owned())], "the tail");
        assert!(found[2].records.is_empty() && found[2].unreadable.is_none());
    }
}
