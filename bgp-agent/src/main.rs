//! `bgp-agent`: announces or withdraws the PoP's anycast prefix as its health says.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use edge_kit::cli::{ConfigFile, Daemon};

#[derive(Parser)]
#[command(
    name = "bgp-agent",
    version,
    about = "Announce or withdraw the anycast prefix, with hysteresis"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// `run` runs the agent (standalone for BIRD, or as an ExaBGP `process`).
    #[command(flatten)]
    Daemon(Daemon),
    /// Print the running agent's state, last checks and penalty.
    Status {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Withdraw now and hold (survives restarts); waits until the agent has withdrawn.
    Drain {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Lift a drain; the route returns once checks and hold-down allow.
    Undrain {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Withdraw the prefixes through the configured speaker without running the agent:
    /// what a supervisor runs after the agent exits (systemd `ExecStopPost=`), so a dead
    /// agent never leaves the route announced. BIRD only.
    Withdraw {
        #[arg(long, short)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    // stdout belongs to ExaBGP's process API: the kit logs to stderr.
    let cli: Cli = edge_kit::process::start();
    let kind = match &cli.command {
        Command::Daemon(daemon) => daemon.process(),
        _ => edge_kit::process::Command::TOOL,
    };
    edge_kit::process::run("bgp-agent", kind, |runtime| {
        match cli.command {
            Command::Daemon(Daemon::Run(ConfigFile { config: path })) => {
                let config = load(&path)?;
                runtime.block_on(bgp_agent::run(path, config))?;
            }
            Command::Daemon(Daemon::CheckConfig(ConfigFile { config })) => {
                let c = load(&config)?;
                println!("{}: ok ({} checks)", config.display(), c.checks.len());
            }
            Command::Status { config } => {
                let url = format!("http://{}/status", load(&config)?.admin_listen);
                let body = runtime
                    .block_on(bgp_agent::fetch(&url))
                    .map_err(anyhow::Error::msg)?;
                edge_kit::process::print_line(&body)?;
            }
            Command::Drain { config } => runtime.block_on(set_drain(&load(&config)?, true))?,
            Command::Undrain { config } => runtime.block_on(set_drain(&load(&config)?, false))?,
            Command::Withdraw { config } => {
                let c = load(&config)?;
                runtime.block_on(bgp_agent::withdraw_out_of_band(&c))?;
                println!("withdrawn: {} prefixes", c.prefixes.len());
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn load(path: &std::path::Path) -> anyhow::Result<bgp_agent::config::Settings> {
    bgp_agent::config::Settings::load(path).map_err(anyhow::Error::new)
}

/// Writes or removes the drain flag; on drain, waits (up to 30 s) for the running agent to
/// report the route withdrawn, so a deploy script can go on safely.
async fn set_drain(config: &bgp_agent::config::Settings, drain: bool) -> anyhow::Result<()> {
    let flag = config.drain_flag();
    std::fs::create_dir_all(&config.state_dir)?;
    if drain {
        std::fs::write(&flag, b"drained by operator\n")?;
    } else if flag.exists() {
        std::fs::remove_file(&flag)?;
    }
    if !drain {
        println!("undrained; the route returns once checks and hold-down allow");
        return Ok(());
    }
    let url = format!("http://{}/status", config.admin_listen);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(body) = bgp_agent::fetch(&url).await
            && let Ok(status) = serde_json::from_str::<serde_json::Value>(&body)
            && status["drained"] == true
            && status["route"] == "withdrawn"
        {
            println!("drained: route withdrawn");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!(
        "drain flag written, but the agent at {url} did not confirm a withdraw within 30 s"
    )
}
