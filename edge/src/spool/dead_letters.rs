//! Events the origin refused for good are kept, not dropped: one file per event under
//! `<spool.dir>/dead-letter/`, in the spool's record format, written durably.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::checkpoint::{create_dir_durably, sync_dir};
use super::record::Record;
use super::segments::new_segment_format;

/// Stores `record` as a dead letter; returns its path and its size on disk.
pub(super) fn store(spool_dir: &Path, record: &Record) -> std::io::Result<(PathBuf, u64)> {
    let dir = spool_dir.join(DIR);
    create_dir_durably(&dir)?;
    let path = dir.join(format!("{:020}.rec", record.seq));
    // A spool segment of one frame, readable by `edge spool-dump`.
    let format = new_segment_format()?;
    let mut frame = format.header();
    record
        .view()
        .encode_frame(&format, &mut frame)
        .map_err(std::io::Error::other)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    file.write_all(&frame)?;
    file.sync_all()?;
    sync_dir(&dir)?;
    Ok((path, frame.len() as u64))
}

/// Where events the origin refused for good are kept, under the spool directory.
pub(crate) const DIR: &str = "dead-letter";
