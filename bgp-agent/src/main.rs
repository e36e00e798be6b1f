use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

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
    /// Run the agent (standalone for BIRD, or as an ExaBGP `process`).
    Run {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a config file.
    CheckConfig {
        #[arg(long, short)]
        config: PathBuf,
    },
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
    // stdout belongs to ExaBGP's process API: logs go to stderr.
    edge_kit::logging::init();
    edge_kit::panic::exit_on_panic();
    let cli = Cli::parse();
    if matches!(cli.command, Command::Run { .. })
        && let Err(e) = edge_kit::signals::hold()
    {
        eprintln!("bgp-agent: cannot hold signals during start-up: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = match cli.command {
        Command::Run { config: path } => {
            load(&path).and_then(|config| runtime.block_on(bgp_agent::agent::run(path, config)))
        }
        Command::CheckConfig { config } => {
            load(&config).map(|c| println!("{}: ok ({} checks)", config.display(), c.checks.len()))
        }
        Command::Status { config } => load(&config).and_then(|c| {
            let url = format!("http://{}/status", c.admin_listen);
            runtime
                .block_on(bgp_agent::checks::fetch(&url))
                .map(|body| println!("{body}"))
                .map_err(anyhow::Error::msg)
        }),
        Command::Drain { config } => {
            load(&config).and_then(|c| runtime.block_on(set_drain(&c, true)))
        }
        Command::Undrain { config } => {
            load(&config).and_then(|c| runtime.block_on(set_drain(&c, false)))
        }
        Command::Withdraw { config } => load(&config).and_then(|c| {
            runtime.block_on(bgp_agent::speaker::withdraw_out_of_band(&c))?;
            println!("withdrawn: {} prefixes", c.prefixes.len());
            Ok(())
        }),
    };
    // The ExaBGP speaker reads stdin on a blocking thread that never returns by itself:
    // do not let it hold the process after the agent is done.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
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
        if let Ok(body) = bgp_agent::checks::fetch(&url).await
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
