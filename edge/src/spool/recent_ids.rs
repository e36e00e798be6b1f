//! A bounded set of the most recent event ids of one route, for de-duplication: a
//! verified redelivery of an event that is already durable is acknowledged again and not
//! stored twice. Oldest ids fall out first once the window is full.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

#[derive(Debug)]
pub struct RecentIds {
    capacity: usize,
    order: VecDeque<Arc<str>>,
    seq_by_id: HashMap<Arc<str>, u64>,
}

impl RecentIds {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            seq_by_id: HashMap::new(),
        }
    }

    /// A new window size; shrinking forgets the oldest ids first.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.seq_by_id.remove(&oldest);
            }
        }
    }

    /// The sequence number the id was stored under, if it is still in the window.
    pub fn get(&self, id: &str) -> Option<u64> {
        self.seq_by_id.get(id).copied()
    }

    pub fn insert(&mut self, id: &str, seq: u64) {
        if self.seq_by_id.contains_key(id) {
            return;
        }
        if self.order.len() == self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.seq_by_id.remove(&oldest);
        }
        let id: Arc<str> = Arc::from(id);
        self.order.push_back(Arc::clone(&id));
        self.seq_by_id.insert(id, seq);
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
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
    fn reinserting_keeps_the_first_sequence() {
        let mut ids = RecentIds::new(2);
        ids.insert("a", 1);
        ids.insert("a", 9);
        assert_eq!((ids.get("a"), ids.len()), (Some(1), 1));
    }
}
