//! `lab up|down|status|exec|start|stop` run the topology as network namespaces and `lab
//! alerts|query` read its Prometheus; `lab send` and `lab origin` are the client's load
//! and the origin's count, meant to run inside the lab's nodes (`lab exec client -- lab
//! send ...`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lab::origin::OriginAccess;
use lab::prometheus::Prometheus;
use lab::regions;
use lab::runner::Lab;
use nix::sys::signal;

#[derive(Parser)]
#[command(
    version,
    about = "The webhook-edge lab: a containerlab topology run as network namespaces"
)]
struct Cli {
    /// The containerlab topology file.
    #[arg(long, global = true, default_value_os_t = lab::default_topology())]
    topology: PathBuf,
    /// Where node directories, pidfiles and logs live.
    #[arg(long, global = true, default_value = lab::DEFAULT_STATE_DIR)]
    state: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the topology, start every service, wait for BGP (removes an old lab first).
    Up {
        /// Nodes left to machines booted into their namespaces: links and addresses
        /// only, no services (e.g. `--machines pop-a,pop-b` for the Ansible test).
        #[arg(long, value_delimiter = ',')]
        machines: Vec<String>,
    },
    /// Stop every service and remove every namespace (idempotent).
    Down,
    /// Services, BGP sessions, the router's anycast next hops and the alerts the lab's
    /// Prometheus holds.
    Status,
    /// The lab Prometheus's alerts, pending and firing, one JSON line each.
    Alerts,
    /// A PromQL instant query at the lab's Prometheus; prints its result as JSON.
    Query { expr: String },
    /// Run a command inside a node.
    Exec {
        node: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Start one of a node's services.
    Start { node: String, service: String },
    /// Stop one of a node's services (SIGTERM; --kill for SIGKILL).
    Stop {
        node: String,
        service: String,
        #[arg(long)]
        kill: bool,
    },
    /// Send signed webhooks at a steady rate; one JSON line per outcome on stdout.
    Send(lab::sender::Plan),
    /// HTTP/2 load for the benchmarks: distinct signed deliveries, many streams per
    /// connection; prints one result line.
    H2Load(lab::h2_load::Plan),
    /// Be a WAN link between two interfaces of this namespace (run in a node with
    /// `lab exec` or as its service): every frame crosses after the delay, with jitter
    /// and loss, both ways.
    Wan {
        /// One end.
        a: String,
        /// The other end.
        b: String,
        /// One-way delay.
        #[arg(long, value_parser = humantime::parse_duration)]
        delay: std::time::Duration,
        /// Each frame's delay varies by up to this much either way.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        jitter: std::time::Duration,
        /// Percent of frames lost in each direction.
        #[arg(long, default_value_t = 0.0)]
        loss_percent: f64,
    },
    /// Print every message in the origin's stream as a JSON line (id, pop), read as the
    /// origin's administrator.
    Origin(OriginArgs),
}

/// `lab origin`: what to read of the origin's stream, and as whom.
#[derive(clap::Args)]
struct OriginArgs {
    /// The origin cluster's servers (any one that answers will do).
    #[arg(long, value_delimiter = ',', default_value = lab::ORIGIN_SERVERS)]
    nats: Vec<String>,
    #[arg(long, default_value = "WEBHOOKS")]
    stream: String,
    /// Print the stream's replication (leader, peers) instead, as one JSON line.
    #[arg(long)]
    replication: bool,
    /// Instead, as the identity of this nkey seed file with replies in the inbox
    /// `--as-inbox`: look the stream up, publish to SUBJECT, try to delete the
    /// stream, and read what the administrator sends to its own inbox and to
    /// `--peek-inbox`; print what each got, as one JSON line.
    #[arg(long, value_name = "SUBJECT", requires_all = ["as_seed_file", "as_inbox", "peek_inbox"])]
    probe: Option<String>,
    #[arg(long)]
    as_seed_file: Option<PathBuf>,
    #[arg(long, value_name = "PREFIX")]
    as_inbox: Option<String>,
    #[arg(long, value_name = "PREFIX")]
    peek_inbox: Option<String>,
}

fn main() -> ExitCode {
    // async-nats (the origin, over TLS) and reqwest take the process's default TLS
    // provider; with more than one compiled in, it must be chosen.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    if matches!(cli.command, Command::Status) {
        // `lab status | head` should end quietly, as other CLIs do: Rust ignores SIGPIPE, so
        // the print to the closed pipe would panic. Only here: `lab send` writes to sockets
        // a peer may reset, and with SIG_DFL that write would kill it.
        // SAFETY: before any thread exists; SIG_DFL is always valid.
        unsafe {
            let _ = signal::signal(signal::Signal::SIGPIPE, signal::SigHandler::SigDfl);
        }
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let lab = || Lab::load(&cli.topology, &cli.state, &lab::bin_dir());
    match cli.command {
        Command::Up { machines } => {
            let lab = lab()?;
            lab.up(&machines)?;
            print!("{}", lab.status()?);
        }
        Command::Down => lab()?.down(),
        Command::Status => print_status(&lab()?)?,
        Command::Alerts => {
            let mut out = std::io::stdout().lock();
            for alert in Prometheus::of(&lab()?)?.alerts()? {
                writeln!(out, "{}", serde_json::to_string(&alert)?)?;
            }
        }
        Command::Query { expr } => {
            println!("{}", Prometheus::of(&lab()?)?.query(&expr)?);
        }
        Command::Exec { node, command } => {
            // Container paths work here as they would in `docker exec`; each argument
            // stays one argument, as there.
            let paths = lab()?.paths(&node);
            let argv: Vec<String> = command.iter().map(|arg| paths.rewrite(arg)).collect();
            let status = lab::netns::command_argv(&lab::netns::namespace(&node), &argv)
                .status()
                .map_err(anyhow::Error::from)?;
            if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
                eprintln!("lab exec: {argv:?} on {node} died of signal {signal}");
            }
            return Ok(ExitCode::from(status.code().unwrap_or(1) as u8));
        }
        Command::Start { node, service } => {
            let lab = lab()?;
            let service = lab.topology.node(&node)?.service(&service)?;
            lab.start_service(&node, &service)?;
        }
        Command::Stop {
            node,
            service,
            kill,
        } => {
            let signal = if kill {
                nix::sys::signal::Signal::SIGKILL
            } else {
                nix::sys::signal::Signal::SIGTERM
            };
            lab()?.stop_service(&node, &service, signal)?;
        }
        Command::Wan {
            a,
            b,
            delay,
            jitter,
            loss_percent,
        } => {
            let impairment = lab::wan::Impairment {
                delay,
                jitter,
                loss: loss_percent / 100.0,
            };
            lab::wan::run(&a, &b, impairment)?;
        }
        Command::H2Load(plan) => {
            let summary = runtime()?.block_on(lab::h2_load::run(plan))?;
            println!("{}", summary.line());
        }
        Command::Send(plan) => {
            let outcomes = runtime()?.block_on(lab::sender::send(plan))?;
            let mut out = std::io::stdout().lock();
            for outcome in &outcomes {
                writeln!(out, "{}", serde_json::to_string(outcome)?)?;
            }
        }
        Command::Origin(args) => origin(&lab_dir(&cli.topology), args)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `lab status`: the nodes, each router's next hops to the anycast addresses, the
/// regions, and the alerts pending or firing.
fn print_status(lab: &Lab) -> anyhow::Result<()> {
    print!("{}", lab.status()?);
    println!();
    for router in lab.topology.routers() {
        for vip in [VIP, VIP6] {
            let hops = lab.next_hops(router, vip).unwrap_or_default();
            println!("{router}: {vip} via {}", hops.join(", "));
        }
    }
    let prometheus = Prometheus::of(lab)?;
    if let Some(regions) = regions::status(lab, &prometheus, VIP) {
        print!("\n{regions}");
    }
    println!("\n{}: alerts", prometheus.node());
    // A Prometheus that is down or starting is a status, not an error.
    match prometheus.alerts() {
        Ok(alerts) if alerts.is_empty() => println!("none pending or firing"),
        Ok(alerts) => alerts.iter().for_each(|alert| println!("{alert}")),
        Err(e) => println!("{e:#}"),
    }
    Ok(())
}

/// `lab origin`: the stream's messages, its replication, or a probe of what an identity
/// may do, each printed as JSON lines.
fn origin(lab_dir: &std::path::Path, args: OriginArgs) -> anyhow::Result<()> {
    let admin = OriginAccess::admin(lab_dir, args.nats);
    let stream = args.stream;
    match (args.probe, args.as_seed_file, args.peek_inbox) {
        (Some(subject), Some(seed_file), Some(peek_inbox)) => {
            let access = OriginAccess {
                seed_file: Some(seed_file),
                inbox_prefix: args.as_inbox,
                ..admin.clone()
            };
            let probe = runtime()?.block_on(lab::origin::probe(
                &access,
                &admin,
                &stream,
                &subject,
                &peek_inbox,
            ))?;
            println!("{}", serde_json::to_string(&probe)?);
        }
        _ if args.replication => {
            let replication = runtime()?.block_on(lab::origin::replication(&admin, &stream))?;
            println!("{}", serde_json::to_string(&replication)?);
        }
        _ => {
            let arrivals = runtime()?.block_on(lab::origin::arrivals(&admin, &stream))?;
            let mut out = std::io::stdout().lock();
            for arrival in &arrivals {
                writeln!(out, "{}", serde_json::to_string(arrival)?)?;
            }
        }
    }
    Ok(())
}

/// The folder of the topology file: where its nodes' files are.
fn lab_dir(topology: &std::path::Path) -> PathBuf {
    topology
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// The anycast VIP every PoP announces, IPv4 and IPv6.
const VIP: &str = "192.0.2.10";
const VIP6: &str = "2001:db8:a::10";
