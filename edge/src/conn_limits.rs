//! Connection caps, checked before the TLS handshake: a global cap, and a cap per source
//! (per IPv4 address, per IPv6 /64, since one host usually holds a whole /64). Trusted
//! CIDRs (provider egress ranges, where many senders share addresses) get a higher
//! per-source cap and a reserve of the global cap that only they may use.
//!
//! A slot is for a connection that uses it: at the global cap, the connection that has
//! been idle longest (handshake done, no request in progress, either protocol) is evicted
//! to make room, so idle connections cannot lock senders out. A newcomer from outside
//! `trusted` only evicts another such connection. Pure bookkeeping: no I/O, and the
//! clock comes in as an argument (milliseconds of any monotonic clock).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ipnet::IpNet;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug, PartialEq)]
pub struct Caps {
    pub max_total: usize,
    pub max_per_source: usize,
    pub trusted: Vec<IpNet>,
    pub max_per_trusted_source: usize,
    /// Slots of `max_total` only trusted sources may take (0 when `trusted` is empty).
    pub trusted_reserve: usize,
}

/// Why a connection was refused (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Total,
    PerSource,
}

impl Refusal {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::Total => "total",
            Refusal::PerSource => "per_source",
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
/// the idle connection evicted to make room for it, if one was.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub id: ConnId,
    pub usage: Arc<ConnUsage>,
    pub evicted: Option<Arc<ConnUsage>>,
}

/// What one connection is doing, shared between its task (which reports) and the table
/// (which picks whom to evict).
#[derive(Debug)]
pub(crate) struct ConnUsage {
    in_flight: AtomicU32,
    /// Clock reading since which no request has been in progress; [`NOT_SERVING`]
    /// until the handshake is done.
    idle_since_ms: AtomicU64,
    /// Cancelled when the connection must close: evicted, or the process shuts down.
    closing: CancellationToken,
    /// Cancelled when the peer abused the protocol: the connection is dropped at once.
    abandoned: CancellationToken,
}

impl ConnUsage {
    fn new(closing: CancellationToken) -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(NOT_SERVING),
            closing,
            abandoned: CancellationToken::new(),
        }
    }

    /// The handshake is done: the connection is idle from `now_ms` until a request.
    pub(crate) fn serving(&self, now_ms: u64) {
        self.idle_since_ms.store(now_ms, Ordering::Relaxed);
    }

    pub(crate) fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn request_ended(&self, now_ms: u64) {
        if self.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.idle_since_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// Since when the connection has had nothing to do; `None` while a request is in
    /// progress or its handshake is not done.
    pub(crate) fn idle_since(&self) -> Option<u64> {
        let since = self.idle_since_ms.load(Ordering::Relaxed);
        (self.in_flight.load(Ordering::Relaxed) == 0 && since != NOT_SERVING).then_some(since)
    }

    /// Fires when the connection must finish what it is doing and close.
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.closing
    }

    /// The peer abused the protocol (a body in tiny pieces): drop the connection now,
    /// unread bytes and all, rather than parse what it still sends.
    pub(crate) fn abandon(&self) {
        self.abandoned.cancel();
    }

    /// Fires once [`ConnUsage::abandon`] was called.
    pub(crate) fn abandoned(&self) -> &CancellationToken {
        &self.abandoned
    }
}

#[derive(Debug)]
pub(crate) struct ConnTable {
    caps: Caps,
    total: usize,
    untrusted: usize,
    per_source: HashMap<Source, usize>,
    conns: HashMap<ConnId, Tracked>,
    next_id: u64,
}

#[derive(Debug)]
struct Tracked {
    source: Source,
    trusted: bool,
    usage: Arc<ConnUsage>,
}

impl ConnTable {
    pub(crate) fn new(caps: Caps) -> Self {
        Self {
            caps,
            total: 0,
            untrusted: 0,
            per_source: HashMap::new(),
            conns: HashMap::new(),
            next_id: 0,
        }
    }

    /// Counts a new connection from `ip`, evicting the longest-idle connection when the
    /// global cap is reached, or says why it must be closed. `closing` becomes the new
    /// connection's [`ConnUsage::closing`].
    pub(crate) fn admit(
        &mut self,
        ip: IpAddr,
        closing: CancellationToken,
    ) -> Result<Admitted, Refusal> {
        let source = Source::of(ip);
        let trusted = self.caps.trusted.iter().any(|net| net.contains(&ip));
        let per_source_cap = if trusted {
            self.caps.max_per_trusted_source
        } else {
            self.caps.max_per_source
        };
        if self.per_source.get(&source).copied().unwrap_or(0) >= per_source_cap {
            return Err(Refusal::PerSource);
        }
        let evicted = if self.at_cap(trusted) {
            Some(self.evict_longest_idle(trusted).ok_or(Refusal::Total)?)
        } else {
            None
        };
        *self.per_source.entry(source).or_insert(0) += 1;
        self.total += 1;
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
                usage: Arc::clone(&usage),
            },
        );
        Ok(Admitted { id, usage, evicted })
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
        let reserve = if self.caps.trusted.is_empty() {
            0
        } else {
            self.caps.trusted_reserve
        };
        self.total >= self.caps.max_total
            || self.untrusted >= self.caps.max_total.saturating_sub(reserve)
    }

    /// Removes the connection idle longest that a newcomer may evict (any, for a
    /// trusted newcomer; an untrusted one otherwise) and tells it to close.
    fn evict_longest_idle(&mut self, trusted_newcomer: bool) -> Option<Arc<ConnUsage>> {
        let (&id, _) = self
            .conns
            .iter()
            .filter(|(_, c)| trusted_newcomer || !c.trusted)
            .filter_map(|(id, c)| Some((id, c.usage.idle_since()?)))
            .min_by_key(|(_, since)| *since)?;
        let tracked = self.conns.remove(&id)?;
        self.forget(&tracked);
        tracked.usage.closing.cancel();
        Some(tracked.usage)
    }

    fn forget(&mut self, tracked: &Tracked) {
        if let Some(open) = self.per_source.get_mut(&tracked.source) {
            *open -= 1;
            if *open == 0 {
                self.per_source.remove(&tracked.source);
            }
        }
        self.total -= 1;
        if !tracked.trusted {
            self.untrusted -= 1;
        }
    }
}

/// `idle_since_ms` of a connection still in its TLS handshake.
const NOT_SERVING: u64 = u64::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Caps {
        Caps {
            max_total: 5,
            max_per_source: 2,
            trusted: vec!["192.30.252.0/22".parse().unwrap()],
            max_per_trusted_source: 4,
            trusted_reserve: 0,
        }
    }

    fn admit(t: &mut ConnTable, ip: &str) -> Result<Admitted, Refusal> {
        t.admit(ip.parse().unwrap(), CancellationToken::new())
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
        hoarders[0].usage.serving(100);
        hoarders[0].usage.request_started();
        hoarders[1].usage.serving(300);
        hoarders[2].usage.serving(200);
        hoarders[3].usage.serving(50);
        hoarders[3].usage.request_started();
        hoarders[3].usage.request_ended(400);
        // hoarders[4] is still in its handshake.
        let sender = admit(&mut t, "198.51.100.9").unwrap();
        let evicted = sender.evicted.expect("room was made");
        assert!(
            Arc::ptr_eq(&evicted, &hoarders[2].usage),
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

        let next = admit(&mut t, "198.51.100.9").unwrap();
        assert!(Arc::ptr_eq(&next.evicted.unwrap(), &hoarders[1].usage));
        let next = admit(&mut t, "198.51.100.9").unwrap();
        assert!(Arc::ptr_eq(&next.evicted.unwrap(), &hoarders[3].usage));
        // Left: one busy, one handshaking, three newcomers not serving yet.
        assert_eq!(admit(&mut t, "198.51.100.10").unwrap_err(), Refusal::Total);
        assert!(!hoarders[0].usage.closing().is_cancelled());
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
            conn.usage.serving(i as u64);
        }
        let newcomer = admit(&mut t, "203.0.113.2").unwrap();
        assert!(
            newcomer.evicted.is_some(),
            "untrusted connections share 2 slots"
        );
        newcomer.usage.serving(10);
        let github: Vec<Admitted> = (0..2)
            .map(|_| admit(&mut t, "192.30.252.10").unwrap())
            .collect();
        assert!(
            github.iter().all(|c| c.evicted.is_none()),
            "the reserve was free"
        );
        github[0].usage.serving(1);
        github[1].usage.serving(2);
        let untrusted = admit(&mut t, "203.0.113.3").unwrap();
        assert!(
            !Arc::ptr_eq(untrusted.evicted.as_ref().unwrap(), &github[0].usage),
            "an untrusted newcomer never evicts a trusted connection"
        );
        untrusted.usage.serving(20);
        let trusted = admit(&mut t, "192.30.252.11").unwrap();
        assert!(
            Arc::ptr_eq(trusted.evicted.as_ref().unwrap(), &github[0].usage),
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
}
