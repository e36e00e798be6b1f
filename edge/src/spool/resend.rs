//! What operators queue in the spool directory for the running edge to store again:
//! dead letters to retry (`dead_letters`) and delivered events to replay (`replay`).
//! The edge passes over both queues every second until the spool closes; the commands
//! that queue never write a segment, so they are safe beside the writer.

use std::io;
use std::sync::Arc;
use std::time::Duration;

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

/// Why a pass over a queue ended early.
pub(super) enum Stop {
    Closed,
    Io(io::Error),
}

/// Runs file work on the blocking pool: a stalled disk must not hold a runtime thread.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T, Stop> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done.map_err(Stop::Io),
        Err(_) => Err(Stop::Closed),
    }
}
