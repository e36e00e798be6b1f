//! The backhaul's checkpoint: the highest sequence number delivered to the origin.
//! Written atomically (temp file, fsync, rename, fsync of the directory) so a crash
//! leaves either the old or the new value, never a mix. With it, the other sequence
//! numbers the spool notes the same way.

use std::fs;
use std::io;
use std::path::Path;

use super::durable::replace_durably;

pub(crate) const FILE_NAME: &str = "checkpoint";
const TEMP_NAME: &str = "checkpoint.tmp";
const ENCODED_LEN: usize = 12;

/// Reads the checkpoint; `Ok(None)` when there is none yet (nothing delivered).
pub(crate) fn read(dir: &Path) -> io::Result<Option<u64>> {
    read_seq(dir, FILE_NAME)
}

pub(crate) fn write(dir: &Path, seq: u64) -> io::Result<()> {
    write_seq(dir, FILE_NAME, TEMP_NAME, seq)
}

/// Reads a sequence number kept in the file `name` of `dir` (checksummed, written by
/// [`write_seq`]); `Ok(None)` when there is no such file.
pub(crate) fn read_seq(dir: &Path, name: &str) -> io::Result<Option<u64>> {
    match fs::read(dir.join(name)) {
        Ok(bytes) => decode(&bytes).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: corrupt", dir.join(name).display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `seq` to the file `name` of `dir` atomically, through `temp`.
pub(crate) fn write_seq(dir: &Path, name: &str, temp: &str, seq: u64) -> io::Result<()> {
    replace_durably(dir, name, temp, &encode(seq))
}

fn encode(seq: u64) -> [u8; ENCODED_LEN] {
    let mut out = [0; ENCODED_LEN];
    out[..8].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&out[..8]);
    out[8..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode(bytes: &[u8]) -> Option<u64> {
    let bytes: &[u8; ENCODED_LEN] = bytes.try_into().ok()?;
    let (value, crc) = bytes.split_first_chunk::<8>()?;
    let crc = u32::from_le_bytes(crc.try_into().ok()?);
    (crc32c::crc32c(value) == crc).then(|| u64::from_le_bytes(*value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_and_corruption() {
        assert_eq!(decode(&encode(77)), Some(77));
        let mut bad = encode(77);
        bad[0] ^= 1;
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&bad[..5]), None);
    }

    #[test]
    fn missing_then_written_then_replaced() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), 10).unwrap();
        write(dir.path(), 11).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(11));
        assert!(!dir.path().join(TEMP_NAME).exists());
        fs::write(dir.path().join(FILE_NAME), b"junk").unwrap();
        assert!(read(dir.path()).is_err());
    }
}
