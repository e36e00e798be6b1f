//! Events the origin refused for good are kept, not dropped: one file per event under
//! `<spool.dir>/dead-letter/`, in the spool's record format, written durably.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::spool::checkpoint::sync_dir;
use crate::spool::record::Record;

pub fn store(spool_dir: &Path, record: &Record) -> std::io::Result<PathBuf> {
    let dir = spool_dir.join("dead-letter");
    fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{:020}.rec", record.seq));
    let mut frame = Vec::new();
    record
        .view()
        .encode_frame(&mut frame)
        .map_err(std::io::Error::other)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    file.write_all(&frame)?;
    file.sync_all()?;
    sync_dir(&dir)?;
    Ok(path)
}
