//! Log lines for events an attacker can repeat at will (refused connections, slow
//! bodies) go through a throttle; the metrics count every event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lets a log line through at most once a second.
#[derive(Debug, Default)]
pub struct LogThrottle {
    last_second: AtomicU64,
}

impl LogThrottle {
    pub fn allow(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        self.last_second.swap(now, Ordering::Relaxed) != now
    }
}
