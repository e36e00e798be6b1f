//! `edge run`: wires config, spool, TLS, listeners, admin endpoint and signals together,
//! and shuts down in order (drain, stop accepting, finish in-flight, sync, exit). SIGHUP
//! reloads the config (`reload`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use edge_kit::signals::{Signal, Signals};
use edge_kit::watchdog::Watchdog;
use tokio::sync::watch;
use tracing::Instrument;

use crate::admin::metrics::Metrics;
use crate::admin::{Admin, Readiness};
use crate::admission::Admission;
use crate::admission::ledger::Ledger;
use crate::backhaul::Sink;
use crate::config::{BackhaulSettings, Settings};
use crate::http::App;
use crate::ranges::trusted::TrustedRanges;
use crate::reload::Reloader;
use crate::server::sockets;
use crate::server::{Accepting, Live, Placement, Server, ServerMetrics};
use crate::spool::Spool;
use crate::tls;

/// Runs the edge with `settings` (read from `path`, re-read on SIGHUP) until SIGTERM or
/// SIGINT: recovers the spool, serves webhooks and admin, delivers to the origin.
pub async fn run(path: PathBuf, settings: Settings) -> anyhow::Result<()> {
    // First: from here a signal sent during start-up (the spool's recovery can take a
    // while) is handled, a SIGHUP applied once the reloader runs.
    let mut signals = Signals::new()?;
    let hangups = signals
        .take_hangups()
        .context("SIGHUP is listened for once")?;
    let metrics = Arc::new(Metrics::new(&settings.pop));
    metrics.reload.generation.set(1);
    let spool = open_spool(&settings, &metrics)?;
    let (tls_config, shared_tickets) = tls::server_config(&settings.tls, &metrics.tls)?;
    check_open_files_limit(&settings)?;
    let allowed_cpus = sockets::allowed_cpus().context("the process's CPU affinity")?;
    let placement = Placement::new(settings.listener.workers, &allowed_cpus);
    let listeners = settings
        .listen
        .iter()
        .map(|addr| sockets::bind_group(*addr, placement.workers(), &settings.listener))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let admin_listener = tokio::net::TcpListener::bind(settings.admin_listen)
        .await
        .with_context(|| format!("admin_listen {}", settings.admin_listen))?;

    let sink = match &settings.backhaul {
        Some(backhaul) => Some(Arc::new(
            crate::backhaul::Sink::connect(backhaul, &settings.pop, metrics.backhaul.clone())
                .await?,
        )),
        None => None,
    };
    let admission = start_admission(&settings, &metrics, &spool, sink.clone());
    let trusting = Arc::clone(&admission);
    let readiness = Arc::new(Readiness::default());
    if let Some(writer) = spool.writer_task() {
        readiness.watch(writer, "spool writer stopped");
    }
    if let Some(ledger) = admission.ledger_task() {
        readiness.watch(ledger, "shed ledger stopped");
    }
    let admin = Arc::new(Admin {
        readiness: Arc::clone(&readiness),
        spool: Arc::clone(&spool),
        metrics: Arc::clone(&metrics),
    });
    tokio::spawn(admin.serve(admin_listener).in_current_span());

    let live = Live {
        app: Arc::new(App::new(
            &settings,
            Arc::clone(&spool),
            metrics.http.clone(),
            admission,
        )),
        tls: tls_config,
        handshake_timeout: settings.tls.handshake_timeout,
    };
    let server_metrics = ServerMetrics {
        connections: metrics.connections.clone(),
        tls: metrics.tls.clone(),
        http: metrics.http.clone(),
    };
    let server = Arc::new(Server::new(live, &settings, server_metrics));
    if !settings.ranges.sources.is_empty() {
        let trusted = TrustedRanges::new(&settings, metrics.ranges.clone());
        let server = Arc::clone(&server);
        let apply = move |nets: Vec<ipnet::IpNet>| {
            let trusted = edge_kit::ranges::NetSet::new(&nets);
            server.connections.lock().set_trusted(trusted.clone());
            trusting.set_trusted(trusted);
        };
        tokio::spawn(trusted.keep(apply).in_current_span());
    }
    let backhaul = sink
        .zip(settings.backhaul.clone())
        .map(|(sink, backhaul)| Backhaul::start(backhaul, sink, &spool, &metrics));
    match &backhaul {
        Some(backhaul) => readiness.watch(backhaul.task.abort_handle(), "backhaul stopped"),
        None => tracing::warn!("no backhaul configured: events stay in the spool"),
    }
    tokio::spawn(
        crate::spool::resend::resend_queued(Arc::clone(&spool), RESEND_EVERY).in_current_span(),
    );
    let reloader = Reloader::new(
        path,
        Arc::clone(&server),
        Arc::clone(&spool),
        metrics.reload.clone(),
        shared_tickets,
    );
    let reloading = tokio::spawn(reloader.run(hangups).in_current_span());
    readiness.watch(reloading.abort_handle(), "config reload watcher stopped");
    let (stop, stopped) = watch::channel(false);
    let accepting = server.start(&placement, listeners, stopped)?;
    readiness.listening.store(true, Ordering::Release);
    tracing::info!(listen = ?settings.listen, admin = %settings.admin_listen, workers = placement.workers(), "edge ready");
    let watchdog = Watchdog::from_env();
    watchdog.ready();
    tokio::spawn(
        crate::server::liveness::feed(watchdog, accepting.heartbeats(), Arc::clone(&spool))
            .in_current_span(),
    );

    let mut spool_failed = false;
    let grace = tokio::select! {
        signal = signals.shutdown() => match signal {
            Signal::Terminate => settings.drain_grace,
            _ => Duration::ZERO,
        },
        () = spool.failed() => {
            tracing::error!("the spool failed a write or fsync: stopping, so that a restart recovers from what is on disk (nothing since was acknowledged)");
            spool_failed = true;
            Duration::ZERO
        }
    };
    readiness.draining.store(true, Ordering::Release);
    watchdog.stopping();
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "draining: /readyz fails, still serving"
    );
    tokio::time::sleep(grace).await;
    let _ = stop.send(true);
    finish_connections(accepting, settings.shutdown_timeout).await;
    if let Some(backhaul) = backhaul {
        backhaul.stop().await;
    }
    spool.close().await;
    if spool_failed {
        anyhow::bail!("stopped after a spool failure");
    }
    tracing::info!("edge stopped");
    Ok(())
}

/// Admission control, with its shed ledger shipped through `sink` when there is one,
/// reading how full `spool` is.
fn start_admission(
    settings: &Settings,
    metrics: &Metrics,
    spool: &Arc<Spool>,
    sink: Option<Arc<Sink>>,
) -> Arc<Admission> {
    let ledger = Ledger::start(
        spool.shed_ledger_files(),
        SHED_LEDGER_BYTES,
        sink,
        metrics.admission.ledger_dropped.clone(),
    );
    Admission::new(
        settings.admission.clone(),
        metrics.admission.clone(),
        Some(ledger),
        {
            let spool = Arc::clone(spool);
            Arc::new(move || spool.fill())
        },
    )
}

fn open_spool(settings: &Settings, metrics: &Metrics) -> anyhow::Result<Arc<Spool>> {
    let (spool, report) = Spool::open(
        &settings.spool,
        &settings.pop,
        settings.dedupe_windows(),
        metrics.spool.clone(),
    )?;
    tracing::info!(
        dir = %settings.spool.dir.display(),
        segments = report.segments,
        records = report.records,
        checkpoint = report.checkpoint,
        next_seq = report.next_seq,
        cut_tails = report.cut.len(),
        "spool recovered"
    );
    Ok(Arc::new(spool))
}

/// Raises the soft open-files limit, and warns when `connections.max` cannot fit in it.
fn check_open_files_limit(settings: &Settings) -> anyhow::Result<()> {
    let open_files = sockets::raise_open_files_limit().context("raising RLIMIT_NOFILE")?;
    if settings.connections.max_total as u64 + FD_RESERVE > open_files {
        tracing::warn!(
            open_files,
            connections_max = settings.connections.max_total,
            "connections.max is above what the open-files limit allows: accept will back off on EMFILE first (raise LimitNOFILE)"
        );
    }
    Ok(())
}

/// Waits for the accept loops to end, then up to `timeout` for open connections.
async fn finish_connections(accepting: Accepting, timeout: Duration) {
    let connections = accepting.stopped().await;
    tracing::info!(
        open = connections.open(),
        "stopped accepting; finishing in-flight requests"
    );
    if tokio::time::timeout(timeout, connections.close())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after shutdown_timeout; closing them");
    }
}

/// The running backhaul task and its stop switch.
struct Backhaul {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Backhaul {
    fn start(
        backhaul: BackhaulSettings,
        sink: Arc<Sink>,
        spool: &Arc<Spool>,
        metrics: &Metrics,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = crate::backhaul::run(
            Arc::clone(spool),
            sink,
            backhaul,
            metrics.backhaul.clone(),
            stopped,
        );
        Self {
            stop,
            task: tokio::spawn(task.in_current_span()),
        }
    }

    /// Stops after a last checkpoint.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The shed ledger's file is started afresh past this, once shipped.
const SHED_LEDGER_BYTES: u64 = 16 << 20;
/// How often the queues of dead letters an operator retried and of events to replay
/// are looked at.
const RESEND_EVERY: Duration = Duration::from_secs(1);
/// Descriptors the edge needs besides client connections (spool, admin, backhaul, logs).
const FD_RESERVE: u64 = 64;
