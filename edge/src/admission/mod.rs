//! Admission control on the webhook path: say no early, cheaply and explicitly to what
//! can be replayed, and keep serving what cannot.
//!
//! Before a request's body is read, [`Admission::check`] applies the per-source rate
//! limit (429), spool pressure and the limiter's shedding rules (503): a refusal costs no
//! body bytes. Once the body is in, [`Admission::acquire`] takes a concurrency slot
//! (waiting briefly in the queue if need be) that the request holds through verify,
//! spool append and fsync: the work the adaptive limit measures. Holding slots during
//! slow uploads would let slow senders take every slot. The decisions are in the pure
//! [`limiter`] and [`rate_limit`]; this module adds the clock, the waiting and metrics.

mod body_bytes;
pub mod body_rate;
pub mod ledger;
pub(crate) mod limiter;
mod metrics;
pub(crate) mod rate_limit;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edge_kit::ranges::NetSet;
use ipnet::IpNet;
use parking_lot::Mutex;
use tokio::sync::oneshot;

pub(crate) use body_bytes::SOURCE_SHARE as SOURCE_BODY_SHARE;
use body_bytes::{BodyBytes, NoRoom};
use ledger::{Ledger, ShedEntry};
use limiter::{Decision, Limiter, Priority, ShedReason, Ticket};
use rate_limit::{Rate, RateLimits, Source};

pub use metrics::AdmissionMetrics;

/// Settings of the `admission` config section.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionSettings {
    /// Off: every request is admitted at once (for comparison runs).
    pub enabled: bool,
    /// The adaptive concurrency limit: its bounds, target and queue.
    pub limiter: limiter::Settings,
    /// Above this fraction of `spool.max_bytes`, `low` routes are shed.
    pub spool_shed_low_above: f64,
    /// Above this fraction only `high` routes are admitted.
    pub spool_high_only_above: f64,
    /// Sources exempt from rate limits and from a share of the body budget (provider
    /// egress ranges).
    pub trusted: Vec<IpNet>,
    /// Request body bytes the edge holds at once, edge-wide (`body_bytes`).
    pub max_body_bytes: u64,
}

/// Why a request was refused before its body was read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Refusal {
    /// 503 + Retry-After.
    Shed(ShedReason),
    /// 429 + Retry-After: the source is over its route's rate; the wait until a token.
    RateLimited(Duration),
}

/// Admission control for the request path: a slot per request that verifies and
/// stores, shed by priority when the limit, the rate limit or the spool says so.
pub struct Admission {
    origin: Instant,
    spool_fill: SpoolFill,
    state: Mutex<State>,
    metrics: AdmissionMetrics,
    ledger: Option<Ledger>,
}

struct State {
    /// Replaced by a reload ([`Admission::reconfigure`]).
    settings: AdmissionSettings,
    /// The sources in force exempt from rate limits: `settings.trusted` at start, then
    /// what [`Admission::set_trusted`] gives.
    trusted: NetSet,
    limiter: Limiter,
    waiters: HashMap<Ticket, oneshot::Sender<Answer>>,
    rates: RateLimits<Arc<str>>,
    bodies: BodyBytes,
}

/// How full the spool is now, as a fraction of `spool.max_bytes` (what
/// `spool_shed_low_above` and `spool_high_only_above` are compared with); given to
/// [`Admission::new`], read at each request's check.
pub type SpoolFill = Arc<dyn Fn() -> f64 + Send + Sync>;

/// A request let in at its head, reading its body: it counts against the free slots
/// (when admission is on) and holds room for its body in the body budget until dropped.
pub struct BodyClaim {
    admission: Arc<Admission>,
    /// The limiter's claim on a slot; none while admission is off.
    ticket: Option<Ticket>,
    source: Source,
    body_bytes: u64,
}

/// A concurrency slot, given back when dropped. Call [`Permit::worked`] once the
/// request did the work the limit is about (stored an event), so its time feeds the
/// adaptive limit; a request that ended early says nothing about capacity.
pub struct Permit {
    admission: Arc<Admission>,
    since: Instant,
    worked: bool,
    /// Counted by the limiter (admission was on when it was given).
    counted: bool,
}

impl Admission {
    /// `ledger` keeps what was refused for reconciliation (see [`ledger`]); `spool_fill`
    /// says how full the spool is.
    pub fn new(
        settings: AdmissionSettings,
        metrics: AdmissionMetrics,
        ledger: Option<Ledger>,
        spool_fill: SpoolFill,
    ) -> Arc<Self> {
        metrics.limit.set(settings.limiter.initial_limit as i64);
        Arc::new(Self {
            state: Mutex::new(State {
                limiter: Limiter::new(settings.limiter.clone()),
                waiters: HashMap::new(),
                rates: RateLimits::default(),
                bodies: BodyBytes::new(settings.max_body_bytes),
                trusted: NetSet::new(&settings.trusted),
                settings,
            }),
            origin: Instant::now(),
            spool_fill,
            metrics,
            ledger,
        })
    }

    /// Settings from a reload, in force for the next request. The limiter keeps what it
    /// learnt (see [`Limiter::reconfigure`]); the rate-limit exemption stays as it is:
    /// `connections.trusted` changes only at a restart, the provider lists through
    /// [`Admission::set_trusted`].
    pub fn reconfigure(&self, settings: AdmissionSettings) {
        let mut state = self.state();
        state.limiter.reconfigure(settings.limiter.clone());
        state.bodies.set_limit(settings.max_body_bytes);
        state.settings = settings;
        self.publish(&state);
    }

    /// Replaces the sources exempt from per-source rate limits (`connections.trusted`
    /// and the provider lists in force).
    pub fn set_trusted(&self, trusted: NetSet) {
        self.state().trusted = trusted;
    }

    /// The shed ledger's task, when there is a ledger.
    pub fn ledger_task(&self) -> Option<tokio::task::AbortHandle> {
        self.ledger.as_ref().map(Ledger::task)
    }

    /// Counts a request shed for a reason outside admission's own state (the spool's).
    pub fn count_shed(&self, priority: Priority, reason: ShedReason) {
        self.metrics.shed(priority, reason.as_str());
    }

    /// Writes a refused request that claims a delivery id into the shed ledger.
    pub fn record_shed(&self, entry: ShedEntry) {
        if let Some(ledger) = &self.ledger {
            ledger.record(entry);
        }
    }

    /// Before the body: `Err` refuses the request now. The claim stands for the slot
    /// the request will want once its body is in, and holds room for `body_bytes` (the
    /// most its body can be) in the body budget, which bounds memory whether admission
    /// is on or off; drop it once the body is in, before [`Admission::acquire`], or
    /// when the body fails.
    pub fn check(
        self: &Arc<Self>,
        route: &Arc<str>,
        priority: Priority,
        rate: Option<Rate>,
        source: IpAddr,
        body_bytes: u64,
    ) -> Result<BodyClaim, Refusal> {
        let now = self.now();
        let mut state = self.state();
        let trusted = state.trusted.contains(source);
        let source = Source::of(source);
        if let Err(no_room) = state.bodies.hold(source, trusted, body_bytes) {
            drop(state);
            let reason = match no_room {
                NoRoom::Total => ShedReason::BodyBytes,
                NoRoom::Source => ShedReason::SourceBodyBytes,
            };
            self.metrics.shed(priority, reason.as_str());
            return Err(Refusal::Shed(reason));
        }
        self.metrics.body_bytes.set(state.bodies.held() as i64);
        let claim = |ticket| BodyClaim {
            admission: Arc::clone(self),
            ticket,
            source,
            body_bytes,
        };
        if !state.settings.enabled {
            return Ok(claim(None));
        }
        let refusal = if let Some(rate) = rate
            && !trusted
            && let Err(wait) = state.rates.take(now, route, source, rate)
        {
            Err(("rate_limited", Refusal::RateLimited(wait)))
        } else {
            let head = match spool_pressure(&state.settings, priority, (self.spool_fill)()) {
                Some(reason) => Err(reason),
                None => state.limiter.head(now, priority),
            };
            self.metrics
                .overloaded
                .set(state.limiter.overloaded() as i64);
            head.map_err(|reason| (reason.as_str(), Refusal::Shed(reason)))
        };
        match refusal {
            Ok(ticket) => Ok(claim(Some(ticket))),
            Err((reason, refusal)) => {
                state.bodies.release(source, body_bytes);
                self.metrics.body_bytes.set(state.bodies.held() as i64);
                drop(state);
                self.metrics.shed(priority, reason);
                Err(refusal)
            }
        }
    }

    /// After the body: a slot, possibly after waiting in the queue up to `max_wait`.
    pub async fn acquire(self: &Arc<Self>, priority: Priority) -> Result<Permit, ShedReason> {
        let started = Instant::now();
        match self.enter(started, priority) {
            // Admitted without waiting: no second clock read for a zero queue delay.
            Entry::Unlimited => Ok(self.admitted_at(started, Duration::ZERO, false)),
            Entry::Admitted => Ok(self.admitted_at(started, Duration::ZERO, true)),
            Entry::Queued(ticket, granted, max_wait) => {
                self.wait(ticket, granted, max_wait, priority, started)
                    .await
            }
            Entry::Shed(reason) => {
                self.metrics.shed_after_body(priority, reason);
                Err(reason)
            }
        }
    }

    /// The limiter's decision; a queued request also gets the receiver of its grant.
    fn enter(&self, now: Instant, priority: Priority) -> Entry {
        let mut state = self.state();
        if !state.settings.enabled {
            return Entry::Unlimited;
        }
        let decision = state.limiter.acquire(self.time_at(now), priority);
        self.publish(&state);
        match decision {
            Decision::Admitted => Entry::Admitted,
            Decision::Shed(reason) => Entry::Shed(reason),
            Decision::Queued(ticket) => {
                let (granted, wait) = oneshot::channel();
                state.waiters.insert(ticket, granted);
                Entry::Queued(ticket, wait, state.limiter.max_wait())
            }
        }
    }

    async fn wait(
        self: &Arc<Self>,
        ticket: Ticket,
        granted: oneshot::Receiver<Answer>,
        max_wait: Duration,
        priority: Priority,
        started: Instant,
    ) -> Result<Permit, ShedReason> {
        // The ticket leaves the queue however this ends (a timeout, or the request
        // dropped while waiting): a slot granted meanwhile is given back.
        let mut queued = TicketGuard {
            admission: Arc::clone(self),
            ticket: Some(ticket),
        };
        match tokio::time::timeout(max_wait, granted).await {
            Ok(Ok(Ok(()))) => {
                queued.ticket = None;
                Ok(self.admitted(started, true))
            }
            Ok(Ok(Err(reason))) => {
                queued.ticket = None;
                Err(self.shed_after_waiting(priority, reason, started.elapsed()))
            }
            _ => {
                #[expect(clippy::expect_used, reason = "only a grant or a refusal clears it")]
                let ticket = queued.ticket.take().expect("still queued");
                if queued.admission.cancel(ticket) {
                    Err(self.shed_after_waiting(priority, ShedReason::WaitExpired, max_wait))
                } else {
                    // Granted just as the wait ran out: take the slot.
                    Ok(self.admitted(started, true))
                }
            }
        }
    }

    /// Counts a request shed from the queue after `waited`.
    fn shed_after_waiting(
        &self,
        priority: Priority,
        reason: ShedReason,
        waited: Duration,
    ) -> ShedReason {
        self.metrics.shed_after_body(priority, reason);
        self.metrics.queue_delay.observe(waited.as_secs_f64());
        reason
    }

    /// A slot for a request that waited in the queue since `started`.
    fn admitted(self: &Arc<Self>, started: Instant, counted: bool) -> Permit {
        let now = Instant::now();
        self.admitted_at(now, now.saturating_duration_since(started), counted)
    }

    fn admitted_at(self: &Arc<Self>, now: Instant, waited: Duration, counted: bool) -> Permit {
        self.metrics.queue_delay.observe(waited.as_secs_f64());
        Permit {
            admission: Arc::clone(self),
            since: now,
            worked: false,
            counted,
        }
    }

    /// Takes `ticket` out of the queue; `false` when it was granted meanwhile (and its
    /// slot is then released here).
    fn cancel(&self, ticket: Ticket) -> bool {
        let mut state = self.state();
        state.waiters.remove(&ticket);
        if state.limiter.cancel(self.now(), ticket) {
            self.publish(&state);
            return true;
        }
        drop(state);
        false
    }

    fn release(&self, now: Instant, work: Option<Duration>) {
        let mut state = self.state();
        let released = state.limiter.release(self.time_at(now), work);
        // A granted slot belongs to its waiter from now on, delivered or not: a waiter
        // that is gone gives it back through its TicketGuard.
        let answers = released.granted.into_iter().map(|t| (t, Ok(()))).chain(
            released
                .shed
                .into_iter()
                .map(|t| (t, Err(ShedReason::Overloaded))),
        );
        for (ticket, answer) in answers {
            if let Some(waiter) = state.waiters.remove(&ticket) {
                let _ = waiter.send(answer);
            }
        }
        self.publish(&state);
    }

    /// Sets the gauges from the state, under the lock the caller already holds.
    fn publish(&self, state: &State) {
        self.metrics.limit.set(state.limiter.limit() as i64);
        self.metrics.inflight.set(state.limiter.inflight() as i64);
        self.metrics
            .overloaded
            .set(state.limiter.overloaded() as i64);
    }

    fn now(&self) -> limiter::Time {
        self.time_at(Instant::now())
    }

    /// The limiter's clock at `instant`.
    fn time_at(&self, instant: Instant) -> limiter::Time {
        instant.saturating_duration_since(self.origin)
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }
}

impl Permit {
    /// Marks that the request did its work (verify, spool), so its time counts toward the
    /// limit.
    pub fn worked(&mut self) {
        self.worked = true;
    }
}

impl Drop for BodyClaim {
    fn drop(&mut self) {
        let mut state = self.admission.state();
        if let Some(ticket) = self.ticket {
            state.limiter.body_read(ticket);
        }
        state.bodies.release(self.source, self.body_bytes);
        let held = state.bodies.held();
        drop(state);
        self.admission.metrics.body_bytes.set(held as i64);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.counted {
            let now = Instant::now();
            let work = self
                .worked
                .then(|| now.saturating_duration_since(self.since));
            self.admission.release(now, work);
        }
    }
}

/// A queued request's answer: a slot, or why it was shed while waiting.
type Answer = Result<(), ShedReason>;

enum Entry {
    /// Admission is off: no slot is counted.
    Unlimited,
    Admitted,
    /// Queued, with the receiver of its grant and how long it may wait.
    Queued(Ticket, oneshot::Receiver<Answer>, Duration),
    Shed(ShedReason),
}

/// Leaves the queue if the waiting request is dropped before it got an answer.
struct TicketGuard {
    admission: Arc<Admission>,
    ticket: Option<Ticket>,
}

impl Drop for TicketGuard {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take()
            && !self.admission.cancel(ticket)
        {
            self.admission.release(Instant::now(), None);
        }
    }
}

/// The spool's watermarks: past the first `low` is shed, past the second only `high`
/// gets in. (A full spool refuses at append, as ever.)
fn spool_pressure(
    settings: &AdmissionSettings,
    priority: Priority,
    fill: f64,
) -> Option<ShedReason> {
    let shed = (fill > settings.spool_high_only_above && priority < Priority::High)
        || (fill > settings.spool_shed_low_above && priority == Priority::Low);
    shed.then_some(ShedReason::SpoolPressure)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_spool() -> SpoolFill {
        spool_at(0.0)
    }

    fn spool_at(fill: f64) -> SpoolFill {
        Arc::new(move || fill)
    }

    #[test]
    fn the_spool_fill_it_was_given_sheds_low_then_all_but_high() {
        let route: Arc<str> = Arc::from("r");
        let source: IpAddr = "198.51.100.1".parse().unwrap();
        let fill = Arc::new(parking_lot::Mutex::new(0.6));
        let reading = Arc::clone(&fill);
        let admission = Admission::new(
            settings(true),
            AdmissionMetrics::default(),
            None,
            Arc::new(move || *reading.lock()),
        );
        let check = |priority| {
            admission
                .check(&route, priority, None, source, 1024)
                .is_ok()
        };
        assert!(!check(Priority::Low), "over spool_shed_low_above");
        assert!(check(Priority::Default));
        *fill.lock() = 0.9;
        assert!(!check(Priority::Default), "over spool_high_only_above");
        assert!(check(Priority::High));
        *fill.lock() = 0.1;
        assert!(check(Priority::Low));
    }

    fn settings(enabled: bool) -> AdmissionSettings {
        AdmissionSettings {
            enabled,
            limiter: limiter::Settings {
                initial_limit: 2.0,
                min_limit: 1.0,
                max_limit: 4.0,
                max_queue: 2,
                max_wait: Duration::from_millis(200),
                ..limiter::Settings::default()
            },
            spool_shed_low_above: 0.5,
            spool_high_only_above: 0.8,
            trusted: vec!["192.0.2.0/24".parse().unwrap()],
            max_body_bytes: 8 << 20,
        }
    }

    /// A reload that turns admission on or off leaves no slot counted twice or never.
    #[tokio::test]
    async fn a_reload_applies_to_the_next_request_and_balances_the_slots_given_before_it() {
        let admission = Admission::new(
            settings(false),
            AdmissionMetrics::default(),
            None,
            empty_spool(),
        );
        let uncounted = admission.acquire(Priority::Default).await.unwrap();
        admission.reconfigure(settings(true));
        let counted = admission.acquire(Priority::Default).await.unwrap();
        assert_eq!(admission.state().limiter.inflight(), 1);
        drop(uncounted);
        assert_eq!(admission.state().limiter.inflight(), 1);
        let mut tighter = settings(true);
        tighter.limiter.max_limit = 1.0;
        tighter.trusted.clear();
        admission.reconfigure(tighter);
        assert_eq!(admission.state().limiter.limit(), 1);
        assert_eq!(
            admission.state().trusted,
            NetSet::new(&settings(true).trusted),
            "the exemption stays with connections.trusted until a restart"
        );
        admission.reconfigure(settings(false));
        drop(counted);
        assert_eq!(admission.state().limiter.inflight(), 0);
    }

    #[test]
    fn spool_watermarks_shed_low_then_everything_but_high() {
        let s = settings(true);
        assert_eq!(spool_pressure(&s, Priority::Low, 0.4), None);
        assert_eq!(
            spool_pressure(&s, Priority::Low, 0.6),
            Some(ShedReason::SpoolPressure)
        );
        assert_eq!(spool_pressure(&s, Priority::Default, 0.6), None);
        assert_eq!(
            spool_pressure(&s, Priority::Default, 0.9),
            Some(ShedReason::SpoolPressure)
        );
        assert_eq!(spool_pressure(&s, Priority::High, 0.99), None);
    }

    #[tokio::test]
    async fn a_waiter_gets_the_slot_a_permit_gives_back_and_a_dropped_waiter_gives_it_on() {
        let admission = Admission::new(
            settings(true),
            AdmissionMetrics::default(),
            None,
            empty_spool(),
        );
        let first = admission.acquire(Priority::High).await.unwrap();
        let _second = admission.acquire(Priority::High).await.unwrap();
        let waiting = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.acquire(Priority::High).await.is_ok() }
        });
        let abandoned = tokio::spawn({
            let admission = Arc::clone(&admission);
            async move { admission.acquire(Priority::High).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        abandoned.abort();
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(
            waiting.await.unwrap(),
            "the queued request got the freed slot"
        );
        let state = admission.state.lock();
        assert_eq!((state.limiter.inflight(), state.limiter.queued()), (1, 0));
        assert!(state.waiters.is_empty());
    }

    #[tokio::test]
    async fn a_wait_past_max_wait_is_shed() {
        let admission = Admission::new(
            settings(true),
            AdmissionMetrics::default(),
            None,
            empty_spool(),
        );
        let _held: Vec<Permit> = vec![
            admission.acquire(Priority::High).await.unwrap(),
            admission.acquire(Priority::High).await.unwrap(),
        ];
        let started = Instant::now();
        let shed = admission.acquire(Priority::High).await.err();
        assert_eq!(shed, Some(ShedReason::WaitExpired));
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(shed_after_body(&admission, Priority::High), 1);
    }

    #[tokio::test]
    async fn a_default_waiter_is_shed_once_the_queue_stands_and_a_high_one_is_served() {
        let mut s = settings(true);
        s.limiter.max_wait = Duration::from_secs(2);
        s.limiter.max_queue = 4;
        let admission = Admission::new(s, AdmissionMetrics::default(), None, empty_spool());
        let mut held = vec![
            admission.acquire(Priority::High).await.unwrap(),
            admission.acquire(Priority::High).await.unwrap(),
        ];
        let started = Instant::now();
        let waiter = |priority| {
            let admission = Arc::clone(&admission);
            tokio::spawn(async move { admission.acquire(priority).await.map(drop) })
        };
        let default = waiter(Priority::Default);
        let high = waiter(Priority::High);
        // The first CoDel interval ends (at 120 ms) on the wait of 0 the permits saw; the
        // second (from 250 ms) on the queue that stood through it.
        let route: Arc<str> = Arc::from("r");
        let source: IpAddr = "198.51.100.7".parse().unwrap();
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(
            admission
                .check(&route, Priority::High, None, source, 1024)
                .is_ok()
        );
        tokio::time::sleep(Duration::from_millis(130)).await;
        held.pop();
        assert_eq!(default.await.unwrap(), Err(ShedReason::Overloaded));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "not at max_wait"
        );
        assert_eq!(high.await.unwrap(), Ok(()));
        assert_eq!(shed_after_body(&admission, Priority::Default), 1);
        assert_eq!(shed_after_body(&admission, Priority::High), 0);
    }

    /// The budget (8 MiB here, a source's share 1 MiB) holds whether admission is on
    /// or off; a claim gives its room back when dropped, and a refusal for another
    /// reason keeps none.
    #[tokio::test]
    async fn body_claims_hold_room_in_the_body_budget_until_dropped() {
        for enabled in [true, false] {
            let admission = Admission::new(
                settings(enabled),
                AdmissionMetrics::default(),
                None,
                empty_spool(),
            );
            let route: Arc<str> = Arc::from("r");
            let one: IpAddr = "198.51.100.7".parse().unwrap();
            let other: IpAddr = "198.51.100.8".parse().unwrap();
            let mib = 1 << 20;
            let check =
                |source, bytes| admission.check(&route, Priority::High, None, source, bytes);
            let first = check(one, mib).expect("a share's worth");
            assert!(matches!(
                check(one, 1),
                Err(Refusal::Shed(ShedReason::SourceBodyBytes))
            ));
            let second = check(other, mib).expect("another source's share");
            assert_eq!(admission.state().bodies.held(), 2 * mib);
            drop(first);
            drop(second);
            assert_eq!(admission.state().bodies.held(), 0);
            check(one, mib).expect("room given back");
        }
        let admission = Admission::new(
            settings(true),
            AdmissionMetrics::default(),
            None,
            empty_spool(),
        );
        let route: Arc<str> = Arc::from("r");
        let source: IpAddr = "198.51.100.7".parse().unwrap();
        let _held = admission.acquire(Priority::High).await.unwrap();
        let _claim = admission.check(&route, Priority::Low, None, source, 1024);
        let refused = admission.check(&route, Priority::Low, None, source, 1024);
        assert!(matches!(refused, Err(Refusal::Shed(ShedReason::NoSlot))));
        assert_eq!(
            admission.state().bodies.held(),
            1024,
            "the refused one keeps none"
        );
    }

    #[tokio::test]
    async fn a_body_claim_holds_a_free_slot_until_dropped() {
        let admission = Admission::new(
            settings(true),
            AdmissionMetrics::default(),
            None,
            empty_spool(),
        );
        let route: Arc<str> = Arc::from("r");
        let source: IpAddr = "198.51.100.7".parse().unwrap();
        let low =
            |admission: &Arc<Admission>| admission.check(&route, Priority::Low, None, source, 1024);
        let _held = admission.acquire(Priority::High).await.unwrap();
        let claim = low(&admission).expect("one slot free");
        assert!(matches!(
            low(&admission),
            Err(Refusal::Shed(ShedReason::NoSlot))
        ));
        drop(claim);
        assert!(
            low(&admission).is_ok(),
            "the dropped claim gave the slot back"
        );
    }

    #[test]
    fn rate_limits_spare_trusted_sources_and_off_admits_everything() {
        let admission = Admission::new(
            settings(true),
            AdmissionMetrics::default(),
            None,
            empty_spool(),
        );
        let route: Arc<str> = Arc::from("r");
        let rate = Some(Rate {
            per_second: 1.0,
            burst: 1.0,
        });
        let outsider: IpAddr = "198.51.100.7".parse().unwrap();
        let trusted: IpAddr = "192.0.2.7".parse().unwrap();
        assert!(
            admission
                .check(&route, Priority::High, rate, outsider, 1024)
                .is_ok()
        );
        assert!(matches!(
            admission.check(&route, Priority::High, rate, outsider, 1024),
            Err(Refusal::RateLimited(_))
        ));
        for _ in 0..5 {
            assert!(
                admission
                    .check(&route, Priority::High, rate, trusted, 1024)
                    .is_ok()
            );
        }
        let off = Admission::new(
            settings(false),
            AdmissionMetrics::default(),
            None,
            spool_at(1.0),
        );
        for _ in 0..5 {
            assert!(
                off.check(&route, Priority::Low, rate, outsider, 1024)
                    .is_ok()
            );
        }
        assert_eq!(
            shed_after_body(&admission, Priority::High),
            0,
            "refused before the body"
        );
    }

    fn shed_after_body(admission: &Admission, priority: Priority) -> u64 {
        admission.metrics.shed_after_body_count(priority)
    }
}
