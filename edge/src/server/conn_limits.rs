//! Connection caps, checked before the TLS handshake: a global cap, a cap on connections
//! still in their handshake, and a cap per source (per IPv4 address, per IPv6 /64, since
//! one host usually holds a whole /64). Trusted CIDRs (provider egress ranges, where many
//! senders share addresses) get a higher per-source cap and a reserve of the global cap
//! that only they may use.
//!
//! A slot is for a connection that uses it. When a newcomer finds no free slot, one
//! connection makes room, the least useful first:
//! 1. a connection still in its TLS handshake, taken from the source that holds the most
//!    handshakes (its oldest), and only when that source holds more than the newcomer's
//!    would: a few addresses that open connections and never send a ClientHello lose
//!    their own slots to every new sender, and cannot evict a lone sender's handshake
//!    by churning their own;
//! 2. a connection whose request body trickles in (see [`BodyRate::trickles`]: under
//!    a few times the minimum body rate) (the oldest such connection): it holds a slot and a body buffer
//!    for a fraction of what a normal upload sends;
//! 3. the connection idle longest (handshake done, no request in progress).
//!
//! The handshake cap works the same way with step 1 alone. A newcomer from outside
//! `trusted` only evicts another such connection. While handshakes fill more than half
//! their cap, the handshake deadline of new connections shrinks with the pressure (see
//! [`ConnTable::handshake_timeout`]). Pure bookkeeping: no I/O, and the clock comes in
//! as an argument (milliseconds of any monotonic clock).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use edge_kit::ranges::NetSet;
use tokio_util::sync::CancellationToken;

use crate::config::Caps;
use crate::http::ConnUsage;

#[cfg(doc)]
use crate::admission::body_rate::BodyRate;

/// Why a connection was refused (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Total,
    Handshakes,
    PerSource,
}

impl Refusal {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::Total => "total",
            Refusal::Handshakes => "handshakes",
            Refusal::PerSource => "per_source",
        }
    }
}

/// Which kind of connection was evicted to make room (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Eviction {
    Handshake,
    Trickling,
    Idle,
}

impl Eviction {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Eviction::Handshake => "handshake",
            Eviction::Trickling => "trickling_body",
            Eviction::Idle => "idle",
        }
    }
}

/// The source a per-source cap counts under.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Source {
    V4(u32),
    V6Prefix64(u64),
}

impl Source {
    pub(crate) fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(u32::from(v4)),
                None => Source::V6Prefix64((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// One admitted connection in the table.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct ConnId(u64);

/// A connection let in: its id (to release it), what it reports its use through, and
/// the connection evicted to make room for it, if one was, with its kind.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub id: ConnId,
    pub usage: Arc<ConnUsage>,
    pub evicted: Option<(Eviction, Arc<ConnUsage>)>,
}

#[derive(Debug)]
pub(crate) struct ConnTable {
    caps: Caps,
    /// The trusted sources in force: `caps.trusted` at start, then the set given to
    /// [`ConnTable::set_trusted`].
    trusted: NetSet,
    total: usize,
    untrusted: usize,
    handshakes: usize,
    per_source: HashMap<Source, PerSource>,
    conns: HashMap<ConnId, Tracked>,
    next_id: u64,
}

/// What one source holds.
#[derive(Debug, Default)]
struct PerSource {
    open: usize,
    handshakes: usize,
}

#[derive(Debug)]
struct Tracked {
    source: Source,
    trusted: bool,
    admitted_ms: u64,
    /// Still in its TLS handshake.
    handshaking: bool,
    usage: Arc<ConnUsage>,
}

impl ConnTable {
    pub(crate) fn new(caps: Caps) -> Self {
        Self {
            trusted: NetSet::new(&caps.trusted),
            caps,
            total: 0,
            untrusted: 0,
            handshakes: 0,
            per_source: HashMap::new(),
            conns: HashMap::new(),
            next_id: 0,
        }
    }

    /// Replaces the trusted CIDRs for connections from now on; those open keep the
    /// class they were admitted in, so every count stays exact.
    pub(crate) fn set_trusted(&mut self, trusted: NetSet) {
        self.trusted = trusted;
    }

    /// Counts a new connection from `ip` at `now_ms`, evicting a less useful one when a
    /// cap is reached (see the module's order), or says why it must be closed.
    /// `closing` becomes the new connection's [`ConnUsage::closing`].
    pub(crate) fn admit(
        &mut self,
        ip: IpAddr,
        closing: CancellationToken,
        now_ms: u64,
    ) -> Result<Admitted, Refusal> {
        let source = Source::of(ip);
        let trusted = self.trusted.contains(ip);
        let per_source_cap = if trusted {
            self.caps.max_per_trusted_source
        } else {
            self.caps.max_per_source
        };
        let held = self.per_source.get(&source);
        if held.map_or(0, |h| h.open) >= per_source_cap {
            return Err(Refusal::PerSource);
        }
        let own_handshakes = held.map_or(0, |h| h.handshakes);
        let evicted = if self.at_cap(trusted) {
            Some(
                self.evict_for(trusted, own_handshakes, true)
                    .ok_or(Refusal::Total)?,
            )
        } else if self.handshakes >= self.caps.max_handshakes {
            Some(
                self.evict_for(trusted, own_handshakes, false)
                    .ok_or(Refusal::Handshakes)?,
            )
        } else {
            None
        };
        let held = self.per_source.entry(source).or_default();
        held.open += 1;
        held.handshakes += 1;
        self.total += 1;
        self.handshakes += 1;
        if !trusted {
            self.untrusted += 1;
        }
        let id = ConnId(self.next_id);
        self.next_id += 1;
        let usage = Arc::new(ConnUsage::new(closing));
        self.conns.insert(
            id,
            Tracked {
                source,
                trusted,
                admitted_ms: now_ms,
                handshaking: true,
                usage: Arc::clone(&usage),
            },
        );
        Ok(Admitted { id, usage, evicted })
    }

    /// The connection finished its TLS handshake at `now_ms`: it is idle from then until
    /// a request, and no longer counts as a handshake.
    pub(crate) fn handshake_done(&mut self, id: ConnId, now_ms: u64) {
        let Some(tracked) = self.conns.get_mut(&id) else {
            return;
        };
        tracked.usage.serving(now_ms);
        if std::mem::replace(&mut tracked.handshaking, false) {
            self.handshakes -= 1;
            if let Some(held) = self.per_source.get_mut(&tracked.source) {
                held.handshakes -= 1;
            }
        }
    }

    /// The handshake deadline for a connection starting now: `base` while handshakes
    /// fill at most half their cap, then shrinking in step with the free half, to a
    /// tenth of `base` at the cap (never under [`MIN_HANDSHAKE_TIMEOUT`]). Under a
    /// flood of connections that never finish, their slots turn over that much faster.
    pub(crate) fn handshake_timeout(&self, base: Duration) -> Duration {
        let cap = self.caps.max_handshakes.max(1) as f64;
        let free = 1.0 - (self.handshakes as f64 / cap).min(1.0);
        let scale = (2.0 * free).clamp(0.1, 1.0);
        base.mul_f64(scale).max(MIN_HANDSHAKE_TIMEOUT.min(base))
    }

    /// A connection has closed. Nothing to do for one already evicted.
    pub(crate) fn release(&mut self, id: ConnId) {
        if let Some(tracked) = self.conns.remove(&id) {
            self.forget(&tracked);
        }
    }

    #[cfg(test)]
    fn total(&self) -> usize {
        self.total
    }

    #[cfg(test)]
    fn sources(&self) -> usize {
        self.per_source.len()
    }

    /// Whether a newcomer (trusted or not) finds no free slot it may take.
    fn at_cap(&self, trusted: bool) -> bool {
        if trusted {
            return self.total >= self.caps.max_total;
        }
        let reserve = if self.trusted.is_empty() {
            0
        } else {
            self.caps.trusted_reserve
        };
        self.total >= self.caps.max_total
            || self.untrusted >= self.caps.max_total.saturating_sub(reserve)
    }

    /// Removes the connection that makes room for a newcomer whose source holds
    /// `own_handshakes` handshakes, and tells it to close: a handshake first, then (for
    /// the global cap, `any_kind`) a trickling upload, then the longest idle. A trusted
    /// newcomer may evict any connection; an untrusted one only an untrusted one.
    fn evict_for(
        &mut self,
        trusted_newcomer: bool,
        own_handshakes: usize,
        any_kind: bool,
    ) -> Option<(Eviction, Arc<ConnUsage>)> {
        let (kind, id) = self
            .handshake_to_evict(trusted_newcomer, own_handshakes)
            .map(|id| (Eviction::Handshake, id))
            .or_else(|| {
                let evictable = self
                    .conns
                    .iter()
                    .filter(|(_, c)| any_kind && (trusted_newcomer || !c.trusted));
                let trickling = evictable
                    .clone()
                    .filter(|(_, c)| c.usage.is_trickling())
                    .min_by_key(|(_, c)| c.admitted_ms)
                    .map(|(&id, _)| (Eviction::Trickling, id));
                trickling.or_else(|| {
                    evictable
                        .filter_map(|(&id, c)| Some((id, c.usage.idle_since()?)))
                        .min_by_key(|(_, since)| *since)
                        .map(|(id, _)| (Eviction::Idle, id))
                })
            })?;
        let tracked = self.conns.remove(&id)?;
        self.forget(&tracked);
        tracked.usage.closing().cancel();
        if kind == Eviction::Trickling {
            // Its request would otherwise keep the socket until the body ends.
            tracked.usage.abandon();
        }
        Some((kind, tracked.usage))
    }

    /// The oldest handshake of the source holding the most that the newcomer may
    /// evict, if that source holds more than the newcomer's would after admission (so an
    /// eviction never just moves a slot between two sources holding as many). One pass.
    fn handshake_to_evict(&self, trusted_newcomer: bool, own_handshakes: usize) -> Option<ConnId> {
        let mut by_source: HashMap<Source, (usize, u64, ConnId)> = HashMap::new();
        for (&id, c) in &self.conns {
            if !c.handshaking || (c.trusted && !trusted_newcomer) {
                continue;
            }
            let held = by_source.entry(c.source).or_insert((0, c.admitted_ms, id));
            held.0 += 1;
            if c.admitted_ms < held.1 {
                (held.1, held.2) = (c.admitted_ms, id);
            }
        }
        by_source
            .into_values()
            .filter(|(count, _, _)| *count > own_handshakes + 1)
            .max_by_key(|(count, _, _)| *count)
            .map(|(_, _, oldest)| oldest)
    }

    fn forget(&mut self, tracked: &Tracked) {
        if let Some(held) = self.per_source.get_mut(&tracked.source) {
            held.open -= 1;
            if tracked.handshaking {
                held.handshakes -= 1;
            }
            if held.open == 0 {
                self.per_source.remove(&tracked.source);
            }
        }
        self.total -= 1;
        if tracked.handshaking {
            self.handshakes -= 1;
        }
        if !tracked.trusted {
            self.untrusted -= 1;
        }
    }
}

/// `idle_since_ms` of a connection still in its TLS handshake.
/// The shortest handshake deadline pressure may set: a real handshake over a slow
/// mobile path still fits.
const MIN_HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(1000);

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Caps {
        Caps {
            max_total: 5,
            max_handshakes: 5,
            max_per_source: 2,
            trusted: vec!["192.30.252.0/22".parse().unwrap()],
            max_per_trusted_source: 4,
            trusted_reserve: 0,
        }
    }

    fn admit(t: &mut ConnTable, ip: &str) -> Result<Admitted, Refusal> {
        admit_at(t, ip, 0)
    }

    fn admit_at(t: &mut ConnTable, ip: &str, now_ms: u64) -> Result<Admitted, Refusal> {
        t.admit(ip.parse().unwrap(), CancellationToken::new(), now_ms)
    }

    fn evicted_usage(admitted: &Admitted) -> &Arc<ConnUsage> {
        evicted(admitted).1
    }

    fn evicted(admitted: &Admitted) -> (Eviction, &Arc<ConnUsage>) {
        let (kind, usage) = admitted.evicted.as_ref().expect("room was made");
        (*kind, usage)
    }

    #[test]
    fn per_source_and_total_caps() {
        let mut t = ConnTable::new(caps());
        let s = admit(&mut t, "203.0.113.1").unwrap();
        admit(&mut t, "203.0.113.1").unwrap();
        assert_eq!(
            admit(&mut t, "203.0.113.1").unwrap_err(),
            Refusal::PerSource
        );
        t.release(s.id);
        assert!(
            admit(&mut t, "203.0.113.1").is_ok(),
            "a closed connection frees its slot"
        );
        for _ in 0..3 {
            admit(&mut t, "192.30.252.10").unwrap();
        }
        assert_eq!(t.total(), 5);
        // Every connection busy: nothing a newcomer may evict.
        let ids: Vec<ConnId> = t.conns.keys().copied().collect();
        for id in ids {
            t.handshake_done(id, 1);
            t.conns[&id].usage.request_started();
        }
        assert_eq!(admit(&mut t, "198.51.100.1").unwrap_err(), Refusal::Total);
    }

    #[test]
    fn trusted_sources_get_the_higher_cap() {
        let mut t = ConnTable::new(Caps {
            max_total: 100,
            ..caps()
        });
        for _ in 0..4 {
            admit(&mut t, "192.30.252.10").unwrap();
        }
        assert_eq!(
            admit(&mut t, "192.30.252.10").unwrap_err(),
            Refusal::PerSource
        );
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        let mut t = ConnTable::new(Caps {
            max_total: 100,
            ..caps()
        });
        admit(&mut t, "2001:db8:1:2::1").unwrap();
        admit(&mut t, "2001:db8:1:2::ffff").unwrap();
        assert_eq!(
            admit(&mut t, "2001:db8:1:2:abcd::9").unwrap_err(),
            Refusal::PerSource,
            "same /64"
        );
        assert!(admit(&mut t, "2001:db8:1:3::1").is_ok(), "another /64");
        admit(&mut t, "203.0.113.7").unwrap();
        admit(&mut t, "::ffff:203.0.113.7").unwrap();
        assert_eq!(
            admit(&mut t, "203.0.113.7").unwrap_err(),
            Refusal::PerSource
        );
        assert_eq!(t.sources(), 3);
    }

    /// Five idle hoarders fill the table; a sender still gets in, and the connection
    /// idle longest is the one told to close. Busy and handshaking ones are never picked.
    #[test]
    fn at_the_cap_the_longest_idle_connection_makes_room() {
        let mut t = ConnTable::new(Caps {
            max_per_source: 10,
            ..caps()
        });
        let hoarders: Vec<Admitted> = (0..5)
            .map(|_| admit(&mut t, "203.0.113.1").unwrap())
            .collect();
        t.handshake_done(hoarders[0].id, 100);
        hoarders[0].usage.request_started();
        t.handshake_done(hoarders[1].id, 300);
        t.handshake_done(hoarders[2].id, 200);
        t.handshake_done(hoarders[3].id, 50);
        hoarders[3].usage.request_started();
        hoarders[3].usage.request_ended(400);
        // hoarders[4] is still in its handshake: one, as many as the sender will hold.
        let sender = admit(&mut t, "198.51.100.9").unwrap();
        let (kind, victim) = evicted(&sender);
        assert_eq!(kind, Eviction::Idle);
        assert!(
            Arc::ptr_eq(victim, &hoarders[2].usage),
            "idle since 200, the oldest"
        );
        assert!(hoarders[2].usage.closing().is_cancelled());
        assert_eq!(t.total(), 5);
        t.release(hoarders[2].id);
        assert_eq!(
            t.total(),
            5,
            "releasing an evicted connection frees nothing twice"
        );

        t.handshake_done(sender.id, 450);
        let next = admit(&mut t, "198.51.100.9").unwrap();
        assert!(Arc::ptr_eq(evicted_usage(&next), &hoarders[1].usage));
        t.handshake_done(next.id, 460);
        let next = admit(&mut t, "198.51.100.9").unwrap();
        assert!(Arc::ptr_eq(evicted_usage(&next), &hoarders[3].usage));
        t.handshake_done(next.id, 470);
        // Left: one busy, one handshaking, three newly served ones idle since 450+.
        let last = admit(&mut t, "198.51.100.10").unwrap();
        assert_eq!(evicted(&last).0, Eviction::Idle);
        assert!(Arc::ptr_eq(evicted(&last).1, &sender.usage));
        assert!(!hoarders[0].usage.closing().is_cancelled());
        assert!(!hoarders[4].usage.closing().is_cancelled());
    }

    #[test]
    fn trusted_sources_keep_a_reserve_that_untrusted_ones_cannot_evict() {
        let mut t = ConnTable::new(Caps {
            max_total: 4,
            max_per_source: 10,
            trusted_reserve: 2,
            ..caps()
        });
        let idle: Vec<Admitted> = (0..2)
            .map(|_| admit(&mut t, "203.0.113.1").unwrap())
            .collect();
        for (i, conn) in idle.iter().enumerate() {
            t.handshake_done(conn.id, i as u64);
        }
        let newcomer = admit(&mut t, "203.0.113.2").unwrap();
        assert!(
            newcomer.evicted.is_some(),
            "untrusted connections share 2 slots"
        );
        t.handshake_done(newcomer.id, 10);
        let github: Vec<Admitted> = (0..2)
            .map(|_| admit(&mut t, "192.30.252.10").unwrap())
            .collect();
        assert!(
            github.iter().all(|c| c.evicted.is_none()),
            "the reserve was free"
        );
        t.handshake_done(github[0].id, 1);
        t.handshake_done(github[1].id, 2);
        let untrusted = admit(&mut t, "203.0.113.3").unwrap();
        assert!(
            !Arc::ptr_eq(evicted_usage(&untrusted), &github[0].usage),
            "an untrusted newcomer never evicts a trusted connection"
        );
        t.handshake_done(untrusted.id, 20);
        let trusted = admit(&mut t, "192.30.252.11").unwrap();
        assert!(
            Arc::ptr_eq(evicted_usage(&trusted), &github[0].usage),
            "a trusted newcomer takes the longest idle of any"
        );
    }

    #[test]
    fn without_trusted_sources_there_is_no_reserve() {
        let mut t = ConnTable::new(Caps {
            max_total: 3,
            max_per_source: 10,
            trusted: Vec::new(),
            trusted_reserve: 2,
            ..caps()
        });
        for _ in 0..3 {
            assert!(admit(&mut t, "203.0.113.1").unwrap().evicted.is_none());
        }
    }

    /// The measured lock-out: five addresses hold every handshake slot with
    /// connections that never send a ClientHello and re-open each one the edge closes.
    /// A lone sender always gets in (the oldest handshake of the biggest holder makes
    /// room), while the hoarders' re-opens evict nothing once they hold equal shares.
    #[test]
    fn handshake_hoarders_make_room_for_a_lone_sender_not_for_each_other() {
        let mut t = ConnTable::new(Caps {
            max_total: 300,
            max_handshakes: 75,
            max_per_source: 64,
            trusted: Vec::new(),
            trusted_reserve: 0,
            ..caps()
        });
        let hoarders: Vec<String> = (1..=5).map(|i| format!("127.0.0.{}", 10 + i)).collect();
        let mut clock = 0;
        let mut held = Vec::new();
        for round in 0..64 {
            for ip in &hoarders {
                clock += 1;
                match admit_at(&mut t, ip, clock) {
                    Ok(a) => held.push(a),
                    Err(refusal) => {
                        assert_eq!(refusal, Refusal::Handshakes, "round {round}");
                    }
                }
            }
        }
        assert_eq!(held.len(), 75, "the handshake cap holds");
        assert!(
            held.iter().all(|a| a.evicted.is_none()),
            "equal shares: nobody evicts anybody"
        );
        for sender in 0..20 {
            clock += 1;
            let lone = admit_at(&mut t, "127.0.0.2", clock).unwrap();
            let (kind, victim) = evicted(&lone);
            assert_eq!(kind, Eviction::Handshake, "sender {sender}");
            assert!(victim.closing().is_cancelled());
            // The hoarder re-opens at once: with fewer than the others it evicts one of
            // theirs, never the sender's (which holds one).
            clock += 1;
            let again = admit_at(&mut t, &hoarders[sender % 5], clock);
            if let Ok(again) = &again {
                assert!(!Arc::ptr_eq(evicted_usage(again), &lone.usage));
            }
            assert!(!lone.usage.closing().is_cancelled());
            t.handshake_done(lone.id, clock);
            t.release(lone.id);
            // Whatever room is left, the hoarders take back.
            while t.handshakes < 75 {
                clock += 1;
                admit_at(&mut t, &hoarders[(sender + 1) % 5], clock).unwrap();
            }
        }
    }

    /// Trusted handshakes are never taken by an untrusted newcomer; the handshake cap
    /// refuses when only those are left.
    #[test]
    fn an_untrusted_newcomer_never_evicts_a_trusted_handshake() {
        let mut t = ConnTable::new(Caps {
            max_total: 100,
            max_handshakes: 3,
            max_per_source: 10,
            ..caps()
        });
        for _ in 0..3 {
            admit(&mut t, "192.30.252.10").unwrap();
        }
        assert_eq!(
            admit(&mut t, "203.0.113.1").unwrap_err(),
            Refusal::Handshakes
        );
        let trusted = admit(&mut t, "192.30.252.11").unwrap();
        assert_eq!(evicted(&trusted).0, Eviction::Handshake);
    }

    /// At the global cap a trickling upload goes before the longest idle connection,
    /// and is dropped at once rather than left to finish its body.
    #[test]
    fn a_trickling_upload_makes_room_before_an_idle_connection() {
        let mut t = ConnTable::new(Caps {
            max_total: 3,
            max_per_source: 10,
            trusted: Vec::new(),
            ..caps()
        });
        let conns: Vec<Admitted> = (0..3)
            .map(|i| admit_at(&mut t, "203.0.113.1", i).unwrap())
            .collect();
        for (i, conn) in conns.iter().enumerate() {
            t.handshake_done(conn.id, 10 + i as u64);
        }
        conns[1].usage.request_started();
        conns[1].usage.trickling(true);
        conns[2].usage.request_started();
        let newcomer = admit_at(&mut t, "198.51.100.1", 20).unwrap();
        assert_eq!(evicted(&newcomer).0, Eviction::Trickling);
        assert!(Arc::ptr_eq(evicted_usage(&newcomer), &conns[1].usage));
        assert!(conns[1].usage.abandoned().is_cancelled());
        t.handshake_done(newcomer.id, 21);
        let next = admit_at(&mut t, "198.51.100.1", 22).unwrap();
        assert_eq!(evicted(&next).0, Eviction::Idle);
        assert!(Arc::ptr_eq(evicted_usage(&next), &conns[0].usage));
        assert!(
            !conns[0].usage.abandoned().is_cancelled(),
            "idle ones close cleanly"
        );
        conns[1].usage.trickling(false);
        assert!(!conns[1].usage.is_trickling());
    }

    #[test]
    fn the_handshake_deadline_shrinks_past_half_the_cap() {
        let mut t = ConnTable::new(Caps {
            max_total: 100,
            max_handshakes: 20,
            max_per_source: 100,
            ..caps()
        });
        let base = Duration::from_secs(10);
        let mut ids = Vec::new();
        let mut timeouts = Vec::new();
        for _ in 0..20 {
            timeouts.push(t.handshake_timeout(base));
            ids.push(admit(&mut t, "203.0.113.1").unwrap().id);
        }
        timeouts.push(t.handshake_timeout(base));
        assert!(timeouts[..=10].iter().all(|&d| d == base), "{timeouts:?}");
        assert_eq!(timeouts[15], Duration::from_secs(5));
        assert_eq!(timeouts[20], Duration::from_secs(1));
        assert!(timeouts.windows(2).all(|w| w[1] <= w[0]));
        for id in ids {
            t.handshake_done(id, 1);
        }
        assert_eq!(
            t.handshake_timeout(base),
            base,
            "done handshakes free the pressure"
        );
        assert_eq!(
            t.handshake_timeout(Duration::from_millis(300)),
            Duration::from_millis(300)
        );
    }
}
