//! The process signals every binary handles the same way: SIGTERM (stop, gracefully),
//! SIGINT (stop now) and SIGHUP (reload).

use tokio::signal::unix::{Signal as Stream, SignalKind, signal};

/// Which signal arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: drain, then stop.
    Terminate,
    /// SIGINT: stop now.
    Interrupt,
    /// SIGHUP: reload the config.
    Hangup,
}

/// The three signals, listened for from [`Signals::new`] on.
pub struct Signals {
    terminate: Stream,
    interrupt: Stream,
    hangup: Stream,
}

impl Signals {
    /// Listens from now on; a signal that arrives before `next` is called is kept.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal.
    pub async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.terminate.recv() => Signal::Terminate,
            _ = self.interrupt.recv() => Signal::Interrupt,
            _ = self.hangup.recv() => Signal::Hangup,
        }
    }

    /// The next SIGTERM or SIGINT; SIGHUP is left to whoever reloads.
    pub async fn shutdown(&mut self) -> Signal {
        tokio::select! {
            _ = self.terminate.recv() => Signal::Terminate,
            _ = self.interrupt.recv() => Signal::Interrupt,
        }
    }
}
