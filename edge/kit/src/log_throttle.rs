//! Log lines for events an attacker can repeat at will (refused connections, slow
//! bodies) go through a throttle; the metrics count every event.

use std::sync::atomic::{AtomicU64, Ordering};

/// Lets a log line through at most once a second.
#[derive(Debug, Default)]
pub struct LogThrottle {
    last_second: AtomicU64,
}

impl LogThrottle {
    /// Whether a line may go out now: true for the first call in each second.
    pub fn allow(&self) -> bool {
        let now = crate::clock::unix_ms() / 1000;
        self.last_second.swap(now, Ordering::Relaxed) != now
    }
}
