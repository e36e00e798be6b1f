//! `edge run`: wires config, spool, TLS, listeners, admin endpoint and signals together,
//! and shuts down in order (drain, stop accepting, finish in-flight, sync, exit). SIGHUP
//! reloads the config (`reload`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use edge_kit::signals::{Signal, Signals};
use tokio::sync::watch;
use tracing::Instrument;

use crate::admin::{Admin, Readiness};
use crate::admission::Admission;
use crate::admission::ledger::Ledger;
use crate::config::Settings;
use crate::http::{App, connection_builder};
use crate::metrics::Metrics;
use crate::reload::{Reloader, dedupe_windows};
use crate::server::{Live, Server};
use crate::spool::Spool;
use crate::{sockets, tls};

pub async fn run(path: PathBuf, settings: Settings) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new(&settings.pop));
    metrics.reload.generation.set(1);
    let (spool, report) = Spool::open(
        &settings.spool,
        &settings.pop,
        dedupe_windows(&settings),
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
    let spool = Arc::new(spool);

    let (tls_config, shared_tickets) = tls::server_config(&settings.tls)?;
    let open_files = sockets::raise_open_files_limit().context("raising RLIMIT_NOFILE")?;
    if settings.connections.max_total as u64 + FD_RESERVE > open_files {
        tracing::warn!(
            open_files,
            connections_max = settings.connections.max_total,
            "connections.max is above what the open-files limit allows: accept will back off on EMFILE first (raise LimitNOFILE)"
        );
    }
    let listeners = settings
        .listen
        .iter()
        .map(|addr| sockets::bind(*addr, &settings.listener))
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
    let ledger = Ledger::start(
        &settings.spool.dir,
        SHED_LEDGER_BYTES,
        sink.clone(),
        metrics.admission.ledger_dropped.clone(),
    );
    let admission = Admission::new(
        settings.admission.clone(),
        metrics.admission.clone(),
        Some(ledger),
    );
    let readiness = Arc::new(Readiness::default());
    let admin = Arc::new(Admin {
        readiness: Arc::clone(&readiness),
        spool: Arc::clone(&spool),
        metrics: Arc::clone(&metrics),
    });
    tokio::spawn(admin.serve(admin_listener).in_current_span());

    let server = Arc::new(Server {
        live: ArcSwap::from_pointee(Live {
            app: Arc::new(App::new(
                &settings,
                Arc::clone(&spool),
                metrics.http.clone(),
                Arc::clone(&admission),
            )),
            tls: tls_config,
            handshake_timeout: settings.tls.handshake_timeout,
        }),
        metrics: metrics.connections.clone(),
        tls_metrics: metrics.tls.clone(),
        http_metrics: metrics.http.clone(),
        http: Arc::new(connection_builder(&settings.http)),
        deadlines: settings.http.deadlines,
        connections: std::sync::Mutex::new(crate::conn_limits::ConnTable::new(
            settings.connections.clone(),
        )),
        refusal_log: Default::default(),
    });
    let (stop_backhaul, backhaul_stopped) = watch::channel(false);
    let backhaul = match (&settings.backhaul, sink) {
        (Some(backhaul), Some(sink)) => {
            let task = crate::backhaul::run(
                Arc::clone(&spool),
                sink,
                backhaul.clone(),
                metrics.backhaul.clone(),
                backhaul_stopped,
            );
            Some(tokio::spawn(task.in_current_span()))
        }
        _ => {
            tracing::warn!("no backhaul configured: events stay in the spool");
            None
        }
    };
    let running = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_yaml::from_str(&text).ok())
        .unwrap_or_default();
    let reloader = Reloader {
        path,
        running,
        server: Arc::clone(&server),
        spool: Arc::clone(&spool),
        metrics: metrics.reload.clone(),
        tickets: shared_tickets,
    };
    tokio::spawn(reloader.run().in_current_span());
    let (stop, stopped) = watch::channel(false);
    let accepting = tokio::spawn(server.run(listeners, stopped).in_current_span());
    readiness.listening.store(true, Ordering::Release);
    tracing::info!(listen = ?settings.listen, admin = %settings.admin_listen, "edge ready");

    let mut signals = Signals::new()?;
    let grace = match signals.shutdown().await {
        Signal::Terminate => settings.drain_grace,
        _ => Duration::ZERO,
    };
    readiness.draining.store(true, Ordering::Release);
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "draining: /readyz fails, still serving"
    );
    tokio::time::sleep(grace).await;

    let _ = stop.send(true);
    let graceful = accepting.await.context("accept loops")?;
    tracing::info!(
        open = graceful.count(),
        "stopped accepting; finishing in-flight requests"
    );
    if tokio::time::timeout(settings.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after shutdown_timeout; closing them");
    }
    let _ = stop_backhaul.send(true);
    if let Some(backhaul) = backhaul {
        let _ = backhaul.await;
    }
    spool.close().await;
    tracing::info!("edge stopped");
    Ok(())
}

/// The shed ledger's file is started afresh past this, once shipped.
const SHED_LEDGER_BYTES: u64 = 16 << 20;
/// Descriptors the edge needs besides client connections (spool, admin, backhaul, logs).
const FD_RESERVE: u64 = 64;
