//! A spool directory's segment files: their names, their list, and the format a new
//! one is written in.

use std::path::{Path, PathBuf};

use super::record;

/// The format of a new segment (or dead letter): version 2 with a random seed.
pub(crate) fn new_segment_format() -> std::io::Result<record::SegmentFormat> {
    let mut seed = [0u8; 4];
    aws_lc_rs::rand::fill(&mut seed)
        .map_err(|_| std::io::Error::other("no randomness for a segment seed"))?;
    Ok(record::SegmentFormat::seeded(u32::from_le_bytes(seed)))
}

/// A segment's file: its first sequence number, zero-padded so names sort in order.
pub(super) fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{first_seq:020}.seg"))
}

/// Segment files in `dir` as (first sequence number, path), oldest first.
pub(super) fn list_segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let first = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".seg"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first) = first {
            segments.push((first, path));
        }
    }
    segments.sort();
    Ok(segments)
}
