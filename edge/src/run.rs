//! `edge run`: wires config, spool, TLS, listeners, admin endpoint and signals together,
//! and shuts down in order (drain, stop accepting, finish in-flight, sync, exit). SIGHUP
//! reloads the config (`reload`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use edge_kit::service::Services;
use edge_kit::signals::{Signal, Signals};
use edge_kit::watchdog::Watchdog;
use tokio::sync::watch;

use crate::admin::metrics::Metrics;
use crate::admin::{Admin, Readiness};
use crate::admission::Admission;
use crate::admission::ledger::Ledger;
use crate::backhaul::Sink;
use crate::config::Settings;
use crate::http::App;
use crate::ranges::trusted::TrustedRanges;
use crate::reload::Reloader;
use crate::server::{Accepting, Live, Placement, Server, ServerMetrics, liveness, sockets};
use crate::spool::Spool;
use crate::spool::resend::resend_queued;
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
    let listeners = bind_listeners(&settings, &placement)?;
    let admin_listener = tokio::net::TcpListener::bind(settings.admin_listen)
        .await
        .with_context(|| format!("admin_listen {}", settings.admin_listen))?;
    let sink = connect_sink(&settings, &metrics).await?;

    let readiness = Arc::new(Readiness::default());
    let services = Arc::clone(&readiness.services);
    let admission = start_admission(&settings, &metrics, &spool, sink.clone());
    if let Some(writer) = spool.writer_task() {
        services.watch("spool writer", writer);
    }
    if let Some(ledger) = admission.ledger_task() {
        services.watch("shed ledger", ledger);
    }
    let admin = Admin {
        readiness: Arc::clone(&readiness),
        spool: Arc::clone(&spool),
        metrics: Arc::clone(&metrics),
    };
    services.spawn("admin endpoint", Arc::new(admin).serve(admin_listener));
    let server = start_server(&settings, &metrics, &spool, &admission, tls_config);
    if !settings.ranges.sources.is_empty() {
        let trusted = TrustedRanges::new(&settings, metrics.ranges.clone());
        services.spawn(
            "trusted ranges",
            trusted.keep(apply_trusted(&server, admission)),
        );
    }
    spawn_backhaul(&services, sink, &settings, &spool, &metrics);
    services.spawn(
        "resend queue",
        resend_queued(Arc::clone(&spool), RESEND_EVERY),
    );
    let reloader = Reloader::new(
        path,
        Arc::clone(&server),
        Arc::clone(&spool),
        metrics.reload.clone(),
        shared_tickets,
    );
    services.spawn("config reload watcher", reloader.run(hangups));
    let (stop_accepting, accepting_stopped) = watch::channel(false);
    let accepting = server.start(&placement, listeners, accepting_stopped)?;
    readiness.listening.store(true, Ordering::Release);
    tracing::info!(listen = ?settings.listen, admin = %settings.admin_listen, workers = placement.workers(), "edge ready");
    let watchdog = Watchdog::from_env();
    watchdog.ready();
    services.spawn(
        "watchdog feed",
        liveness::feed(watchdog, accepting.heartbeats(), Arc::clone(&spool)),
    );

    let stop = until_stop(&mut signals, &spool, settings.drain_grace).await;
    drain(&readiness, watchdog, stop.grace).await;
    let _ = stop_accepting.send(true);
    finish_connections(accepting, settings.shutdown_timeout).await;
    services.stop().await;
    spool.close().await;
    if stop.spool_failed {
        anyhow::bail!("stopped after a spool failure");
    }
    tracing::info!("edge stopped");
    Ok(())
}

/// The backhaul's sink to the origin, if one is configured.
async fn connect_sink(settings: &Settings, metrics: &Metrics) -> anyhow::Result<Option<Arc<Sink>>> {
    let Some(backhaul) = &settings.backhaul else {
        return Ok(None);
    };
    let sink = Sink::connect(backhaul, &settings.pop, metrics.backhaul.clone()).await?;
    Ok(Some(Arc::new(sink)))
}

/// Delivers the spool to the origin through `sink` until the services stop.
fn spawn_backhaul(
    services: &Services,
    sink: Option<Arc<Sink>>,
    settings: &Settings,
    spool: &Arc<Spool>,
    metrics: &Metrics,
) {
    let Some((sink, backhaul)) = sink.zip(settings.backhaul.clone()) else {
        tracing::warn!("no backhaul configured: events stay in the spool");
        return;
    };
    let (spool, metrics) = (Arc::clone(spool), metrics.backhaul.clone());
    services.spawn_stoppable("backhaul", move |stopping| {
        crate::backhaul::run(spool, sink, backhaul, metrics, stopping)
    });
}

/// Fails `/readyz` (so the BGP agent withdraws the prefix) and tells systemd, then
/// serves on for `grace` while traffic moves to other PoPs.
async fn drain(readiness: &Readiness, watchdog: Watchdog, grace: Duration) {
    readiness.draining.store(true, Ordering::Release);
    watchdog.stopping();
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "draining: /readyz fails, still serving"
    );
    tokio::time::sleep(grace).await;
}

/// Why the edge stops, and how long it drains first.
struct Stop {
    grace: Duration,
    spool_failed: bool,
}

/// Waits for SIGTERM (drain for `drain_grace`), SIGINT (no drain) or a spool failure (no
/// drain: a restart recovers from what is on disk).
async fn until_stop(signals: &mut Signals, spool: &Spool, drain_grace: Duration) -> Stop {
    tokio::select! {
        signal = signals.shutdown() => Stop {
            grace: match signal {
                Signal::Terminate => drain_grace,
                _ => Duration::ZERO,
            },
            spool_failed: false,
        },
        () = spool.failed() => {
            tracing::error!("the spool failed a write or fsync: stopping, so that a restart recovers from what is on disk (nothing since was acknowledged)");
            Stop { grace: Duration::ZERO, spool_failed: true }
        }
    }
}

fn bind_listeners(
    settings: &Settings,
    placement: &Placement,
) -> anyhow::Result<Vec<Vec<std::net::TcpListener>>> {
    settings
        .listen
        .iter()
        .map(|addr| sockets::bind_group(*addr, placement.workers(), &settings.listener))
        .collect()
}

/// The webhook server, its request path built over `spool` and `admission`.
fn start_server(
    settings: &Settings,
    metrics: &Metrics,
    spool: &Arc<Spool>,
    admission: &Arc<Admission>,
    tls: Arc<rustls::ServerConfig>,
) -> Arc<Server> {
    let live = Live {
        app: Arc::new(App::new(
            settings,
            Arc::clone(spool),
            metrics.http.clone(),
            Arc::clone(admission),
        )),
        tls,
        handshake_timeout: settings.tls.handshake_timeout,
    };
    let server_metrics = ServerMetrics {
        connections: metrics.connections.clone(),
        tls: metrics.tls.clone(),
        http: metrics.http.clone(),
    };
    Arc::new(Server::new(live, settings, server_metrics))
}

/// Puts a new list of trusted sources in force for connection caps and admission.
fn apply_trusted(
    server: &Arc<Server>,
    admission: Arc<Admission>,
) -> impl Fn(Vec<ipnet::IpNet>) + Send + 'static {
    let server = Arc::clone(server);
    move |nets| {
        let trusted = edge_kit::ranges::NetSet::new(&nets);
        server.connections.lock().set_trusted(trusted.clone());
        admission.set_trusted(trusted);
    }
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

/// The shed ledger's file is started afresh past this, once shipped.
const SHED_LEDGER_BYTES: u64 = 16 << 20;
/// How often the queues of dead letters an operator retried and of events to replay
/// are looked at.
const RESEND_EVERY: Duration = Duration::from_secs(1);
/// Descriptors the edge needs besides client connections (spool, admin, backhaul, logs).
const FD_RESERVE: u64 = 64;
