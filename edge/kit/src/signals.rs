//! The process signals every binary handles the same way: SIGTERM (stop, gracefully),
//! SIGINT (stop now) and SIGHUP (reload).
//!
//! A daemon's `run` calls [`hold`] first: the three signals then stay pending, not fatal,
//! until [`Signals::new`] has handlers for them (a `systemctl reload` sent while the spool
//! recovers is applied once the process can, instead of killing it with SIGHUP's default
//! action).

use nix::sys::signal::{SigSet, SigmaskHow, Signal as Raw, pthread_sigmask};
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

/// Keeps SIGTERM, SIGINT and SIGHUP pending from now until [`Signals::new`]. Call it
/// before any thread exists: threads inherit the mask, and a signal goes only to a
/// thread that does not block it.
pub fn hold() -> std::io::Result<()> {
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&handled()), None).map_err(std::io::Error::from)
}

/// The three signals, listened for from [`Signals::new`] on.
pub struct Signals {
    terminate: Stream,
    interrupt: Stream,
    hangup: Option<Stream>,
}

/// SIGHUPs, for whoever reloads (see [`Signals::take_hangups`]).
pub struct Hangups(Stream);

impl Signals {
    /// Listens from now on, and lets through what [`hold`] kept pending; a signal that
    /// arrives before `next` is called is kept. The calling thread receives them from
    /// then on: call it from the task that lives as long as the process (`block_on`'s).
    pub fn new() -> std::io::Result<Self> {
        let signals = Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: Some(signal(SignalKind::hangup())?),
        };
        pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&handled()), None)
            .map_err(std::io::Error::from)?;
        Ok(signals)
    }

    /// The next signal (never `Hangup` once the hangups were taken).
    pub async fn next(&mut self) -> Signal {
        let hangup = async {
            match &mut self.hangup {
                Some(hangup) => hangup.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.terminate.recv() => Signal::Terminate,
            _ = self.interrupt.recv() => Signal::Interrupt,
            _ = hangup => Signal::Hangup,
        }
    }

    /// The next SIGTERM or SIGINT; SIGHUP is left to whoever reloads.
    pub async fn shutdown(&mut self) -> Signal {
        tokio::select! {
            _ = self.terminate.recv() => Signal::Terminate,
            _ = self.interrupt.recv() => Signal::Interrupt,
        }
    }

    /// Hands SIGHUP to whoever reloads, with any that came since [`Signals::new`].
    pub fn take_hangups(&mut self) -> Option<Hangups> {
        self.hangup.take().map(Hangups)
    }
}

impl Hangups {
    /// The next SIGHUP.
    pub async fn next(&mut self) {
        self.0.recv().await;
    }
}

fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [Raw::SIGTERM, Raw::SIGINT, Raw::SIGHUP] {
        set.add(signal);
    }
    set
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A SIGHUP raised while held is pending, not fatal, and is the first signal once
    /// the handlers exist.
    #[test]
    fn a_held_signal_is_handled_once_listened_for() {
        after_a_held_sighup(|| async {
            let mut signals = Signals::new().unwrap();
            let first = tokio::time::timeout(Duration::from_secs(5), signals.next()).await;
            assert_eq!(first.ok(), Some(Signal::Hangup));
        });
    }

    #[test]
    fn taken_hangups_get_what_came_before() {
        after_a_held_sighup(|| async {
            let mut signals = Signals::new().unwrap();
            let mut hangups = signals.take_hangups().unwrap();
            let got = tokio::time::timeout(Duration::from_secs(5), hangups.next()).await;
            assert!(got.is_ok(), "the SIGHUP sent before Signals::new was lost");
        });
    }

    /// Runs `check` on a runtime, on a thread of its own (the mask is per thread, and
    /// raise() aims at the caller) that held the signals and then got a SIGHUP.
    fn after_a_held_sighup<F: Future<Output = ()>>(check: impl FnOnce() -> F + Send + 'static) {
        std::thread::spawn(|| {
            hold().unwrap();
            nix::sys::signal::raise(Raw::SIGHUP).unwrap();
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(check());
        })
        .join()
        .unwrap();
    }
}
