//! `bgp-agent run`: every round, run the checks, feed the hysteresis, consult the peer
//! guard before a health withdraw, and make the speaker carry the decision (through a
//! GRACEFUL_SHUTDOWN announcement first where that applies, on exit too). Serves
//! `/status` (JSON) and `/metrics` on the admin listener. SIGHUP re-reads the config:
//! checks, timers and the guard change live; an invalid file is refused and the running
//! config kept.

mod round;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use edge_kit::admin::Answer;
use edge_kit::metrics::ResultLabel;
use edge_kit::signals::{Signal, Signals};
use parking_lot::Mutex;

use crate::checks::{self, Outcome};
use crate::config::Settings;
use crate::guard::{self, Guard, Tally, Verdict};
use crate::hysteresis::{Change, HealthWithdraw, Why};
use crate::metrics::{
    ChangeLabel, CheckLabel, CheckResultLabel, Metrics, PrefixLabel, SpeakerLabel,
};
use crate::speaker::{Advert, Speaker};
use edge_kit::watchdog::Watchdog;
use round::Agent;

/// What `bgp-agent status` and the peer guard read.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Status {
    pub pop: String,
    /// What BGP carries: `announced`, `graceful_shutdown` (on the way out) or
    /// `withdrawn`. The peer guard counts only `announced`.
    pub route: &'static str,
    /// Announced but less preferred: a degrade check fails.
    pub degraded: bool,
    pub why: Why,
    pub penalty: f64,
    pub suppressed: bool,
    pub drained: bool,
    /// The peer guard holds a health withdraw back (at most `guard.max_veto`).
    pub guard_vetoing: bool,
    pub transitions: u64,
    pub speaker: &'static str,
    pub last_change_unix_ms: Option<u64>,
    pub last_speaker_error: Option<String>,
    pub checks: Vec<Outcome>,
}

/// Runs the agent with `config` (read from `path`, re-read on SIGHUP) until SIGTERM or
/// SIGINT: checks each round, announces or withdraws, serves `/status` and `/metrics`.
pub async fn run(path: PathBuf, config: Settings) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new(&config.pop));
    let speaker = Speaker::new(
        &config.speaker,
        config.prefixes.clone(),
        metrics.sessions.clone(),
    );
    // The drain flag as it is now: a status read before the first round (a playbook
    // checking a freshly restarted agent) must not report a drained PoP undrained.
    let status = Arc::new(Mutex::new(Status::starting(
        &config.pop,
        speaker.kind(),
        config.drain_flag().exists(),
    )));
    // Start withdrawn and make the daemon agree, before anything else that can fail: a
    // predecessor that died may have left the prefix announced, and an agent that cannot
    // start must not leave it so.
    let mut announcer = Announcer {
        speaker,
        applied: None,
        last_error: None,
        metrics: Arc::clone(&metrics),
        prefixes: config.prefixes.clone(),
    };
    announcer.carry(Advert::Withdrawn).await;
    std::fs::create_dir_all(&config.state_dir)
        .with_context(|| format!("state_dir {}", config.state_dir.display()))?;
    let admin = tokio::net::TcpListener::bind(config.admin_listen)
        .await
        .with_context(|| format!("admin_listen {}", config.admin_listen))?;
    tokio::spawn(serve_admin(
        admin,
        Arc::clone(&status),
        Arc::clone(&metrics),
    ));
    let watchdog = Watchdog::from_env();
    watchdog.ready();

    let agent = Agent::new(config.policy.clone(), config.graceful_shutdown.clone());
    let mut runner = Runner {
        checks: CheckRunner::new(config.checks.len()),
        config,
        agent,
        guard: Guard::default(),
        announcer,
        metrics,
        status,
        last_change_unix_ms: None,
        watchdog,
        origin: Instant::now(),
    };
    let mut signals = Signals::new()?;
    tracing::info!(prefixes = ?runner.config.prefixes, speaker = runner.announcer.speaker.kind(), "bgp-agent started withdrawn");
    loop {
        let pause = runner.tick().await;
        let signal = tokio::select! {
            _ = tokio::time::sleep(pause) => continue,
            signal = signals.next() => signal,
        };
        if signal != Signal::Hangup {
            break;
        }
        runner.reload(&path);
    }
    runner.exit(&mut signals).await;
    tracing::info!("bgp-agent stopped");
    Ok(())
}

/// The agent's state between rounds, and what a round talks to.
struct Runner {
    config: Settings,
    agent: Agent,
    checks: CheckRunner,
    guard: Guard,
    announcer: Announcer,
    metrics: Arc<Metrics>,
    /// Written once a round, by [`Runner::publish`].
    status: Arc<Mutex<Status>>,
    last_change_unix_ms: Option<u64>,
    watchdog: Watchdog,
    /// The agent's clock starts here; the pure cores take durations since.
    origin: Instant,
}

impl Runner {
    /// One round: run the due checks, ask the peer guard if the round proposes a health
    /// withdraw, commit the round with its verdict, make the speaker carry the decision,
    /// publish it. Returns how long to pause before the next round.
    async fn tick(&mut self) -> std::time::Duration {
        let pending = self.agent.change_pending();
        let outcomes = self
            .checks
            .run_due(&self.config, pending, &self.metrics)
            .await;
        let now = self.origin.elapsed();
        let healthy = checks::local_health(&outcomes);
        let drain_requested = self.config.drain_flag().exists();
        let health_withdraw = self.ask_guard(now, healthy, drain_requested).await;
        let round = self
            .agent
            .round(now, healthy, drain_requested, health_withdraw);
        if round.drain_changed {
            tracing::warn!(drained = self.agent.drained(), "drain flag changed");
        }
        if let Some(degraded) = self
            .agent
            .observe_degrade(now, checks::degrade_health(&outcomes))
        {
            tracing::warn!(
                degraded,
                "degrade checks changed how the route is preferred"
            );
        }
        if let Some(change) = round.change {
            self.record_change(change, now);
        }
        self.announcer.carry(self.agent.advert()).await;
        self.publish(now, self.agent.advert(), outcomes);
        self.watchdog.alive();
        self.watchdog.bound(if self.agent.change_pending() {
            self.config.fast_interval
        } else {
            self.config.interval
        })
    }

    /// The peer guard's verdict for this round: asked only when a guard is configured
    /// and the round proposes a withdraw for health.
    async fn ask_guard(
        &mut self,
        now: std::time::Duration,
        healthy: bool,
        drain_requested: bool,
    ) -> HealthWithdraw {
        let Some(config) = &self.config.guard else {
            return HealthWithdraw::Allowed;
        };
        if !self
            .agent
            .proposes_health_withdraw(now, healthy, drain_requested)
        {
            self.guard.clear();
            return HealthWithdraw::Allowed;
        }
        if guard_allows(&mut self.guard, config, now, &self.metrics).await {
            HealthWithdraw::Allowed
        } else {
            HealthWithdraw::Held
        }
    }

    fn record_change(&mut self, change: Change, now: std::time::Duration) {
        let label = if change == Change::Announce {
            "announce"
        } else {
            "withdraw"
        };
        self.metrics
            .transitions
            .get_or_create(&ChangeLabel { change: label })
            .inc();
        tracing::info!(change = label, why = ?self.agent.why(), penalty = self.agent.machine().penalty(now), "route change");
        let now_ms = edge_kit::clock::unix_ms();
        self.metrics
            .last_change_timestamp_seconds
            .set(now_ms as f64 / 1e3);
        self.last_change_unix_ms = Some(now_ms);
    }

    /// The round's result for `/status` (the whole document, replaced) and `/metrics`;
    /// `advert` is what BGP now carries.
    fn publish(&self, now: std::time::Duration, advert: Advert, checks: Vec<Outcome>) {
        let machine = self.agent.machine();
        let status = Status {
            pop: self.config.pop.clone(),
            route: advert.route_name(),
            degraded: advert == Advert::Degraded,
            why: machine.why(),
            penalty: machine.penalty(now),
            suppressed: machine.suppressed(),
            drained: self.agent.drained(),
            guard_vetoing: self.guard.vetoing(),
            transitions: machine.transitions(),
            speaker: self.announcer.speaker.kind(),
            last_change_unix_ms: self.last_change_unix_ms,
            last_speaker_error: self.announcer.last_error.clone(),
            checks,
        };
        self.metrics.penalty.set(status.penalty);
        self.metrics.suppressed.set(status.suppressed as i64);
        self.metrics.drained.set(status.drained as i64);
        self.metrics.degraded.set(status.degraded as i64);
        *self.status.lock() = status;
    }

    /// SIGHUP: the file re-read; checks, timers and the guard change live.
    fn reload(&mut self, path: &Path) {
        if let Some(reloaded) = reload(path, &self.config, &self.metrics) {
            self.config = reloaded;
            self.agent.reconfigure(
                self.config.policy.clone(),
                self.config.graceful_shutdown.clone(),
            );
            self.checks = CheckRunner::new(self.config.checks.len());
        }
    }

    /// SIGTERM or SIGINT: with `withdraw_on_exit`, leave gracefully (65535:0 first when
    /// configured; a second signal cuts that short), then withdraw.
    async fn exit(mut self, signals: &mut Signals) {
        if !self.config.withdraw_on_exit {
            return;
        }
        if let Some(wait) = self.agent.exit_wait(self.origin.elapsed()) {
            tracing::info!(
                ?wait,
                "graceful shutdown before exit: announcing with 65535:0"
            );
            self.announcer.carry(Advert::GracefulShutdown).await;
            self.publish(
                self.origin.elapsed(),
                Advert::GracefulShutdown,
                self.checks.latest(),
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = signals.next() => tracing::warn!("second signal: withdrawing now"),
            }
        }
        tracing::info!("withdrawing before exit");
        self.announcer.carry(Advert::Withdrawn).await;
    }
}

impl Status {
    fn starting(pop: &str, speaker: &'static str, drained: bool) -> Self {
        Status {
            pop: pop.to_owned(),
            route: Advert::Withdrawn.route_name(),
            degraded: false,
            why: Why::Starting,
            penalty: 0.0,
            suppressed: false,
            drained,
            guard_vetoing: false,
            transitions: 0,
            speaker,
            last_change_unix_ms: None,
            last_speaker_error: None,
            checks: Vec::new(),
        }
    }
}

/// Asks the peers and the guard whether a health withdraw may go ahead; logs and
/// counts a veto and a veto that ran out.
async fn guard_allows(
    guard: &mut Guard,
    config: &crate::config::GuardSettings,
    now: std::time::Duration,
    metrics: &Metrics,
) -> bool {
    let answers = guard::ask_peers(config).await;
    let recall = config.timeout * guard::RECALL_TIMEOUTS;
    let tally = Tally::of(&guard.recall(now, &config.peers, &answers, recall));
    metrics.guard_peers_unknown.set(tally.unknown as i64);
    let minimum = config.min_other_pops_announcing;
    match guard.decide(now, tally, minimum, config.max_veto) {
        Verdict::Allow => true,
        Verdict::Veto => {
            metrics.guard_blocked.inc();
            tracing::error!(
                announcing = tally.announcing,
                withdrawn = tally.not_announcing,
                unknown = tally.unknown,
                minimum,
                "GUARD: local checks fail but too few other PoPs announce; staying announced"
            );
            false
        }
        Verdict::VetoExpired => {
            metrics.guard_veto_expired.inc();
            tracing::error!(
                announcing = tally.announcing,
                withdrawn = tally.not_announcing,
                unknown = tally.unknown,
                max_veto = ?config.max_veto,
                "GUARD: vetoed for max_veto and the checks still fail; withdrawing"
            );
            true
        }
    }
}

/// Re-reads the config file: `Some` new config to run with (restart-only fields kept
/// as they run), or `None` when the file is invalid. Logged and counted either way.
fn reload(path: &Path, running: &Settings, metrics: &Metrics) -> Option<Settings> {
    let result = |result| ResultLabel { result };
    match Settings::load(path) {
        Ok(mut new) => {
            let needs_restart = new.needs_restart(running);
            if !needs_restart.is_empty() {
                tracing::warn!(
                    fields = ?needs_restart,
                    "config reload: these fields change only at a restart; running with their old values"
                );
            }
            new.pop = running.pop.clone();
            new.prefixes = running.prefixes.clone();
            new.state_dir = running.state_dir.clone();
            new.admin_listen = running.admin_listen;
            new.speaker = running.speaker.clone();
            metrics.config_reloads.get_or_create(&result("ok")).inc();
            tracing::info!(
                checks = new.checks.len(),
                interval_ms = new.interval.as_millis() as u64,
                rise = new.policy.rise,
                fall = new.policy.fall,
                "config reloaded"
            );
            Some(new)
        }
        Err(errors) => {
            metrics
                .config_reloads
                .get_or_create(&result("failed"))
                .inc();
            tracing::error!("config reload refused; keeping the running config:\n{errors}");
            None
        }
    }
}

/// Makes the speaker carry the route the agent decided, once; a failure is retried at
/// the next round's `carry`.
struct Announcer {
    speaker: Speaker,
    /// What the speaker last confirmed.
    applied: Option<Advert>,
    /// Why the last attempt failed, until one succeeds (for `/status`).
    last_error: Option<String>,
    metrics: Arc<Metrics>,
    prefixes: Vec<ipnet::IpNet>,
}

impl Announcer {
    async fn carry(&mut self, advert: Advert) {
        if self.applied == Some(advert) {
            return;
        }
        let started = Instant::now();
        let label = SpeakerLabel {
            speaker: self.speaker.kind(),
        };
        match self.speaker.apply(advert).await {
            Ok(()) => {
                self.metrics
                    .speaker_seconds
                    .get_or_create(&label)
                    .observe(started.elapsed().as_secs_f64());
                self.applied = Some(advert);
                for prefix in &self.prefixes {
                    self.metrics
                        .announced
                        .get_or_create(&PrefixLabel {
                            prefix: prefix.to_string(),
                        })
                        .set((advert != Advert::Withdrawn) as i64);
                }
                self.metrics
                    .graceful_shutdown
                    .set((advert == Advert::GracefulShutdown) as i64);
                self.last_error = None;
                tracing::info!(
                    ?advert,
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "speaker confirmed"
                );
            }
            Err(e) => {
                self.metrics.speaker_errors.get_or_create(&label).inc();
                tracing::error!(?advert, error = %format!("{e:#}"), "speaker failed; retrying next round");
                self.last_error = Some(format!("{e:#}"));
            }
        }
    }
}

/// Runs the checks on their own intervals and logs each one's changes.
struct CheckRunner {
    last_runs: Vec<Option<(Instant, Outcome)>>,
}

impl CheckRunner {
    fn new(checks: usize) -> Self {
        Self {
            last_runs: vec![None; checks],
        }
    }

    /// Runs the checks that are due (all of them while a change is pending)
    /// concurrently, and returns the latest outcome of every check.
    async fn run_due(
        &mut self,
        config: &Settings,
        pending: bool,
        metrics: &Metrics,
    ) -> Vec<Outcome> {
        let now = Instant::now();
        let due: Vec<usize> = (0..config.checks.len())
            .filter(|&i| match &self.last_runs[i] {
                None => true,
                Some((at, _)) => {
                    pending
                        || now.duration_since(*at)
                            >= config.checks[i].interval.unwrap_or(config.interval)
                }
            })
            .collect();
        let fresh =
            futures::future::join_all(due.iter().map(|&i| checks::run(&config.checks[i]))).await;
        for (i, outcome) in due.into_iter().zip(fresh) {
            record_check(metrics, &outcome);
            let previous = self.last_runs[i].as_ref().map(|(_, last)| last.ok);
            if previous != Some(outcome.ok) {
                tracing::info!(check = %outcome.name, class = ?outcome.class, ok = outcome.ok, detail = %outcome.detail, "check changed");
            }
            self.last_runs[i] = Some((now, outcome));
        }
        self.latest()
    }

    /// Every check's latest outcome.
    fn latest(&self) -> Vec<Outcome> {
        self.last_runs
            .iter()
            .filter_map(|run| run.as_ref().map(|(_, outcome)| outcome.clone()))
            .collect()
    }
}

fn record_check(metrics: &Metrics, outcome: &Outcome) {
    let class = outcome.class.label();
    let result = if outcome.ok { "ok" } else { "fail" };
    metrics
        .check_results
        .get_or_create(&CheckResultLabel {
            check: outcome.name.clone(),
            class,
            result,
        })
        .inc();
    metrics
        .check_seconds
        .get_or_create(&CheckLabel {
            check: outcome.name.clone(),
            class,
        })
        .observe(outcome.duration_ms / 1e3);
}

/// `/status` (JSON) and `/metrics` for the life of the process.
async fn serve_admin(
    listener: tokio::net::TcpListener,
    status: Arc<Mutex<Status>>,
    metrics: Arc<Metrics>,
) {
    let admin_metrics = metrics.admin.clone();
    edge_kit::admin::serve(listener, admin_metrics, move |path| match path {
        "/status" => Answer::new(
            http::StatusCode::OK,
            "application/json",
            serde_json::to_string_pretty(&*status.lock()).unwrap_or_default(),
        ),
        "/metrics" => Answer::openmetrics(metrics.encode()),
        _ => Answer::not_found("/status /metrics"),
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starting_agent_reports_the_drain_flag_it_finds() {
        assert!(Status::starting("fra1", "bird", true).drained);
        assert!(!Status::starting("fra1", "bird", false).drained);
    }
}
