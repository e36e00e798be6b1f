//! `edge-xdp`: loads the XDP filter onto the NIC and keeps its lists and counters.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use edge_kit::admin::Answer;
use edge_kit::cli::{ConfigFile, Daemon};
use edge_kit::signals::{Signal, Signals};
use edge_xdp::config::Settings;
use edge_xdp::filter::Filter;
use edge_xdp::metrics;
use edge_xdp::under_attack::{self, Status, shield::Mode as ShieldMode};
use parking_lot::Mutex;

#[derive(Parser)]
#[command(
    name = "edge-xdp",
    version,
    about = "Load the edge's XDP filter and export its counters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// `run` attaches the filter, fills its maps and serves /metrics; if this process
    /// dies the program is detached and traffic passes.
    #[command(flatten)]
    Daemon(Daemon),
    /// Print the running filter's counters as a table.
    Stats {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Set under-attack mode on the running filter (within a second) until `clear`
    /// returns it to the config's `under_attack.mode`: on, off, auto, clear.
    UnderAttack {
        #[arg(value_enum)]
        set: UnderAttackChoice,
        #[arg(long, short)]
        config: PathBuf,
    },
}

/// What `edge-xdp under-attack` sets.
#[derive(Clone, Copy, clap::ValueEnum)]
enum UnderAttackChoice {
    On,
    Off,
    Auto,
    /// Back to the config's mode.
    Clear,
}

fn main() -> ExitCode {
    let cli: Cli = edge_kit::process::start();
    let kind = match &cli.command {
        Command::Daemon(daemon) => daemon.process(),
        _ => edge_kit::process::Command::TOOL,
    };
    edge_kit::process::run("edge-xdp", kind, |runtime| {
        match cli.command {
            Command::Daemon(Daemon::Run(ConfigFile { config })) => runtime.block_on(run(config))?,
            Command::Daemon(Daemon::CheckConfig(ConfigFile { config })) => {
                let settings = Settings::load(&config)?;
                println!(
                    "{}: ok (protecting {} prefixes)",
                    config.display(),
                    settings.protected.len()
                );
            }
            Command::Stats { config } => runtime.block_on(stats(config))?,
            Command::UnderAttack { set, config } => {
                let settings = Settings::load(&config)?;
                let mode = match set {
                    UnderAttackChoice::On => Some(ShieldMode::On),
                    UnderAttackChoice::Off => Some(ShieldMode::Off),
                    UnderAttackChoice::Auto => Some(ShieldMode::Auto),
                    UnderAttackChoice::Clear => None,
                };
                let path = &settings.under_attack.override_file;
                under_attack::set_override(path, mode)
                    .with_context(|| path.display().to_string())?;
                println!(
                    "under-attack mode: {} (the running filter applies it within a second)",
                    mode.map_or("as configured", |m| m.as_str())
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn run(path: PathBuf) -> anyhow::Result<()> {
    let config = Settings::load(&path)?;
    let mut filter = Filter::load()?;
    filter.apply(&config)?;
    let mode = filter.attach(&config.interface, config.mode)?;
    if mode == "skb" {
        tracing::warn!(interface = %config.interface, "XDP runs in skb (generic) mode: filtering works, but after the kernel built an sk_buff");
    }
    tracing::info!(interface = %config.interface, mode, protected = config.protected.len(), allow = config.allowlist.len(), block = config.blocklist.len(), "XDP filter attached");
    let filter = Arc::new(Mutex::new(filter));
    let (settings_tx, settings_rx) = tokio::sync::watch::channel(config.clone());
    let status = Arc::new(Mutex::new(Status::default()));
    tokio::spawn(under_attack::keep(
        Arc::clone(&filter),
        settings_rx,
        Arc::clone(&status),
    ));
    let listener = tokio::net::TcpListener::bind(config.metrics_listen)
        .await
        .with_context(|| format!("metrics_listen {}", config.metrics_listen))?;
    tokio::spawn(serve_metrics(
        listener,
        Arc::clone(&filter),
        status,
        config.pop.clone(),
        metrics::attached(&config.pop, &config.interface, mode),
    ));

    let mut signals = Signals::new()?;
    while signals.next().await == Signal::Hangup {
        match Settings::load(&path) {
            Ok(new) if new.interface == config.interface => match filter.lock().apply(&new) {
                Ok(()) => {
                    tracing::info!(
                        allow = new.allowlist.len(),
                        block = new.blocklist.len(),
                        "reloaded lists and limits; program stays attached"
                    );
                    let _ = settings_tx.send(new);
                }
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "reload failed part-way; maps may hold a mix until the next reload")
                }
            },
            Ok(_) => tracing::error!("reload refused: changing the interface needs a restart"),
            Err(e) => tracing::error!("reload refused, keeping the running lists:\n{e}"),
        }
    }
    drop(filter);
    tracing::info!("XDP filter detached");
    Ok(())
}

/// `/metrics`: the program's counters, read from its per-CPU map at each scrape.
async fn serve_metrics(
    listener: tokio::net::TcpListener,
    filter: Arc<Mutex<Filter>>,
    status: Arc<Mutex<Status>>,
    pop: String,
    attached: String,
) {
    let mut registry = edge_kit::metrics::registry_for_pop(&pop);
    let edge_xdp = registry.sub_registry_with_prefix("edge_xdp");
    edge_kit::metrics::register_build_info(edge_xdp, env!("CARGO_PKG_VERSION"));
    let admin = edge_kit::admin::AdminMetrics::register(edge_xdp);
    edge_kit::admin::serve(listener, admin, move |path| match path {
        "/metrics" => {
            let mut body = match filter.lock().counters() {
                Ok(counters) => {
                    attached.clone()
                        + &metrics::render(&pop, &counters)
                        + &metrics::under_attack(&pop, &status.lock())
                }
                Err(e) => format!("{attached}# error reading counters: {e:#}\n"),
            };
            body += &edge_kit::metrics::encode(&registry);
            Answer::new(http::StatusCode::OK, PROMETHEUS_TEXT, body)
        }
        _ => Answer::not_found("/metrics"),
    })
    .await;
}

async fn stats(path: PathBuf) -> anyhow::Result<()> {
    let config = Settings::load(&path)?;
    let text = fetch_metrics(config.metrics_listen).await?;
    let counters = metrics::parse(&text);
    print!("{}", metrics::table(&counters));
    Ok(())
}

async fn fetch_metrics(addr: std::net::SocketAddr) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("no edge-xdp at {addr}"))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: edge-xdp\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default())
}

const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
