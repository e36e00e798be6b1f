//! The command line every binary of the appliance starts with: `run` and `check-config`,
//! each taking the config file, flattened into the binary's own subcommands
//! (`#[command(flatten)]`), so the three are driven alike by systemd, Ansible and people.

use std::path::PathBuf;

use crate::process;

/// `run` and `check-config`.
#[derive(clap::Subcommand, Debug)]
pub enum Daemon {
    /// Run with the config file: SIGHUP re-reads it, SIGTERM stops (the edge drains
    /// first, the agent withdraws, edge-xdp detaches its program).
    Run(ConfigFile),
    /// Validate a config file: exit 0 when it is valid, 1 with every error otherwise.
    CheckConfig(ConfigFile),
}

/// The YAML config file a command reads.
#[derive(clap::Args, Debug)]
pub struct ConfigFile {
    /// Path of the YAML config file.
    #[arg(long, short)]
    pub config: PathBuf,
}

impl Daemon {
    /// What kind of process the command is: `run` a daemon, `check-config` a tool.
    pub fn process(&self) -> process::Command {
        match self {
            Daemon::Run(_) => process::Command::DAEMON,
            Daemon::CheckConfig(_) => process::Command::TOOL,
        }
    }
}
