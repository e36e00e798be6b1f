//! Since which record the origin's de-duplication key is scoped to the route. Releases
//! before it sent the bare key (`Nats-Msg-Id`, `Idempotency-Key`), so one route's
//! sender could pick ids that made the origin drop another route's events. A record the
//! old release stored may already have been published under its bare key (a PubAck lost
//! to the upgrade's restart): re-sent under a scoped key it would be stored twice. So
//! the first start of a release with scoped keys notes the first sequence number it
//! writes, and records before it keep their bare key.

use std::io;
use std::path::Path;

use super::checkpoint::{read_seq, write_seq};

/// The first sequence number whose origin key is route-scoped: the one noted in `dir`,
/// or `next_seq` (the first this start writes), noted durably now.
pub(crate) fn scoped_from(dir: &Path, next_seq: u64) -> io::Result<u64> {
    if let Some(from) = read_seq(dir, FILE_NAME)? {
        return Ok(from);
    }
    write_seq(dir, FILE_NAME, TEMP_NAME, next_seq)?;
    Ok(next_seq)
}

const FILE_NAME: &str = "origin-keys-scoped-from";
const TEMP_NAME: &str = "origin-keys-scoped-from.tmp";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_start_notes_its_first_sequence_and_later_starts_keep_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(scoped_from(dir.path(), 41).unwrap(), 41);
        assert_eq!(scoped_from(dir.path(), 90).unwrap(), 41);
        std::fs::write(dir.path().join(FILE_NAME), b"junk").unwrap();
        assert_eq!(
            scoped_from(dir.path(), 90).unwrap_err().kind(),
            io::ErrorKind::InvalidData,
            "a damaged note stops the start rather than guess"
        );
    }
}
