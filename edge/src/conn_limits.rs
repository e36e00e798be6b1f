//! Connection caps, checked before the TLS handshake: a global cap, and a cap per source
//! (per IPv4 address, per IPv6 /64, since one host usually holds a whole /64). Trusted
//! CIDRs (provider egress ranges, where many senders share addresses) get a higher
//! per-source cap. Pure bookkeeping: no I/O, no clock.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

#[derive(Clone, Debug, PartialEq)]
pub struct Caps {
    pub max_total: usize,
    pub max_per_source: usize,
    pub trusted: Vec<IpNet>,
    pub max_per_trusted_source: usize,
}

/// Why a connection was refused (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Total,
    PerSource,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Total => "total",
            Refusal::PerSource => "per_source",
        }
    }
}

/// The source a per-source cap counts under.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Source {
    V4(u32),
    V6Prefix64(u64),
}

impl Source {
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(u32::from(v4)),
                None => Source::V6Prefix64((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

#[derive(Debug)]
pub struct ConnTable {
    caps: Caps,
    total: usize,
    per_source: HashMap<Source, usize>,
}

impl ConnTable {
    pub fn new(caps: Caps) -> Self {
        Self {
            caps,
            total: 0,
            per_source: HashMap::new(),
        }
    }

    /// Counts a new connection from `ip`, or says why it must be closed.
    pub fn admit(&mut self, ip: IpAddr) -> Result<Source, Refusal> {
        if self.total >= self.caps.max_total {
            return Err(Refusal::Total);
        }
        let source = Source::of(ip);
        let cap = if self.caps.trusted.iter().any(|net| net.contains(&ip)) {
            self.caps.max_per_trusted_source
        } else {
            self.caps.max_per_source
        };
        let open = self.per_source.entry(source).or_insert(0);
        if *open >= cap {
            return Err(Refusal::PerSource);
        }
        *open += 1;
        self.total += 1;
        Ok(source)
    }

    /// A connection admitted under `source` has closed.
    pub fn release(&mut self, source: Source) {
        if let Some(open) = self.per_source.get_mut(&source) {
            *open -= 1;
            if *open == 0 {
                self.per_source.remove(&source);
            }
            self.total -= 1;
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn sources(&self) -> usize {
        self.per_source.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Caps {
        Caps {
            max_total: 5,
            max_per_source: 2,
            trusted: vec!["192.30.252.0/22".parse().unwrap()],
            max_per_trusted_source: 4,
        }
    }

    #[test]
    fn per_source_and_total_caps() {
        let mut t = ConnTable::new(caps());
        let a: IpAddr = "203.0.113.1".parse().unwrap();
        let s = t.admit(a).unwrap();
        t.admit(a).unwrap();
        assert_eq!(t.admit(a), Err(Refusal::PerSource));
        t.release(s);
        assert!(t.admit(a).is_ok(), "a closed connection frees its slot");
        let github: IpAddr = "192.30.252.10".parse().unwrap();
        for _ in 0..3 {
            t.admit(github).unwrap();
        }
        assert_eq!(t.total(), 5);
        assert_eq!(
            t.admit("198.51.100.1".parse().unwrap()),
            Err(Refusal::Total)
        );
    }

    #[test]
    fn trusted_sources_get_the_higher_cap() {
        let mut t = ConnTable::new(Caps {
            max_total: 100,
            ..caps()
        });
        let github: IpAddr = "192.30.252.10".parse().unwrap();
        for _ in 0..4 {
            t.admit(github).unwrap();
        }
        assert_eq!(t.admit(github), Err(Refusal::PerSource));
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        let mut t = ConnTable::new(Caps {
            max_total: 100,
            ..caps()
        });
        t.admit("2001:db8:1:2::1".parse().unwrap()).unwrap();
        t.admit("2001:db8:1:2::ffff".parse().unwrap()).unwrap();
        assert_eq!(
            t.admit("2001:db8:1:2:abcd::9".parse().unwrap()),
            Err(Refusal::PerSource),
            "same /64"
        );
        assert!(
            t.admit("2001:db8:1:3::1".parse().unwrap()).is_ok(),
            "another /64"
        );
        t.admit("203.0.113.7".parse().unwrap()).unwrap();
        t.admit("::ffff:203.0.113.7".parse().unwrap()).unwrap();
        assert_eq!(
            t.admit("203.0.113.7".parse().unwrap()),
            Err(Refusal::PerSource)
        );
        assert_eq!(t.sources(), 3);
    }
}
