//! An edge-wide budget of request body bytes in memory: what bodies being read, verified
//! and stored may hold at once. A request holds the most its body can be (its declared
//! length, or its route's `max_body`) from before the first byte is read until it is
//! answered; one that finds no room is refused before reading (503), so 500 slow
//! uploaders of 1 MiB cannot make the edge hold 500 MiB. One source (an IPv4 address, an
//! IPv6 /64) may hold at most [`SOURCE_SHARE`] of the budget, so a single sender of
//! large slow bodies leaves the rest to everyone else; trusted sources (provider
//! egress ranges, many senders behind few addresses) have no share of their own. Pure
//! bookkeeping, under the admission state's lock.

use std::collections::HashMap;

use super::rate_limit::Source;

#[derive(Debug)]
pub(crate) struct BodyBytes {
    limit: u64,
    held: u64,
    by_source: HashMap<Source, u64>,
}

/// Why a body found no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoRoom {
    /// Every body together would pass the budget.
    Total,
    /// This source's bodies would pass its share.
    Source,
}

impl BodyBytes {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            limit,
            held: 0,
            by_source: HashMap::new(),
        }
    }

    /// A reload's budget; what is held stays held.
    pub(crate) fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    /// Holds `bytes` for a body from `source` (`trusted`: no share of its own).
    pub(crate) fn hold(&mut self, source: Source, trusted: bool, bytes: u64) -> Result<(), NoRoom> {
        if self.held + bytes > self.limit {
            return Err(NoRoom::Total);
        }
        let of_source = self.by_source.get(&source).copied().unwrap_or(0);
        if !trusted && of_source + bytes > self.limit / SOURCE_SHARE {
            return Err(NoRoom::Source);
        }
        self.held += bytes;
        *self.by_source.entry(source).or_default() += bytes;
        Ok(())
    }

    /// Gives back what [`BodyBytes::hold`] took.
    pub(crate) fn release(&mut self, source: Source, bytes: u64) {
        self.held -= bytes;
        if let Some(held) = self.by_source.get_mut(&source) {
            *held -= bytes;
            if *held == 0 {
                self.by_source.remove(&source);
            }
        }
    }

    pub(crate) fn held(&self) -> u64 {
        self.held
    }
}

/// One source may hold this fraction of the budget (its denominator).
pub(crate) const SOURCE_SHARE: u64 = 8;

#[cfg(test)]
mod tests {
    use super::*;

    fn source(i: u8) -> Source {
        Source::of(std::net::IpAddr::from([198, 51, 100, i]))
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn one_source_holds_its_share_and_all_together_the_budget() {
        let mut bodies = BodyBytes::new(64 * MIB);
        for _ in 0..8 {
            bodies.hold(source(1), false, MIB).unwrap();
        }
        assert_eq!(bodies.hold(source(1), false, MIB), Err(NoRoom::Source));
        for i in 2..=8 {
            for _ in 0..8 {
                bodies.hold(source(i), false, MIB).unwrap();
            }
        }
        assert_eq!(bodies.held(), 64 * MIB);
        assert_eq!(bodies.hold(source(9), false, 1), Err(NoRoom::Total));
        assert_eq!(
            bodies.hold(source(9), true, 1),
            Err(NoRoom::Total),
            "trusted too"
        );
        bodies.release(source(3), MIB);
        bodies.hold(source(9), false, MIB).unwrap();
        assert_eq!(bodies.held(), 64 * MIB);
    }

    #[test]
    fn trusted_sources_have_no_share_and_release_forgets_a_source() {
        let mut bodies = BodyBytes::new(16 * MIB);
        for _ in 0..16 {
            bodies.hold(source(1), true, MIB).unwrap();
        }
        for _ in 0..16 {
            bodies.release(source(1), MIB);
        }
        assert_eq!(bodies.held(), 0);
        assert!(bodies.by_source.is_empty());
        bodies.set_limit(8 * MIB);
        assert_eq!(bodies.hold(source(2), false, 2 * MIB), Err(NoRoom::Source));
        bodies.hold(source(2), false, MIB).unwrap();
    }
}
