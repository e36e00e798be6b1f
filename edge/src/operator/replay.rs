//! `edge replay`: send delivered events of a time range to the origin again (it lost or
//! mishandled them), from the segments `spool.retain_delivered` keeps.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use edge_kit::clock::unix_ms;

use super::print_json;
use crate::spool::replay::{self, ReplayFilter};

/// Which delivered events to send again.
#[derive(clap::Args)]
pub struct Args {
    /// The spool directory (`spool.dir`).
    #[arg(long)]
    dir: PathBuf,
    /// Received at or after this: RFC 3339 (`2026-12-05T14:00:00Z`; without a zone,
    /// UTC) or a time ago (`90m`).
    #[arg(long, value_parser = parse_time)]
    since: u64,
    /// Received before this (same forms); default: now.
    #[arg(long, value_parser = parse_time)]
    until: Option<u64>,
    /// Of this route only.
    #[arg(long)]
    route: Option<String>,
    /// Whose event id starts with this.
    #[arg(long)]
    id_prefix: Option<String>,
    /// Count what would be sent; queue nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Queues the selected events for the running edge (or its next start) and prints what
/// was selected as one JSON line, before any is sent.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let filter = ReplayFilter {
        since_ms: args.since,
        until_ms: args.until,
        route: args.route,
        id_prefix: args.id_prefix,
    };
    if filter
        .until_ms
        .is_some_and(|until| until <= filter.since_ms)
    {
        anyhow::bail!("--until must be after --since");
    }
    let dir = &args.dir;
    let running = crate::spool::in_use(dir).with_context(|| dir.display().to_string())?;
    let queued =
        replay::queue(dir, &filter, args.dry_run).with_context(|| dir.display().to_string())?;
    let mut line = serde_json::to_value(&queued)?;
    line["dry_run"] = args.dry_run.into();
    line["edge_running"] = running.into();
    line["since_ms"] = filter.since_ms.into();
    line["until_ms"] = filter.until_ms.into();
    print_json(&line)?;
    if queued
        .oldest_kept_ms
        .is_none_or(|oldest| oldest > filter.since_ms)
    {
        eprintln!(
            "note: the oldest delivered event kept is from {}: nothing before it can be replayed (spool.retain_delivered sets how long they are kept)",
            queued
                .oldest_kept_ms
                .map_or_else(|| "none kept".to_owned(), format_ms)
        );
    }
    if !args.dry_run && !running && queued.events > 0 {
        eprintln!("note: no edge runs on this spool; the next one to start sends them");
    }
    Ok(ExitCode::SUCCESS)
}

/// RFC 3339 (a naive one is UTC) or a duration ago, as Unix milliseconds.
fn parse_time(text: &str) -> Result<u64, String> {
    if let Ok(ago) = humantime_serde::re::humantime::parse_duration(text) {
        return Ok(unix_ms().saturating_sub(ago.as_millis() as u64));
    }
    let at = humantime_serde::re::humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("{text}: neither RFC 3339 nor a duration ago ({e})"))?;
    Ok(at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64))
}

fn format_ms(ms: u64) -> String {
    humantime_serde::re::humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_in_utc_or_a_duration_ago() {
        assert_eq!(parse_time("2026-12-05T14:00:00Z"), Ok(1_796_479_200_000));
        assert_eq!(parse_time("2026-12-05 14:00:00"), Ok(1_796_479_200_000));
        let now = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let ago = parse_time("1h").unwrap();
        assert!((now - 3_600_000).abs_diff(ago) < 5_000, "{ago}");
        assert!(parse_time("yesterday").unwrap_err().contains("yesterday"));
        assert_eq!(format_ms(1_796_479_200_000), "2026-12-05T14:00:00Z");
    }
}
