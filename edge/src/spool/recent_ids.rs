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
use std::hash::{BuildHasher, RandomState};

use crate::event::{id_of_key, mac_of_key};

#[derive(Debug)]
pub(crate) struct RecentIds {
    capacity: usize,
    prints: Printer,
    order: VecDeque<KeyPrint>,
    seq_by_key: HashMap<u128, u64, Hasher>,
    /// How many keys in the window carry each unsigned provider id.
    keys_by_unsigned_id: HashMap<u128, u32, Hasher>,
    /// For each signature beside an unsigned id in the window (its 128 bits): the
    /// sequence number of the first key that carried it, and how many keys carry it.
    by_mac: HashMap<u128, (u64, u32), Hasher>,
}

/// What the window knows of one key, read once per record.
#[derive(Debug)]
pub(crate) struct Lookup {
    /// The key as the window remembers it: [`RecentIds::remember`] takes it back.
    pub(crate) print: KeyPrint,
    /// The sequence number the key is durable under, if it is still in the window.
    pub(crate) stored_as: Option<u64>,
    /// Where the key is new but a key in the window carries the same signed body under
    /// another unsigned id: the sequence number that body is durable under.
    pub(crate) replay_of: Option<u64>,
    /// The key is new but a key in the window carries its unsigned provider id with
    /// another body.
    pub(crate) conflicts: bool,
}

/// A key reduced to what the window compares: 128-bit fingerprints under the window's
/// secret seeds (no string kept, hashed or freed again), and the signature's bits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyPrint {
    key: u128,
    unsigned: Option<UnsignedPrint>,
}

/// A key that carries a body's signature beside an unsigned provider id.
#[derive(Clone, Copy, Debug)]
struct UnsignedPrint {
    id: u128,
    mac: u128,
}

/// The tables' keys are already uniform fingerprints and signatures, so the cheapest
/// seeded hash does.
type Hasher = foldhash::fast::RandomState;

impl RecentIds {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            prints: Printer::new(),
            order: VecDeque::new(),
            seq_by_key: HashMap::default(),
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

    /// Everything the window knows of `key`.
    pub(crate) fn look_up(&self, key: &str) -> Lookup {
        let print = self.prints.of(key);
        let stored_as = self.seq_by_key.get(&print.key).copied();
        let new_unsigned = print.unsigned.filter(|_| stored_as.is_none());
        Lookup {
            print,
            stored_as,
            replay_of: new_unsigned.and_then(|u| self.by_mac.get(&u.mac).map(|&(seq, _)| seq)),
            conflicts: new_unsigned.is_some_and(|u| self.keys_by_unsigned_id.contains_key(&u.id)),
        }
    }

    /// Remembers `key` as durable under `seq`; a key already in the window keeps its
    /// first sequence number.
    pub(crate) fn insert(&mut self, key: &str, seq: u64) {
        let print = self.prints.of(key);
        self.remember(print, seq);
    }

    /// [`RecentIds::insert`] for a key this window has looked up.
    pub(crate) fn remember(&mut self, print: KeyPrint, seq: u64) {
        if self.seq_by_key.contains_key(&print.key) {
            return;
        }
        if self.order.len() == self.capacity {
            self.forget_oldest();
        }
        if let Some(unsigned) = print.unsigned {
            *self.keys_by_unsigned_id.entry(unsigned.id).or_default() += 1;
            self.by_mac.entry(unsigned.mac).or_insert((seq, 0)).1 += 1;
        }
        self.seq_by_key.insert(print.key, seq);
        self.order.push_back(print);
    }

    fn forget_oldest(&mut self) {
        let Some(oldest) = self.order.pop_front() else {
            return;
        };
        self.seq_by_key.remove(&oldest.key);
        let Some(unsigned) = oldest.unsigned else {
            return;
        };
        if let Some(keys) = self.keys_by_unsigned_id.get_mut(&unsigned.id) {
            *keys -= 1;
            if *keys == 0 {
                self.keys_by_unsigned_id.remove(&unsigned.id);
            }
        }
        if let Some((_, keys)) = self.by_mac.get_mut(&unsigned.mac) {
            *keys -= 1;
            if *keys == 0 {
                self.by_mac.remove(&unsigned.mac);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.order.len()
    }
}

/// Two independently keyed SipHash-1-3 instances (std's `RandomState`), one window's
/// own: 128 bits, so that two distinct keys in a window of millions share a print with
/// a probability near 2^-90, far below the disk's own error rate (a shared print would
/// acknowledge a new delivery as a duplicate); keyed, so nobody can aim for one.
#[derive(Debug)]
struct Printer([RandomState; 2]);

impl Printer {
    fn new() -> Self {
        Self([RandomState::new(), RandomState::new()])
    }

    fn of(&self, key: &str) -> KeyPrint {
        let unsigned = mac_bits(key).map(|mac| UnsignedPrint {
            id: self.hash(id_of_key(key)),
            mac,
        });
        KeyPrint {
            key: self.hash(key),
            unsigned,
        }
    }

    fn hash(&self, text: &str) -> u128 {
        let [high, low] = &self.0;
        (u128::from(high.hash_one(text)) << 64) | u128::from(low.hash_one(text))
    }
}

/// The signature beside an unsigned id in `key`, as a number (`mac_of_key` has checked
/// its 32 hex digits; decoding them as bytes is several times faster than by radix).
fn mac_bits(key: &str) -> Option<u128> {
    const_hex::decode_to_array(mac_of_key(key)?)
        .ok()
        .map(u128::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl RecentIds {
        fn get(&self, key: &str) -> Option<u64> {
            self.look_up(key).stored_as
        }

        fn conflicts(&self, key: &str) -> bool {
            self.look_up(key).conflicts
        }

        fn replay_of(&self, key: &str) -> Option<u64> {
            self.look_up(key).replay_of
        }
    }

    #[test]
    fn a_signature_reads_as_its_number() {
        let mac = "0123456789abcdefFEDCBA9876543210";
        assert_eq!(
            mac_bits(&format!("d-1#mac:{mac}")),
            u128::from_str_radix(mac, 16).ok()
        );
        assert_eq!(mac_bits("evt_1"), None);
    }

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
