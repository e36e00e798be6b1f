//! `edge`: the webhook edge's binary (`run`, `check-config` and the operators' commands).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use edge_kit::cli::{ConfigFile, Daemon};
use edge_kit::process::print_line;
use tracing::Instrument;

/// Every request allocates and frees a few dozen small buffers across two threads (the
/// connection's worker and the spool writer); mimalloc's per-thread free lists make
/// that cheaper than glibc's arenas (lab/bench/README.md). Built without transparent
/// huge pages: with them an idle HTTP/2 connection held 52 KB of RSS instead of 35.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "edge",
    version,
    about = "Anycast webhook edge: verify, store durably, then acknowledge"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// `run` serves webhooks (a reload re-reads routes, secrets, certificates, limits).
    #[command(flatten)]
    Daemon(Daemon),
    /// Make the origin's JetStream stream as the edges expect it (what the controller
    /// runs, with the origin administrator's identity: a PoP's own user may only
    /// publish). Prints `created` or `exists` first; an existing stream is left as it is.
    CreateStream(CreateStreamArgs),
    /// Print the shed ledger of a spool directory as JSON lines: requests refused by
    /// admission control with the delivery id they claimed (unverified), for
    /// reconciliation (e.g. GitHub's redelivery API).
    ShedLedger {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Check every segment of a spool directory (read-only; safe while the edge runs):
    /// print each damaged region as a JSON line, with the sequence numbers it cost and
    /// the event ids its frames still name, and what is in quarantine. Exit 1 when
    /// anything is damaged.
    SpoolVerify {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Dead letters (events the origin refused for good): list, show, retry, purge.
    #[command(subcommand)]
    DeadLetter(edge::operator::dead_letter::Action),
    /// The backhaul: pause (for a while, or until resumed), resume, status.
    #[command(subcommand)]
    Backhaul(edge::operator::backhaul::Action),
    /// Send delivered events of a time range to the origin again, marked `Edge-Replay:
    /// true` (from what `spool.retain_delivered` keeps): prints how many first, then the
    /// running edge stores and delivers them.
    Replay(edge::operator::replay::Args),
    /// Providers' egress ranges (`ranges.sources`): fetch and store the lists.
    #[command(subcommand)]
    Ranges(edge::operator::ranges::Action),
    /// Quarantine (spool bytes kept but never delivered from): list, show, export.
    #[command(subcommand)]
    Quarantine(edge::operator::quarantine::Action),
    /// Print the records in a spool directory as JSON lines (read-only; safe while the
    /// edge runs).
    SpoolDump {
        #[arg(long)]
        dir: PathBuf,
        /// Include each record's headers and body (as text when it is UTF-8, else as
        /// `body_base64`).
        #[arg(long)]
        bodies: bool,
    },
}

fn main() -> ExitCode {
    let cli: Cli = edge_kit::process::start();
    // async-nats builds its TLS client from the process's default provider (the edge's
    // own TLS configs name theirs); with more than one compiled in, it must be chosen.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let kind = match &cli.command {
        Command::Daemon(daemon) => daemon.process(),
        _ => edge_kit::process::Command::TOOL,
    };
    edge_kit::process::run("edge", kind, |runtime| match cli.command {
        Command::Daemon(Daemon::Run(ConfigFile { config })) => {
            let settings = edge::config::load(&config)?;
            let span = tracing::info_span!("edge", pop = %settings.pop);
            runtime.block_on(edge::run::run(config, settings).instrument(span))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Daemon(Daemon::CheckConfig(ConfigFile { config })) => {
            let settings = edge::config::load(&config)?;
            print_line(&format!(
                "{}: ok ({} routes, pop {})",
                config.display(),
                settings.routes.len(),
                settings.pop
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CreateStream(args) => {
            let nats = create_stream_settings(args)?;
            print_line(
                &runtime
                    .block_on(edge::backhaul::create_stream(&nats))?
                    .to_string(),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::ShedLedger { dir } => {
            let lines = edge::spool::shed_ledger_files(&dir).lines;
            let entries = edge::admission::ledger::read(&lines)
                .with_context(|| lines.display().to_string())?;
            for entry in entries {
                print_line(&serde_json::to_string(&entry)?)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::SpoolVerify { dir } => match edge::spool::inspect(&dir) {
            Ok(found) => {
                print_inspection(&found)?;
                Ok(if found.is_damaged() {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                })
            }
            // 1 means damage found: a spool that cannot be read at all is told apart.
            Err(e) => {
                eprintln!("{}: {e}", dir.display());
                Ok(ExitCode::from(2))
            }
        },
        Command::SpoolDump { dir, bodies } => {
            let records = edge::spool::dump(&dir).with_context(|| dir.display().to_string())?;
            for record in &records {
                print_line(&edge::operator::record_json(record, bodies).to_string())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::DeadLetter(action) => edge::operator::dead_letter::run(action),
        Command::Quarantine(action) => edge::operator::quarantine::run(action),
        Command::Backhaul(action) => edge::operator::backhaul::run(action),
        Command::Replay(args) => edge::operator::replay::run(args),
        Command::Ranges(action) => edge::operator::ranges::run(action, runtime),
    })
}

/// `edge spool-verify`'s output: a JSON line per finding on stdout, a summary on stderr.
fn print_inspection(found: &edge::spool::Inspection) -> std::io::Result<()> {
    let mut lost = 0u64;
    for region in &found.damaged {
        if let Some(seqs) = &region.lost {
            lost += seqs.end() - seqs.start() + 1;
        }
        let line = serde_json::json!({
            "damaged": region.segment.display().to_string(),
            "offset": region.offset,
            "bytes": region.bytes,
            "error": region.error.to_string(),
            "lost_from": region.lost.as_ref().map(|s| *s.start()),
            "lost_to": region.lost.as_ref().map(|s| *s.end()),
            "named": named_json(&region.named),
        });
        print_line(&line.to_string())?;
    }
    for segment in &found.recovered_headers {
        print_line(
            &serde_json::json!({ "header_recovered": segment.display().to_string() }).to_string(),
        )?;
    }
    for unreadable in &found.unreadable {
        lost += unreadable.lost.end() - unreadable.lost.start() + 1;
        let line = serde_json::json!({
            "unreadable": unreadable.segment.display().to_string(),
            "why": unreadable.why,
            "lost_from": unreadable.lost.start(),
            "lost_to": unreadable.lost.end(),
            "named": named_json(&unreadable.named),
        });
        print_line(&line.to_string())?;
    }
    for (segment, offset, seq) in &found.repairable {
        print_line(
            &serde_json::json!({ "repairable": segment.display().to_string(), "offset": offset, "seq": seq })
                .to_string(),
        )?;
    }
    for seqs in &found.missing {
        lost += seqs.end() - seqs.start() + 1;
        print_line(
            &serde_json::json!({ "missing_from": seqs.start(), "missing_to": seqs.end() })
                .to_string(),
        )?;
    }
    if let Some((segment, offset, bytes)) = &found.open_tail {
        print_line(&serde_json::json!({ "open_tail": segment.display().to_string(), "offset": offset, "bytes": bytes }).to_string())?;
    }
    if let Some((segment, last_seq)) = &found.newest {
        print_line(
            &serde_json::json!({ "newest": segment.display().to_string(), "last_seq": last_seq })
                .to_string(),
        )?;
    }
    for (kept, why) in &found.quarantined {
        print_line(
            &serde_json::json!({ "quarantined": kept.display().to_string(), "why": why })
                .to_string(),
        )?;
    }
    eprintln!(
        "{} segments, {} whole records, {} damaged regions, {} unreadable segments, {} ranges in no segment ({lost} records lost), {} frame lengths to repair, {} files in quarantine",
        found.segments,
        found.records,
        found.damaged.len(),
        found.unreadable.len(),
        found.missing.len(),
        found.repairable.len(),
        found.quarantined.len()
    );
    Ok(())
}

fn named_json(named: &[(u64, String)]) -> Vec<serde_json::Value> {
    named
        .iter()
        .map(|(seq, id)| serde_json::json!({ "seq": seq, "event_id": id }))
        .collect()
}

/// `edge create-stream`'s flags.
#[derive(clap::Args)]
struct CreateStreamArgs {
    /// The origin's servers, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    servers: Vec<String>,
    #[arg(long, default_value = "WEBHOOKS")]
    stream: String,
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// How long a resend of a message is dropped (`Nats-Msg-Id`): longer than the
    /// longest origin outage to ride out without duplicates.
    #[arg(long, default_value = "1h", value_parser = humantime_serde::re::humantime::parse_duration)]
    duplicate_window: std::time::Duration,
    /// The CA that signed the origin's certificate (TLS is then required).
    #[arg(long)]
    ca: Option<PathBuf>,
    /// A file holding the administrator's nkey seed (`-` for standard input).
    #[arg(long, conflicts_with = "credentials")]
    nkey_seed_file: Option<PathBuf>,
    /// The administrator's NATS credentials file.
    #[arg(long)]
    credentials: Option<PathBuf>,
}

/// `edge create-stream`: NATS settings from the flags (defaults for the rest, as a
/// config file would have them).
fn create_stream_settings(args: CreateStreamArgs) -> anyhow::Result<edge::config::NatsSettings> {
    let mut settings = serde_json::json!({
        "servers": args.servers,
        "stream": args.stream,
        "replicas": args.replicas,
        "credentials": args.credentials,
    });
    if let Some(ca) = args.ca {
        settings["tls"] = serde_json::json!({ "ca": ca });
    }
    if let Some(path) = args.nkey_seed_file {
        let seed = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("--nkey-seed-file -")?
        } else {
            std::fs::read_to_string(&path)
                .with_context(|| format!("--nkey-seed-file {}", path.display()))?
        };
        settings["nkey"] = serde_json::Value::String(seed.trim().to_owned());
    }
    let mut nats: edge::config::NatsSettings = serde_json::from_value(settings)?;
    nats.duplicate_window = args.duplicate_window;
    Ok(nats)
}
