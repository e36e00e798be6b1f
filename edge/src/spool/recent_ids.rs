//! A bounded set of the most recent event keys of one route, for de-duplication: a
//! verified redelivery of an event that is already durable is acknowledged again and not
//! stored twice. Oldest keys fall out first once the window is full.
//!
//! Keys that carry a body digest beside an unsigned provider id (`crate::event`) are
//! also counted by that id, so that one id arriving with two different signed bodies is
//! seen (both are stored; the second is an id conflict), and by that digest, so that
//! one signed body arriving under a fresh id is seen: a replay of a captured delivery
//! (acknowledged, not stored).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::event::{id_of_key, mac_of_key};

#[derive(Debug)]
pub(crate) struct RecentIds {
    capacity: usize,
    order: VecDeque<Remembered>,
    seq_by_id: HashMap<Arc<str>, u64, Hasher>,
    /// How many keys in the window carry each unsigned provider id.
    keys_by_unsigned_id: HashMap<Arc<str>, u32, Hasher>,
    /// For each signature beside an unsigned id in the window (its 128 bits): the
    /// sequence number of the first key that carried it, and how many keys carry it.
    by_mac: HashMap<u128, (u64, u32), Hasher>,
}

/// Keys come only from verified deliveries and each table is seeded at random, so a
/// fast hash is enough (SipHash was a tenth of the writer's time per record).
type Hasher = foldhash::fast::RandomState;

/// A key in the window with what `insert` read from it, so that forgetting it (once
/// per record stored, when the window is full) parses nothing again.
#[derive(Debug)]
struct Remembered {
    key: Arc<str>,
    /// The unsigned provider id, where the key carries a body's signature beside one.
    unsigned_id: Option<Arc<str>>,
    mac: Option<u128>,
}

impl RecentIds {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            seq_by_id: HashMap::default(),
            keys_by_unsigned_id: HashMap::default(),
            by_mac: HashMap::default(),
        }
    }

    /// A new window size; shrinking forgets the oldest ids first.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
        while self.order.len() > self.capacity {
            self.forget_oldest();
        }
    }

    /// The sequence number the id was stored under, if it is still in the window.
    pub(crate) fn get(&self, id: &str) -> Option<u64> {
        self.seq_by_id.get(id).copied()
    }

    /// Whether a key in the window carries the same unsigned provider id as `key` but
    /// another body.
    pub(crate) fn conflicts(&self, key: &str) -> bool {
        let id = id_of_key(key);
        id.len() != key.len()
            && !self.seq_by_id.contains_key(key)
            && self.keys_by_unsigned_id.contains_key(id)
    }

    /// Where `key` is new but a key in the window carries the same signed body under
    /// another unsigned id: the sequence number that body is durable under.
    pub(crate) fn replay_of(&self, key: &str) -> Option<u64> {
        let mac = mac_bits(key)?;
        if self.seq_by_id.contains_key(key) {
            return None;
        }
        self.by_mac.get(&mac).map(|&(seq, _)| seq)
    }

    pub(crate) fn insert(&mut self, id: &str, seq: u64) {
        if self.seq_by_id.contains_key(id) {
            return;
        }
        if self.order.len() == self.capacity {
            self.forget_oldest();
        }
        let key: Arc<str> = Arc::from(id);
        let unsigned_id = id_of_key(&key);
        let unsigned_id = (unsigned_id.len() != key.len()).then(|| Arc::from(unsigned_id));
        if let Some(unsigned_id) = &unsigned_id {
            *self
                .keys_by_unsigned_id
                .entry(Arc::clone(unsigned_id))
                .or_default() += 1;
        }
        let mac = mac_bits(&key);
        if let Some(mac) = mac {
            self.by_mac.entry(mac).or_insert((seq, 0)).1 += 1;
        }
        self.seq_by_id.insert(Arc::clone(&key), seq);
        self.order.push_back(Remembered {
            key,
            unsigned_id,
            mac,
        });
    }

    fn forget_oldest(&mut self) {
        let Some(oldest) = self.order.pop_front() else {
            return;
        };
        self.seq_by_id.remove(&oldest.key);
        if let Some(unsigned_id) = oldest.unsigned_id
            && let Some(keys) = self.keys_by_unsigned_id.get_mut(&unsigned_id)
        {
            *keys -= 1;
            if *keys == 0 {
                self.keys_by_unsigned_id.remove(&unsigned_id);
            }
        }
        if let Some(mac) = oldest.mac
            && let Some((_, keys)) = self.by_mac.get_mut(&mac)
        {
            *keys -= 1;
            if *keys == 0 {
                self.by_mac.remove(&mac);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.order.len()
    }
}

/// The signature beside an unsigned id in `key`, as a number (no allocation to keep it).
fn mac_bits(key: &str) -> Option<u128> {
    u128::from_str_radix(mac_of_key(key)?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_forgets_the_oldest_first() {
        let mut ids = RecentIds::new(3);
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            ids.insert(id, i as u64);
        }
        ids.set_capacity(2);
        assert_eq!(
            (ids.get("a"), ids.get("b"), ids.get("c")),
            (None, Some(1), Some(2))
        );
        ids.insert("d", 3);
        assert_eq!((ids.get("b"), ids.get("d")), (None, Some(3)));
    }

    #[test]
    fn remembers_within_the_window_and_forgets_the_oldest() {
        let mut ids = RecentIds::new(3);
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            ids.insert(id, i as u64);
        }
        assert_eq!(ids.get("a"), Some(0));
        ids.insert("d", 3);
        assert_eq!(ids.get("a"), None);
        assert_eq!(
            (ids.get("b"), ids.get("d"), ids.len()),
            (Some(1), Some(3), 3)
        );
    }

    #[test]
    fn an_unsigned_id_with_another_body_is_a_conflict_until_it_leaves_the_window() {
        let key = |id: &str, mac: char| format!("{id}#mac:{}", mac.to_string().repeat(32));
        let mut ids = RecentIds::new(2);
        ids.insert(&key("d-1", 'a'), 1);
        assert!(
            !ids.conflicts(&key("d-1", 'a')),
            "the same body is a duplicate"
        );
        assert!(ids.conflicts(&key("d-1", 'b')));
        assert!(!ids.conflicts(&key("d-2", 'b')));
        assert!(!ids.conflicts("d-1"), "a signed id has no body beside it");
        ids.insert(&key("d-1", 'b'), 2);
        ids.insert("x", 3);
        assert!(
            ids.conflicts(&key("d-1", 'c')),
            "one of its keys is still in the window"
        );
        ids.insert("y", 4);
        assert!(
            !ids.conflicts(&key("d-1", 'c')),
            "both keys left the window"
        );
        assert!(ids.keys_by_unsigned_id.is_empty());
    }

    #[test]
    fn one_signed_body_under_a_fresh_id_is_a_replay_until_it_leaves_the_window() {
        let key = |id: &str, mac: char| format!("{id}#mac:{}", mac.to_string().repeat(32));
        let mut ids = RecentIds::new(2);
        ids.insert(&key("d-1", 'a'), 7);
        assert_eq!(
            ids.replay_of(&key("d-2", 'a')),
            Some(7),
            "same body, fresh id"
        );
        assert_eq!(
            ids.replay_of(&key("d-1", 'a')),
            None,
            "a redelivery is a duplicate"
        );
        assert_eq!(
            ids.replay_of(&key("d-1", 'b')),
            None,
            "another body: a conflict"
        );
        assert_eq!(
            ids.replay_of("evt_signed"),
            None,
            "signed ids cannot be replayed so"
        );
        ids.insert(&key("d-3", 'a'), 8);
        assert_eq!(
            ids.replay_of(&key("d-4", 'a')),
            Some(7),
            "the first copy's seq"
        );
        ids.insert("x", 9);
        assert_eq!(
            ids.replay_of(&key("d-4", 'a')),
            Some(7),
            "d-3 still carries it"
        );
        ids.insert("y", 10);
        assert_eq!(
            ids.replay_of(&key("d-4", 'a')),
            None,
            "both left the window"
        );
        assert!(ids.by_mac.is_empty());
    }

    #[test]
    fn reinserting_keeps_the_first_sequence() {
        let mut ids = RecentIds::new(2);
        ids.insert("a", 1);
        ids.insert("a", 9);
        assert_eq!((ids.get("a"), ids.len()), (Some(1), 1));
    }
}
