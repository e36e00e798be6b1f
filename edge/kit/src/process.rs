//! How every binary of the appliance starts and ends, so the three behave alike:
//! logs on stderr, a panic ends the process, a daemon holds its signals from the first
//! instruction, and an error becomes a message and exit status 1.
//!
//! ```no_run
//! # use std::process::ExitCode;
//! # #[derive(clap::Parser)] struct Cli;
//! fn main() -> ExitCode {
//!     let cli: Cli = edge_kit::process::start();
//!     edge_kit::process::run("tool", edge_kit::process::Command::TOOL, |_runtime| {
//!         Ok(ExitCode::SUCCESS)
//!     })
//! }
//! ```

use std::process::ExitCode;
use std::time::Duration;

use crate::{logging, panic, signals};

/// What a command of a binary is, and what runtime it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    daemon: bool,
    multi_thread: bool,
}

impl Command {
    /// A command that does its work and exits (`check-config`, `status`, …), on one
    /// thread; its error goes to stderr as it is.
    pub const TOOL: Command = Command {
        daemon: false,
        multi_thread: false,
    };

    /// A long-running service: SIGTERM, SIGINT and SIGHUP are held before anything
    /// else (see [`signals::hold`]), so one that arrives during start-up is handled,
    /// not fatal; its error goes to the log.
    pub const DAEMON: Command = Command {
        daemon: true,
        multi_thread: false,
    };

    /// The same command on tokio's multi-threaded runtime.
    pub const fn multi_threaded(self) -> Command {
        Command {
            multi_thread: true,
            ..self
        }
    }
}

/// The first step of every `main`: logs to stderr, the panic policy, then the command
/// line (clap exits on a bad one, with status 2).
pub fn start<C: clap::Parser>() -> C {
    logging::init();
    panic::exit_on_panic();
    C::parse()
}

/// Runs `body` as `command` says on a runtime built for it, and turns its outcome
/// into the exit status: the status it returns, or 1 with the error's whole chain.
pub fn run(
    name: &str,
    command: Command,
    body: impl FnOnce(&tokio::runtime::Runtime) -> anyhow::Result<ExitCode>,
) -> ExitCode {
    if command.daemon
        && let Err(e) = signals::hold()
    {
        eprintln!("{name}: cannot hold signals during start-up: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = if command.multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    }
    .enable_all()
    .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = body(&runtime);
    // A blocking thread that never returns by itself (the agent reads ExaBGP's stdin
    // on one) must not keep a finished process alive.
    runtime.shutdown_timeout(SHUTDOWN_WAIT);
    match outcome {
        Ok(status) => status,
        Err(e) if command.daemon => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` and a newline to stdout for a tool's output: a reader that went away
/// (`bgp-agent status | head`) ends the output quietly, where `println!` would panic
/// (Rust ignores SIGPIPE, so the write fails with EPIPE instead).
pub fn print_line(text: &str) -> std::io::Result<()> {
    write_line(std::io::stdout().lock(), text)
}

fn write_line(mut out: impl std::io::Write, text: &str) -> std::io::Result<()> {
    match writeln!(out, "{text}") {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written,
    }
}

/// How long the runtime's leftover tasks get once a command is done.
const SHUTDOWN_WAIT: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_ends_the_output_quietly_and_other_errors_stay() {
        struct Failing(std::io::ErrorKind);
        impl std::io::Write for Failing {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(self.0.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        assert!(write_line(Failing(std::io::ErrorKind::BrokenPipe), "x").is_ok());
        assert!(write_line(Failing(std::io::ErrorKind::StorageFull), "x").is_err());
        let mut written = Vec::new();
        write_line(&mut written, "status").unwrap();
        assert_eq!(written, b"status\n");
    }

    #[test]
    fn the_status_is_the_command_s_or_1_for_an_error() {
        let ran = run("t", Command::TOOL, |runtime| {
            Ok(ExitCode::from(runtime.block_on(async { 7 })))
        });
        assert_eq!(ran, ExitCode::from(7));
        let failed = run("t", Command::TOOL.multi_threaded(), |_| {
            Err(anyhow::anyhow!("cause").context("what failed"))
        });
        assert_eq!(failed, ExitCode::FAILURE);
    }
}
