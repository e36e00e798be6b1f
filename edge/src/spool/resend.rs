//! What operators queue in the spool directory for the running edge to store again:
//! dead letters to retry (`dead_letters`) and delivered events to replay (`replay`).
//! The edge passes over both queues every second until the spool closes; the commands
//! that queue never write a segment, so they are safe beside the writer.

use std::sync::Arc;
use std::time::Duration;

use super::blocking::Stop;
use super::{Spool, dead_letters, replay};

/// Stores what is queued in the spool again, every `every`, until the spool closes.
pub async fn resend_queued(spool: Arc<Spool>, every: Duration) {
    while !spool.commands.is_closed() {
        for (queue, pass) in [
            (
                "dead letters queued for retry",
                dead_letters::resend_once(&spool).await,
            ),
            (
                "events queued for replay",
                replay::replay_once(&spool).await,
            ),
        ] {
            match pass {
                Ok(()) => {}
                Err(Stop::Closed) => return,
                Err(Stop::Io(e)) => {
                    tracing::error!(error = %e, queue, "cannot read a resend queue; trying again")
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}
