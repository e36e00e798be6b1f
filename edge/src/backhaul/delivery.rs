//! The delivery loop: spool → sink, in order, with bounded concurrency, and a checkpoint
//! that only ever covers what the origin confirmed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edge_kit::clock::unix_ms;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::ack_window::AckWindow;
use super::breaker::{Breaker, Permit, State};
use super::error::DeliveryError;
use super::metrics::BackhaulMetrics;
use super::pace::Pace;
use super::retry::{Backoff, unit_random};
use super::sink::Sink;
use crate::config::BackhaulSettings;
use crate::spool::backhaul_pause::BackhaulPause;
use crate::spool::record::Record;
use crate::spool::{Batch, Spool, SpoolReader};

/// Runs until `stop` turns true; writes a last checkpoint before returning.
pub async fn run(
    spool: Arc<Spool>,
    sink: Arc<Sink>,
    settings: BackhaulSettings,
    metrics: BackhaulMetrics,
    mut stop: watch::Receiver<bool>,
) {
    let mut reader = spool.reader();
    let mut window = AckWindow::new(reader.next_seq() - 1);
    let mut pending = VecDeque::new();
    let mut deliveries = FuturesUnordered::new();
    let shared = Arc::new(DeliveryContext::new(
        &spool,
        sink,
        &settings,
        metrics.clone(),
    ));
    let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pace = settings.max_rate.map(Pace::new);
    let mut pause = OperatorPause::read(&spool, &metrics).await;
    loop {
        if pending.is_empty() && deliveries.len() < settings.max_in_flight {
            let batch;
            (reader, batch) = read_batch(reader, &metrics).await;
            // Lost to damage: nothing to deliver, and nothing to wait for.
            for seq in batch.lost.into_iter().flatten() {
                window.finished(seq);
            }
            for record in batch.records {
                window.read(record.seq, record.received_ms);
                pending.push_back(record);
            }
        }
        let mut paced_until = None;
        let held = pause.holds();
        while !held && deliveries.len() < settings.max_in_flight && !pending.is_empty() {
            if let Some(Err(at)) = pace.as_mut().map(|pace| pace.start(Instant::now())) {
                paced_until = Some(at);
                break;
            }
            if let Some(record) = pending.pop_front() {
                deliveries.push(Arc::clone(&shared).deliver(record));
            }
        }
        metrics
            .lag_records
            .set(window.lag(spool.durable_seq()) as i64);
        metrics.lag_bytes.set(spool.unconfirmed_bytes() as i64);
        metrics
            .oldest_undelivered_seconds
            .set(window.oldest_age_ms(unix_ms()) as f64 / 1e3);

        let read_up_to = reader.next_seq() - 1;
        let want_more = pending.is_empty() && deliveries.len() < settings.max_in_flight;
        tokio::select! {
            Some(seq) = deliveries.next() => {
                // Take every delivery that has finished, not one per loop turn.
                window.finished(seq);
                while let Some(Some(seq)) = deliveries.next().now_or_never() {
                    window.finished(seq);
                }
            }
            _ = spool.wait_durable_after(read_up_to), if want_more => {}
            () = sleep_until(paced_until) => {}
            _ = tick.tick() => {
                checkpoint(&spool, &mut window).await;
                pause.refresh(&spool, &metrics).await;
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
    }
    checkpoint(&spool, &mut window).await;
    tracing::info!(checkpoint = window.confirmed(), "backhaul stopped");
}

/// Sleeps until `at`; never ends for `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The operator's pause (`edge backhaul pause`), as last read from the spool directory:
/// read at start and at most every [`PAUSE_READ_EVERY`] after.
struct OperatorPause {
    pause: Option<BackhaulPause>,
    read_at: Instant,
}

impl OperatorPause {
    async fn read(spool: &Spool, metrics: &BackhaulMetrics) -> Self {
        let mut pause = Self {
            pause: None,
            read_at: Instant::now(),
        };
        pause.read_now(spool, metrics).await;
        pause
    }

    /// Whether deliveries are held now.
    fn holds(&self) -> bool {
        self.pause.as_ref().is_some_and(|p| p.holds(unix_ms()))
    }

    async fn refresh(&mut self, spool: &Spool, metrics: &BackhaulMetrics) {
        if self.read_at.elapsed() >= PAUSE_READ_EVERY {
            self.read_now(spool, metrics).await;
        }
    }

    /// An unreadable note keeps the state as it was.
    async fn read_now(&mut self, spool: &Spool, metrics: &BackhaulMetrics) {
        self.read_at = Instant::now();
        match spool.backhaul_pause().await {
            Ok(pause) => {
                let was = self.holds();
                self.pause = pause;
                let now = self.holds();
                if now != was {
                    match &self.pause {
                        Some(p) if now => {
                            tracing::warn!(reason = %p.reason, until_ms = ?p.until_ms, "backhaul paused by an operator: events are stored, none delivered")
                        }
                        _ => tracing::info!("backhaul pause lifted: delivering"),
                    }
                }
                metrics.paused.set(i64::from(now));
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the backhaul pause note; keeping the state as it was")
            }
        }
    }
}

/// Reads the next records off the spool (on the blocking pool: it reads files); on an
/// error, logs, counts and pauses, and returns nothing. The reader goes to the blocking
/// thread and comes back.
async fn read_batch(mut reader: SpoolReader, metrics: &BackhaulMetrics) -> (SpoolReader, Batch) {
    #[expect(
        clippy::expect_used,
        reason = "a panic ends the process (edge_kit::panic), so the join cannot fail"
    )]
    let (reader, batch) = tokio::task::spawn_blocking(move || {
        let batch = reader.read_batch(READ_BATCH);
        (reader, batch)
    })
    .await
    .expect("spool reader task");
    let batch = match batch {
        Ok(batch) => batch,
        Err(e) => {
            tracing::error!(error = %e, "backhaul cannot read the spool; retrying");
            metrics.retry("spool_read");
            tokio::time::sleep(Duration::from_secs(1)).await;
            Batch::default()
        }
    };
    (reader, batch)
}

/// Moves the checkpoint up to what the origin confirmed, if it is behind.
async fn checkpoint(spool: &Spool, window: &mut AckWindow) {
    let Some(seq) = window.checkpoint_due() else {
        return;
    };
    match spool.advance_checkpoint(seq).await {
        Ok(()) => window.checkpointed(seq),
        Err(e) => tracing::error!(error = %e, "backhaul cannot write the checkpoint"),
    }
}

struct DeliveryContext {
    sink: Arc<Sink>,
    breaker: Mutex<Breaker>,
    backoff: Backoff,
    metrics: BackhaulMetrics,
    spool: Arc<Spool>,
    /// Signalled by the sink when a connection to the origin is (re)established.
    origin_back: Arc<tokio::sync::Notify>,
}

impl DeliveryContext {
    fn new(
        spool: &Arc<Spool>,
        sink: Arc<Sink>,
        settings: &BackhaulSettings,
        metrics: BackhaulMetrics,
    ) -> Self {
        Self {
            origin_back: sink.origin_back(),
            sink,
            breaker: Mutex::new(Breaker::new(
                settings.breaker_failures,
                settings.breaker_open_for,
            )),
            backoff: Backoff {
                base: settings.retry_base,
                max: settings.retry_max,
            },
            metrics,
            spool: Arc::clone(spool),
        }
    }

    /// Delivers one record until the origin has it (or keeps it as a dead letter);
    /// returns its sequence number.
    async fn deliver(self: Arc<Self>, record: Record) -> u64 {
        let origin_key = self.spool.origin_key(&record);
        let mut attempt = 0;
        loop {
            let permit = self.breaker.lock().permit(Instant::now());
            self.publish_breaker_state();
            if let Permit::Wait(pause) = permit {
                self.pause(pause.min(Duration::from_secs(1))).await;
                continue;
            }
            let started = Instant::now();
            match self.sink.deliver(&record, &origin_key).await {
                Ok(()) => {
                    self.breaker.lock().on_success();
                    self.metrics.acks.inc();
                    self.metrics
                        .publish_seconds
                        .observe(started.elapsed().as_secs_f64());
                    let age_ms = unix_ms().saturating_sub(record.received_ms);
                    self.metrics.delivery_seconds.observe(age_ms as f64 / 1e3);
                    return record.seq;
                }
                Err(DeliveryError::Rejected(why)) => {
                    self.breaker.lock().on_success();
                    match self.spool.store_dead_letter(record.clone()).await {
                        Ok(path) => {
                            self.metrics.dead_letters.inc();
                            tracing::warn!(seq = record.seq, event_id = %record.event_id, why = %why, path = %path.display(), "origin rejected an event; kept as a dead letter");
                            return record.seq;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "cannot store a dead letter; will retry the delivery");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
                Err(DeliveryError::Retry {
                    reason,
                    detail,
                    after,
                }) => {
                    self.breaker.lock().on_failure(Instant::now());
                    self.metrics.retry(reason);
                    let pause = self
                        .backoff
                        .delay(attempt, unit_random())
                        .max(after.unwrap_or_default());
                    tracing::debug!(seq = record.seq, reason, detail = %detail, pause_ms = pause.as_millis() as u64, "delivery failed; retrying");
                    attempt = attempt.saturating_add(1);
                    self.pause(pause).await;
                }
            }
        }
    }

    /// Sleeps `pause`, or less when the origin is reachable again: the backlog goes out
    /// as soon as the origin is back, not when the longest backoff runs out.
    async fn pause(&self, pause: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = self.origin_back.notified() => {
                self.breaker
                    .lock()
                    .on_origin_back(Instant::now());
            }
        }
    }

    fn publish_breaker_state(&self) {
        let state = self.breaker.lock().state(Instant::now());
        let value = match state {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
        };
        self.metrics.breaker_state.set(value);
    }
}

/// Checkpoint writes are fsyncs: batch them. A crash resends at most this much, and the
/// origin drops the duplicates by event id.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
const READ_BATCH: usize = 512;
/// How often the operator's pause note is read: pause and resume take effect within it.
const PAUSE_READ_EVERY: Duration = Duration::from_secs(1);
