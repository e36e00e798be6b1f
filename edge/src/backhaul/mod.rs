//! The backhaul: moves spooled events to the origin over connections kept open ahead of
//! time. It reads the spool in order from the checkpoint, keeps up to `max_in_flight`
//! deliveries outstanding, retries with backoff and jitter behind a circuit breaker, and
//! advances the checkpoint only through the contiguous prefix the origin acknowledged.
//! At-least-once: after a crash the unacknowledged tail is sent again, and the event id
//! travels with each message so the origin drops the duplicates.

mod ack_window;
mod breaker;
mod delivery;
mod error;
mod http;
mod metrics;
mod nats;
mod pace;
mod retry;
mod sink;

pub use delivery::run;
pub use error::DeliveryError;
pub use metrics::BackhaulMetrics;
pub use nats::create_stream;
pub use sink::Sink;
