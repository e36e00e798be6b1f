//! The admission decision, pure: no I/O, time passed in (a `Duration` since any fixed
//! origin), so every rule is tested on a scripted clock.
//!
//! - **Adaptive concurrency limit** (Gradient2, after Netflix's concurrency-limits): a
//!   fast and a slow average of the time requests spend doing real work, taken once per
//!   100 ms window; the gradient `slow / fast`, clamped to 0.5–1.0, shrinks the limit
//!   when work gets slower; headroom of `sqrt(limit)` lets it grow while latency is
//!   steady; the step is smoothed.
//! - **Overload flag** (CoDel, RFC 8289, as Facebook's Wangle uses it for request
//!   queues): set when the *minimum* queueing delay over a whole interval stayed above
//!   the target — a standing queue, not a burst. The delay sampled is the age of the
//!   oldest waiter (0 when the queue is empty): with a LIFO queue the request served
//!   next is the newest, whose short wait would hide a queue that never drains.
//! - **A bounded wait queue** with a maximum wait, served newest first (LIFO): the newest
//!   request is the likeliest to still meet its sender's deadline; high-priority waiters
//!   go before the others. While overloaded, a default-priority waiter that has waited
//!   over twice the target is shed (Wangle's rule): LIFO would leave it at the back until
//!   `max_wait`, and the few that got a slot late would be every admitted request's tail.
//! - **Priorities**: `High` is shed only when the queue is full, `Default` also while
//!   overloaded, `Low` whenever no slot is free.
//! - **Requests reading their bodies want slots too.** A request let in at its head
//!   counts as `reading` until its body is in: its claim is held against the free slots
//!   (else every head that arrives while one slot is free reads its body, and all but one
//!   are shed after it), and a default-priority head is shed when a limit's worth of
//!   requests already read bodies or wait (else, between two overload intervals, heads
//!   pile in faster than slots free up and are shed once their bodies were paid for).
//!   A claim older than `max_wait` stops counting: that body is a slow upload, and slow
//!   uploaders must not be able to crowd out other senders' heads.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// A point in time, as a duration since an origin the caller fixes.
pub(crate) type Time = Duration;

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub initial_limit: f64,
    pub min_limit: f64,
    pub max_limit: f64,
    /// Weight of each new limit step (Gradient2's default 0.2).
    pub smoothing: f64,
    /// CoDel target: a minimum wait above this for a whole `interval` is overload.
    pub target_delay: Duration,
    pub interval: Duration,
    /// The longest a request waits for a slot before it is shed.
    pub max_wait: Duration,
    pub max_queue: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            initial_limit: 64.0,
            min_limit: 8.0,
            max_limit: 1024.0,
            smoothing: 0.2,
            target_delay: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            max_wait: Duration::from_millis(500),
            max_queue: 1024,
        }
    }
}

/// How a route's requests are treated under overload; set by route config (by default
/// from how its provider retries), never by a request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Shed whenever no slot is free.
    Low,
    /// Shed while overloaded (or the queue is full).
    Default,
    /// Shed only when the wait queue is full.
    High,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Default => "default",
            Priority::High => "high",
        }
    }
}

/// Why a request was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShedReason {
    /// A low-priority request found no free slot.
    NoSlot,
    /// A default-priority request arrived while the overload flag was up, or had waited
    /// over twice the target while it was.
    Overloaded,
    QueueFull,
    /// Waited `max_wait` without getting a slot.
    WaitExpired,
    /// The spool is filling: lower priorities are shed first.
    SpoolPressure,
    /// A default-priority head found a limit's worth of requests already reading their
    /// bodies or waiting for a slot.
    Backlog,
    /// The edge-wide budget of body bytes in memory is taken (`admission.max_body_bytes`).
    BodyBytes,
    /// The source's share of that budget is taken.
    SourceBodyBytes,
    /// The spool writer's queue holds `spool.max_queued_bytes` of bodies (a slow or
    /// stalled disk): refused before the body is read.
    SpoolQueue,
}

impl ShedReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::NoSlot => "no_slot",
            ShedReason::Overloaded => "overloaded",
            ShedReason::QueueFull => "queue_full",
            ShedReason::WaitExpired => "wait_expired",
            ShedReason::SpoolPressure => "spool_pressure",
            ShedReason::Backlog => "backlog",
            ShedReason::BodyBytes => "body_bytes",
            ShedReason::SourceBodyBytes => "source_body_bytes",
            ShedReason::SpoolQueue => "spool_queue",
        }
    }
}

/// A place in the wait queue.
pub(crate) type Ticket = u64;

/// What a released slot did to the queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Released {
    /// Tickets granted a slot, newest first.
    pub granted: Vec<Ticket>,
    /// Tickets taken out of the queue and shed ([`ShedReason::Overloaded`]).
    pub shed: Vec<Ticket>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Admitted,
    /// Wait for [`Limiter::release`] to grant the ticket, or cancel it after `max_wait`.
    Queued(Ticket),
    Shed(ShedReason),
}

#[derive(Clone, Debug)]
pub(crate) struct Limiter {
    settings: Settings,
    limit: f64,
    inflight: usize,
    /// Requests let in at their head whose bodies are still being read, by claim, with
    /// when they were let in (claims are numbered in time order).
    reading: BTreeMap<Ticket, Time>,
    next_claim: Ticket,
    queue: VecDeque<Waiter>,
    next_ticket: Ticket,
    fast_rtt: Option<f64>,
    slow_rtt: Option<f64>,
    /// Work times of the current limit window: their sum and count.
    window_work: (f64, u32),
    window_end: Time,
    interval_end: Time,
    min_delay: Option<Duration>,
    overloaded: bool,
}

#[derive(Clone, Copy, Debug)]
struct Waiter {
    ticket: Ticket,
    since: Time,
    priority: Priority,
}

impl Limiter {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            limit: settings.initial_limit,
            interval_end: settings.interval,
            settings,
            inflight: 0,
            reading: BTreeMap::new(),
            next_claim: 0,
            queue: VecDeque::new(),
            next_ticket: 0,
            fast_rtt: None,
            slow_rtt: None,
            window_work: (0.0, 0),
            window_end: LIMIT_WINDOW,
            min_delay: None,
            overloaded: false,
        }
    }

    /// New settings from a reload. What was learnt stays: the limit (moved into the new
    /// bounds), the latency averages, the queue and the bodies being read.
    pub(crate) fn reconfigure(&mut self, settings: Settings) {
        self.limit = self.limit.clamp(settings.min_limit, settings.max_limit);
        self.settings = settings;
    }

    /// Asked before reading a body, so shedding costs no body bytes: the rules of
    /// [`Limiter::acquire`], with the requests already reading bodies counted as wanting
    /// slots. `Ok` lets the request read its body: its claim counts as reading until
    /// [`Limiter::body_read`], or for `max_wait` at most.
    pub(crate) fn head(&mut self, now: Time, priority: Priority) -> Result<Ticket, ShedReason> {
        self.roll_interval(now);
        let max_wait = self.settings.max_wait;
        while let Some(entry) = self.reading.first_entry()
            && now.saturating_sub(*entry.get()) >= max_wait
        {
            entry.remove();
        }
        if let Some(reason) = self.head_rule(priority) {
            return Err(reason);
        }
        let claim = self.next_claim;
        self.next_claim += 1;
        self.reading.insert(claim, now);
        Ok(claim)
    }

    /// The request let in by [`Limiter::head`] with `claim` has its body, or gave up.
    pub(crate) fn body_read(&mut self, claim: Ticket) {
        self.reading.remove(&claim);
    }

    pub(crate) fn acquire(&mut self, now: Time, priority: Priority) -> Decision {
        self.roll_interval(now);
        if self.slot_free() {
            self.inflight += 1;
            self.observe_queue(now);
            return Decision::Admitted;
        }
        if let Some(reason) = self.queue_rule(priority) {
            return Decision::Shed(reason);
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.queue.push_back(Waiter {
            ticket,
            since: now,
            priority,
        });
        Decision::Queued(ticket)
    }

    /// A slot is given back; `work` is how long it did real work (`None` for a request
    /// that ended fast without any, which says nothing about capacity). Returns the
    /// tickets granted a slot and those shed from the queue.
    pub(crate) fn release(&mut self, now: Time, work: Option<Duration>) -> Released {
        self.inflight = self.inflight.saturating_sub(1);
        if let Some(work) = work {
            self.window_work.0 += work.as_secs_f64();
            self.window_work.1 += 1;
        }
        if now >= self.window_end {
            let (sum, count) = std::mem::take(&mut self.window_work);
            if count > 0 {
                self.update_limit(sum / f64::from(count));
            }
            self.window_end = now + LIMIT_WINDOW;
        }
        self.roll_interval(now);
        let shed = self.shed_stale(now);
        let mut granted = Vec::new();
        while self.inflight < self.limit() {
            let Some(waiter) = self.next_waiter() else {
                break;
            };
            self.inflight += 1;
            granted.push(waiter.ticket);
        }
        self.observe_queue(now);
        Released { granted, shed }
    }

    /// Takes a ticket out of the queue (waited `max_wait`, or its client went away).
    /// `false` when it is no longer queued: it was granted meanwhile, and its slot must
    /// be released.
    pub(crate) fn cancel(&mut self, now: Time, ticket: Ticket) -> bool {
        let Some(at) = self.queue.iter().position(|w| w.ticket == ticket) else {
            return false;
        };
        self.queue.remove(at);
        self.roll_interval(now);
        self.observe_queue(now);
        true
    }

    /// The current limit, whole slots.
    pub(crate) fn limit(&self) -> usize {
        self.limit as usize
    }

    pub(crate) fn inflight(&self) -> usize {
        self.inflight
    }

    #[cfg(test)]
    fn reading(&self) -> usize {
        self.reading.len()
    }

    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn overloaded(&self) -> bool {
        self.overloaded
    }

    pub(crate) fn max_wait(&self) -> Duration {
        self.settings.max_wait
    }

    fn slot_free(&self) -> bool {
        self.inflight < self.limit() && self.queue.is_empty()
    }

    /// At a head: free slots are those neither held nor claimed by a body being read.
    fn head_rule(&self, priority: Priority) -> Option<ShedReason> {
        if self.inflight + self.reading.len() < self.limit() && self.queue.is_empty() {
            return None;
        }
        self.queue_rule(priority).or_else(|| {
            let backlog = self.reading.len() + self.queue.len() >= self.limit();
            (priority == Priority::Default && backlog).then_some(ShedReason::Backlog)
        })
    }

    /// With no slot free: shed by priority, or `None` to queue.
    fn queue_rule(&self, priority: Priority) -> Option<ShedReason> {
        let full = self.queue.len() >= self.settings.max_queue;
        match priority {
            Priority::Low => Some(ShedReason::NoSlot),
            _ if full => Some(ShedReason::QueueFull),
            Priority::Default if self.overloaded => Some(ShedReason::Overloaded),
            _ => None,
        }
    }

    /// Ends the CoDel interval when it is over: overloaded if even its smallest queueing
    /// delay was above target (an interval without events counts the queue as it is).
    fn roll_interval(&mut self, now: Time) {
        if now < self.interval_end {
            return;
        }
        let delay = self.min_delay.unwrap_or_else(|| self.oldest_wait(now));
        self.overloaded = delay > self.settings.target_delay;
        self.min_delay = None;
        self.interval_end = now + self.settings.interval;
    }

    /// While overloaded: takes out the default-priority waiters that waited over twice
    /// the target. High-priority ones wait on, up to `max_wait`.
    fn shed_stale(&mut self, now: Time) -> Vec<Ticket> {
        let stale = 2 * self.settings.target_delay;
        if !self.overloaded || self.oldest_wait(now) <= stale {
            return Vec::new();
        }
        let mut shed = Vec::new();
        self.queue.retain(|waiter| {
            let keep = waiter.priority == Priority::High || now - waiter.since <= stale;
            if !keep {
                shed.push(waiter.ticket);
            }
            keep
        });
        shed
    }

    /// The newest high-priority waiter, else the newest: a sender that does not retry
    /// goes before the ones that will, and the newest is likeliest to meet its deadline.
    fn next_waiter(&mut self) -> Option<Waiter> {
        let at = self
            .queue
            .iter()
            .rposition(|w| w.priority == Priority::High)
            .or_else(|| self.queue.len().checked_sub(1))?;
        self.queue.remove(at)
    }

    /// Samples the queueing delay: how long the oldest waiter has waited (0: no queue).
    fn observe_queue(&mut self, now: Time) {
        let delay = self.oldest_wait(now);
        self.min_delay = Some(self.min_delay.map_or(delay, |min| min.min(delay)));
    }

    fn oldest_wait(&self, now: Time) -> Duration {
        self.queue
            .front()
            .map_or(Duration::ZERO, |oldest| now.saturating_sub(oldest.since))
    }

    /// Gradient2: limit ← smooth(gradient × limit + sqrt(limit)).
    fn update_limit(&mut self, rtt: f64) {
        if rtt <= 0.0 {
            return;
        }
        let fast = ewma(self.fast_rtt, rtt, FAST_WEIGHT);
        let mut slow = ewma(self.slow_rtt, rtt, SLOW_WEIGHT);
        // After a slow period the slow average lags far behind: let it follow down, so
        // the limit is not held at its floor once work is fast again.
        if slow / fast > 2.0 {
            slow *= 0.95;
        }
        self.fast_rtt = Some(fast);
        self.slow_rtt = Some(slow);
        let gradient = (slow / fast).clamp(0.5, 1.0);
        let next = gradient * self.limit + self.limit.sqrt();
        let smoothed =
            self.limit * (1.0 - self.settings.smoothing) + next * self.settings.smoothing;
        self.limit = smoothed.clamp(self.settings.min_limit, self.settings.max_limit);
    }
}

fn ewma(average: Option<f64>, sample: f64, weight: f64) -> f64 {
    average.map_or(sample, |a| a + weight * (sample - a))
}

/// The limit moves once per window, on the window's mean work time: per request, its
/// `sqrt(limit)` headroom would be added thousands of times a second and outrun any
/// latency signal (the limit ran to its maximum under overload).
const LIMIT_WINDOW: Duration = Duration::from_millis(100);
/// About the last 2 windows.
const FAST_WEIGHT: f64 = 0.5;
/// About the last 20 windows (2 s).
const SLOW_WEIGHT: f64 = 0.05;

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Time {
        Duration::from_millis(n)
    }

    fn settings() -> Settings {
        Settings {
            initial_limit: 10.0,
            min_limit: 2.0,
            max_limit: 100.0,
            max_queue: 4,
            ..Settings::default()
        }
    }

    #[test]
    fn a_reload_keeps_the_learnt_limit_inside_the_new_bounds() {
        let mut l = busy();
        for _ in 0..4 {
            assert!(matches!(
                l.acquire(ms(0), Priority::High),
                Decision::Queued(_)
            ));
        }
        l.reconfigure(Settings {
            max_limit: 6.0,
            max_queue: 2,
            ..settings()
        });
        assert_eq!((l.limit(), l.inflight(), l.queued()), (6, 10, 4));
        assert_eq!(
            l.acquire(ms(1), Priority::High),
            Decision::Shed(ShedReason::QueueFull),
            "the new queue bound holds at once"
        );
        l.reconfigure(Settings {
            min_limit: 50.0,
            initial_limit: 50.0,
            ..settings()
        });
        assert_eq!(l.limit(), 50);
    }

    /// A limiter whose 10 slots are all taken at 0 ms.
    fn busy() -> Limiter {
        let mut l = Limiter::new(settings());
        for _ in 0..10 {
            assert_eq!(l.acquire(ms(0), Priority::High), Decision::Admitted);
        }
        l
    }

    /// Queues a request, which must not be admitted or shed.
    fn queued(l: &mut Limiter, at: u64, priority: Priority) -> Ticket {
        match l.acquire(ms(at), priority) {
            Decision::Queued(t) => t,
            other => panic!("{other:?}"),
        }
    }

    /// Runs `rounds` of `concurrency` low-priority requests (shed, not queued, when no
    /// slot is free) that each work `work`; returns the clock after.
    fn steady(
        l: &mut Limiter,
        start: Time,
        rounds: u64,
        concurrency: usize,
        work: Duration,
    ) -> Time {
        let mut now = start;
        for _ in 0..rounds {
            let admitted = (0..concurrency)
                .filter(|_| l.acquire(now, Priority::Low) == Decision::Admitted)
                .count();
            now += work;
            for _ in 0..admitted {
                l.release(now, Some(work));
            }
        }
        now
    }

    #[test]
    fn the_limit_shrinks_when_work_slows_and_recovers_when_it_is_fast_again() {
        let mut l = Limiter::new(settings());
        // 2 s steady, 2 s ten times slower, 4 s fast again.
        let now = steady(&mut l, ms(0), 1000, 8, ms(2));
        let steady_limit = l.limit();
        assert!(
            steady_limit >= 20,
            "steady latency lets the limit grow: {steady_limit}"
        );
        let now = steady(&mut l, now, 100, 8, ms(20));
        let slowed = l.limit();
        assert!(
            slowed < steady_limit / 2,
            "latency x10: {steady_limit} -> {slowed}"
        );
        steady(&mut l, now, 2000, 8, ms(2));
        assert!(
            l.limit() > slowed * 2,
            "fast again: {slowed} -> {}",
            l.limit()
        );
    }

    #[test]
    fn the_limit_moves_once_per_window_however_many_requests_end_in_it() {
        let mut l = Limiter::new(settings());
        for _ in 0..1000 {
            assert_eq!(l.acquire(ms(150), Priority::Low), Decision::Admitted);
            l.release(ms(150), Some(ms(2)));
        }
        // One step, 10 -> 10.6; a step per request would have reached the maximum.
        assert_eq!(l.limit(), 10);
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let mut l = Limiter::new(settings());
        steady(&mut l, ms(0), 2000, 4, ms(1));
        assert!(l.limit() <= 100);
        let mut l = Limiter::new(settings());
        let now = steady(&mut l, ms(0), 50, 4, ms(1));
        steady(&mut l, now, 500, 4, ms(500));
        assert!(l.limit() >= 2);
    }

    #[test]
    fn a_burst_queues_without_raising_the_overload_flag() {
        let mut l = Limiter::new(settings());
        for _ in 0..10 {
            assert_eq!(l.acquire(ms(0), Priority::High), Decision::Admitted);
        }
        let queued = l.acquire(ms(1), Priority::Default);
        assert!(matches!(queued, Decision::Queued(_)));
        // The burst drains quickly; later requests get a slot at once.
        for _ in 0..10 {
            l.release(ms(3), None);
        }
        for t in [50, 120, 180, 250] {
            assert_eq!(l.acquire(ms(t), Priority::Default), Decision::Admitted);
            l.release(ms(t + 1), None);
        }
        assert!(!l.overloaded());
    }

    #[test]
    fn a_standing_queue_raises_the_flag_and_sheds_default_but_not_high() {
        let mut l = Limiter::new(settings());
        for _ in 0..10 {
            l.acquire(ms(0), Priority::High);
        }
        // Every slot stays busy: each waiter is served 20 ms after it queued.
        let mut now = ms(0);
        let mut waiting = Vec::new();
        while now < ms(300) {
            if let Decision::Queued(ticket) = l.acquire(now, Priority::High) {
                waiting.push(ticket);
            }
            now += ms(10);
            if now >= ms(20) {
                l.release(now, None);
            }
        }
        assert!(
            l.overloaded(),
            "min wait stayed above 5 ms for whole intervals"
        );
        assert_eq!(l.head(now, Priority::Default), Err(ShedReason::Overloaded));
        assert_eq!(
            l.acquire(now, Priority::Default),
            Decision::Shed(ShedReason::Overloaded)
        );
        assert!(l.head(now, Priority::High).is_ok());
    }

    #[test]
    fn a_body_being_read_claims_a_free_slot_until_it_is_in_or_max_wait_passed() {
        let mut l = Limiter::new(settings());
        for _ in 0..9 {
            assert_eq!(l.acquire(ms(0), Priority::High), Decision::Admitted);
        }
        let last = l.head(ms(1), Priority::Low).expect("the last free slot");
        assert_eq!(
            l.head(ms(1), Priority::Low),
            Err(ShedReason::NoSlot),
            "claimed by the body being read"
        );
        let high = l.head(ms(1), Priority::High).expect("high may queue");
        assert_eq!(l.reading(), 2);
        l.body_read(last);
        assert_eq!(l.acquire(ms(2), Priority::Low), Decision::Admitted);
        l.body_read(high);
        assert_eq!(l.reading(), 0);
        assert_eq!(l.head(ms(3), Priority::Low), Err(ShedReason::NoSlot));

        l.release(ms(4), None);
        let slow = l.head(ms(5), Priority::Low).expect("a slot was released");
        assert_eq!(l.head(ms(504), Priority::Low), Err(ShedReason::NoSlot));
        assert!(
            l.head(ms(505), Priority::Low).is_ok(),
            "a body slower than max_wait no longer claims the slot"
        );
        l.body_read(slow);
    }

    #[test]
    fn a_default_head_is_shed_behind_a_limit_of_bodies_and_waiters_but_not_a_high_one() {
        let mut l = busy();
        for t in 0..3 {
            queued(&mut l, 1 + t, Priority::High);
        }
        let claims: Vec<Ticket> = (0..7)
            .map(|_| l.head(ms(4), Priority::High).unwrap())
            .collect();
        assert!(!l.overloaded());
        assert_eq!(
            l.head(ms(4), Priority::Default),
            Err(ShedReason::Backlog),
            "3 waiting and 7 reading: a limit's worth ahead of it"
        );
        assert!(l.head(ms(4), Priority::High).is_ok());
        l.body_read(claims[0]);
        l.body_read(claims[1]);
        assert!(
            l.head(ms(4), Priority::Default).is_ok(),
            "9 ahead: it may queue"
        );
    }

    #[test]
    fn priorities_shed_in_order() {
        let mut l = Limiter::new(settings());
        for _ in 0..10 {
            l.acquire(ms(0), Priority::High);
        }
        assert_eq!(
            l.acquire(ms(1), Priority::Low),
            Decision::Shed(ShedReason::NoSlot)
        );
        for _ in 0..4 {
            assert!(matches!(
                l.acquire(ms(1), Priority::Default),
                Decision::Queued(_)
            ));
        }
        assert_eq!(
            l.acquire(ms(1), Priority::High),
            Decision::Shed(ShedReason::QueueFull)
        );
        assert_eq!(
            l.acquire(ms(1), Priority::Default),
            Decision::Shed(ShedReason::QueueFull)
        );
    }

    #[test]
    fn the_queue_is_served_newest_first() {
        let mut l = Limiter::new(settings());
        for _ in 0..10 {
            l.acquire(ms(0), Priority::High);
        }
        let tickets: Vec<Ticket> = (0..3)
            .map(|i| match l.acquire(ms(i), Priority::High) {
                Decision::Queued(t) => t,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(l.release(ms(4), None).granted, vec![tickets[2]]);
        assert_eq!(l.release(ms(5), None).granted, vec![tickets[1]]);
        assert_eq!(l.inflight(), 10);
    }

    #[test]
    fn high_priority_waiters_are_served_before_the_others() {
        let mut l = busy();
        let high_old = queued(&mut l, 1, Priority::High);
        let default_old = queued(&mut l, 2, Priority::Default);
        let high_new = queued(&mut l, 3, Priority::High);
        let default_new = queued(&mut l, 4, Priority::Default);
        let order: Vec<Ticket> = (5..9)
            .flat_map(|at| l.release(ms(at), None).granted)
            .collect();
        assert_eq!(order, vec![high_new, high_old, default_new, default_old]);
    }

    #[test]
    fn a_cancelled_ticket_leaves_the_queue_and_a_granted_one_cannot_be_cancelled() {
        let mut l = Limiter::new(settings());
        for _ in 0..10 {
            l.acquire(ms(0), Priority::High);
        }
        let Decision::Queued(expired) = l.acquire(ms(0), Priority::High) else {
            panic!()
        };
        let Decision::Queued(served) = l.acquire(ms(1), Priority::High) else {
            panic!()
        };
        assert!(l.cancel(ms(500), expired));
        assert_eq!(l.queued(), 1);
        assert_eq!(l.release(ms(501), None).granted, vec![served]);
        assert!(
            !l.cancel(ms(502), served),
            "granted: the caller owns a slot"
        );
    }

    #[test]
    fn while_overloaded_default_waiters_past_twice_the_target_are_shed_and_high_ones_wait() {
        let mut l = busy();
        let high = queued(&mut l, 0, Priority::High);
        // The first interval ends with a wait of 0 (the admissions at 0 ms): no overload.
        let default_old = queued(&mut l, 101, Priority::Default);
        let default_fresh = queued(&mut l, 195, Priority::Default);
        // The second ends at 201 ms with the oldest waiter 200 ms old: overloaded. At
        // 203 ms the 101 ms waiter has waited 102 ms (over 2 x 5), the 195 ms one 8 ms.
        let released = l.release(ms(203), None);
        assert!(l.overloaded());
        assert_eq!(released.shed, vec![default_old]);
        assert_eq!(
            released.granted,
            vec![high],
            "high first, whatever its wait"
        );
        assert_eq!(l.queued(), 1);
        assert_eq!(l.release(ms(204), None).granted, vec![default_fresh]);
    }

    #[test]
    fn without_overload_a_long_wait_is_not_shed_before_max_wait() {
        let mut l = busy();
        let waiter = queued(&mut l, 99, Priority::Default);
        // 99 ms of the first interval passed with an empty queue: not overloaded, and the
        // 40 ms wait is a burst's, not a standing queue's.
        let released = l.release(ms(139), None);
        assert!(!l.overloaded());
        assert_eq!(
            released,
            Released {
                granted: vec![waiter],
                shed: vec![]
            }
        );
    }
}
