//! File work of the resend passes (`dead_letters`, `replay`), run on the blocking pool:
//! a stalled disk must not hold a runtime thread.

use std::io;

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
