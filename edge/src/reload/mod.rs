//! `SIGHUP` (`systemctl reload`): re-read the config file and apply what can change
//! without a restart — routes and secrets, certificates and TLS settings, body and
//! request limits, admission control (the limiter keeps what it learnt). The file is validated exactly as `check-config` does; an invalid one
//! is refused with every bad field named and the running config keeps serving. Settings
//! that only change at a restart are named in a warning and keep their running values.
//! Shared session-ticket keys are re-read on the same signal, and when their file changes.

mod metrics;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use edge_kit::signals::Hangups;

pub(crate) use metrics::ReloadMetrics;

use crate::config;
use crate::http::App;
use crate::server::{Live, Server};
use crate::spool::Spool;
use crate::tls;
use crate::tls::tickets::SharedTickets;

pub(crate) struct Reloader {
    path: PathBuf,
    /// The file as last applied, to tell which restart-only settings a new one changes.
    running: serde_yaml::Value,
    server: Arc<Server>,
    spool: Arc<Spool>,
    metrics: ReloadMetrics,
    tickets: Option<Arc<SharedTickets>>,
}

impl Reloader {
    /// `path` is the running config's file; what it holds now is taken as applied.
    pub(crate) fn new(
        path: PathBuf,
        server: Arc<Server>,
        spool: Arc<Spool>,
        metrics: ReloadMetrics,
        tickets: Option<Arc<SharedTickets>>,
    ) -> Self {
        let running = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| serde_yaml::from_str(&text).ok())
            .unwrap_or_default();
        Self {
            path,
            running,
            server,
            spool,
            metrics,
            tickets,
        }
    }

    /// Waits for SIGHUP (and polls the ticket-key file) for the life of the process; a
    /// SIGHUP that came during start-up is applied at once.
    pub(crate) async fn run(mut self, mut hangups: Hangups) {
        let mut poll = tokio::time::interval(TICKET_KEY_POLL);
        loop {
            tokio::select! {
                () = hangups.next() => {
                    self.reload_config();
                    self.reload_ticket_keys(true);
                }
                _ = poll.tick() => self.reload_ticket_keys(false),
            }
        }
    }

    fn reload_config(&mut self) {
        match self.apply() {
            Ok(generation) => {
                self.metrics.reloaded("ok");
                tracing::info!(generation, file = %self.path.display(), "config reloaded");
            }
            Err(e) => {
                self.metrics.reloaded("failed");
                tracing::error!("config reload refused; the running config keeps serving:\n{e:#}");
            }
        }
    }

    /// Loads, validates and swaps in the new config; returns the new generation.
    fn apply(&mut self) -> anyhow::Result<i64> {
        let text = std::fs::read_to_string(&self.path)
            .with_context(|| format!("{}: (file)", self.path.display()))?;
        let files = config::SecretFiles::for_config(Some(&self.path));
        let settings =
            config::parse_with(&text, &files).map_err(|errors| config::ConfigErrors {
                file: self.path.clone(),
                errors,
            })?;
        let yaml: serde_yaml::Value = serde_yaml::from_str(&text).context("parsed once already")?;
        let needs_restart = config::restart_only_changes(&self.running, &yaml);
        let running = self.server.live.load_full();
        let tls = tls::reloaded_config(&settings.tls, &running.tls, &self.server.metrics.tls)
            .with_context(|| format!("{}: tls", self.path.display()))?;
        if !needs_restart.is_empty() {
            tracing::warn!(
                fields = ?needs_restart,
                "config reload: these settings change only at a restart; running with their old values"
            );
        }
        self.spool.set_windows(settings.dedupe_windows());
        running
            .app
            .admission
            .reconfigure(settings.admission.clone());
        let live = Live {
            app: Arc::new(App::new(
                &settings,
                Arc::clone(&self.spool),
                running.app.metrics.clone(),
                Arc::clone(&running.app.admission),
            )),
            tls,
            handshake_timeout: settings.tls.handshake_timeout,
        };
        self.server.live.store(Arc::new(live));
        self.running = yaml;
        self.metrics.generation.inc();
        tracing::info!(
            routes = settings.routes.len(),
            "routes, secrets, certificates, limits and admission now in force"
        );
        Ok(self.metrics.generation.get())
    }

    fn reload_ticket_keys(&self, forced: bool) {
        let Some(tickets) = &self.tickets else {
            return;
        };
        let result = if forced {
            tickets.reload().map(Some)
        } else {
            tickets.reload_if_changed()
        };
        match result {
            Ok(Some(keys)) => tracing::info!(keys, "session ticket keys reloaded"),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "session ticket keys not reloaded; keeping the keys in use")
            }
        }
    }
}

const TICKET_KEY_POLL: Duration = Duration::from_secs(5);
