//! Under-attack mode: while it holds, only the open ranges (the providers' published
//! egress lists that `edge ranges update` keeps, plus `also_open`: management and
//! health checks) reach the served ports; the rest is dropped at the NIC and counted as
//! `under_attack`. Each second the loader reads the operator's override, the lists and
//! the SYN counter, asks the [`shield::Shield`], and writes its verdict to the program.

pub mod shield;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use edge_kit::ranges::RangeList;
use ipnet::IpNet;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::config::{Settings, UnderAttack};
use crate::filter::Filter;
use shield::{Mode, Shield, Verdict, Why};

/// What the last tick decided, for `/metrics`.
#[derive(Clone, Copy, Debug)]
pub struct Status {
    /// The verdict in force.
    pub verdict: Verdict,
    /// Entries of the open ranges in the program.
    pub open_entries: usize,
    /// New SYNs to the served ports per second, over the last tick.
    pub syn_rate: u64,
}

impl Default for Status {
    fn default() -> Self {
        Self {
            verdict: Verdict {
                up: false,
                why: Why::Off,
            },
            open_entries: 0,
            syn_rate: 0,
        }
    }
}

/// Decides once a second until the process ends, with the settings in force (`settings`
/// follows SIGHUP reloads), writing each verdict to `filter` and to `status`.
pub async fn keep(
    filter: Arc<Mutex<Filter>>,
    mut settings: watch::Receiver<Settings>,
    status: Arc<Mutex<Status>>,
) {
    let started = Instant::now();
    let mut shield = shield_of(&settings.borrow().under_attack);
    let mut open_in_force: Option<Vec<IpNet>> = None;
    let mut previous = Status::default().verdict;
    let mut last_syns = filter.lock().new_syns().unwrap_or(0);
    let mut last_tick = Instant::now();
    let mut ticks = tokio::time::interval(TICK);
    loop {
        ticks.tick().await;
        if settings.has_changed().unwrap_or(false) {
            shield = shield_of(&settings.borrow_and_update().under_attack);
        }
        let config = settings.borrow().under_attack.clone();
        let (open, usable) = open_ranges(&config, SystemTime::now());
        let mode = read_override(&config.override_file).unwrap_or(config.mode);
        let syns = filter.lock().new_syns().unwrap_or(last_syns);
        let elapsed = last_tick.elapsed().as_secs_f64().max(0.001);
        let syn_rate = (syns.saturating_sub(last_syns) as f64 / elapsed) as u64;
        (last_syns, last_tick) = (syns, Instant::now());
        let now_ms = started.elapsed().as_millis() as u64;
        let verdict = shield.decide(now_ms, mode, syn_rate, usable);

        let mut program = filter.lock();
        if open_in_force.as_ref() != Some(&open) {
            match program.set_open(&open) {
                Ok(()) => tracing::info!(entries = open.len(), usable, "open ranges loaded"),
                Err(e) => tracing::error!(error = %format!("{e:#}"), "open ranges not loaded"),
            }
            open_in_force = Some(open.clone());
        }
        if verdict.up != previous.up
            && let Err(e) = program.set_shield(verdict.up)
        {
            tracing::error!(error = %format!("{e:#}"), "under-attack mode not changed");
        } else if verdict != previous {
            log_change(verdict, syn_rate, open.len(), &config);
            previous = verdict;
        }
        drop(program);
        *status.lock() = Status {
            verdict,
            open_entries: open.len(),
            syn_rate,
        };
    }
}

/// Writes the operator's `mode` where the running loader reads it (`None`: back to the
/// config's mode).
pub fn set_override(path: &Path, mode: Option<Mode>) -> std::io::Result<()> {
    match mode {
        Some(mode) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, format!("{}\n", mode.as_str()))
        }
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

fn log_change(verdict: Verdict, syn_rate: u64, open: usize, config: &UnderAttack) {
    let why = verdict.why.as_str();
    match verdict.why {
        Why::FailOpen => {
            tracing::warn!(why, lists = config.ranges.len(), max_age = ?config.max_age, "under-attack mode fails open: no provider list is present, non-empty and younger than max_age")
        }
        _ if verdict.up => tracing::warn!(
            why,
            syn_rate,
            open,
            "under-attack mode: only the open ranges reach the served ports"
        ),
        _ => tracing::info!(
            why,
            syn_rate,
            "under-attack mode down: every source reaches the served ports"
        ),
    }
}

fn shield_of(config: &UnderAttack) -> Shield {
    Shield::new(
        config.syn_on,
        config.syn_off,
        config.hold.as_millis() as u64,
    )
}

/// The open ranges at `now`: every provider list that is present, non-empty and no older
/// than `max_age`, plus `also_open`; and whether any provider list was usable.
fn open_ranges(config: &UnderAttack, now: SystemTime) -> (Vec<IpNet>, bool) {
    let mut open = config.also_open.clone();
    let mut usable = false;
    for path in &config.ranges {
        let list = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| RangeList::read(&text).ok());
        if let Some(list) = list.filter(|l| !l.nets.is_empty() && l.age(now) <= config.max_age) {
            usable = true;
            open.extend(list.nets);
        }
    }
    (IpNet::aggregate(&open), usable)
}

fn read_override(path: &Path) -> Option<Mode> {
    match std::fs::read_to_string(path).ok()?.trim() {
        "on" => Some(Mode::On),
        "off" => Some(Mode::Off),
        "auto" => Some(Mode::Auto),
        _ => None,
    }
}

const TICK: Duration = Duration::from_secs(1);
