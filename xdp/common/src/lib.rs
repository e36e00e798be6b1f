//! Types shared by the kernel-side XDP program and the user-side loader. Everything is
//! `#[repr(C)]` and plain data, so both sides agree on the layout of every map.
#![no_std]

/// Why a packet was passed or dropped; the index into the counters map.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Passed: nothing matched (or not for a protected destination).
    Pass = 0,
    /// Passed: the source is allowlisted.
    Allowlist = 1,
    /// Dropped: truncated or inconsistent headers.
    Malformed = 2,
    /// Dropped: the source is blocklisted.
    Blocklist = 3,
    /// Dropped: an IP fragment to a protected destination.
    Fragment = 4,
    /// Dropped: a protocol the edge does not serve.
    Protocol = 5,
    /// Dropped: TCP to a port the edge does not serve.
    Port = 6,
    /// Dropped: an invalid TCP flag combination.
    TcpFlags = 7,
    /// Dropped: new SYNs from one source above its rate.
    SynRate = 8,
    /// Dropped: ICMP above the global rate.
    IcmpRate = 9,
    /// Dropped: under-attack mode, TCP to a served port from outside the open ranges
    /// (providers' egress, management, health checks).
    UnderAttack = 10,
}

/// How many reasons there are: the length of the counters map.
pub const REASONS: usize = 11;

impl Reason {
    /// Every reason, in counter-index order.
    pub const ALL: [Reason; REASONS] = [
        Reason::Pass,
        Reason::Allowlist,
        Reason::Malformed,
        Reason::Blocklist,
        Reason::Fragment,
        Reason::Protocol,
        Reason::Port,
        Reason::TcpFlags,
        Reason::SynRate,
        Reason::IcmpRate,
        Reason::UnderAttack,
    ];

    /// The `reason` label in metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Pass => "pass",
            Reason::Allowlist => "allowlist",
            Reason::Malformed => "malformed",
            Reason::Blocklist => "blocklist",
            Reason::Fragment => "fragment",
            Reason::Protocol => "protocol",
            Reason::Port => "port",
            Reason::TcpFlags => "tcp_flags",
            Reason::SynRate => "syn_rate",
            Reason::IcmpRate => "icmp_rate",
            Reason::UnderAttack => "under_attack",
        }
    }

    /// Whether packets counted under this reason were dropped.
    pub const fn drops(self) -> bool {
        !matches!(self, Reason::Pass | Reason::Allowlist)
    }
}

/// Packets and bytes counted for one reason (per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    /// Packets seen.
    pub packets: u64,
    /// Their bytes, link-layer headers included.
    pub bytes: u64,
}

/// Rates, from the loader's config. Rates are per second; bursts are token counts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// New TCP connections (SYN without ACK) per source per second.
    pub syn_per_second: u64,
    /// SYNs a source may send at once.
    pub syn_burst: u64,
    /// ICMP packets per second, all sources together.
    pub icmp_per_second: u64,
    /// ICMP packets at once.
    pub icmp_burst: u64,
}

/// A source list's summary, checked before its LPM trie (an LPM lookup is most of the
/// program's per-packet cost when a list is in use): one bit per IPv4 /16 or per hashed
/// IPv6 /32 that a listed prefix overlaps. A clear bit proves the source is not listed;
/// a set bit sends the packet to the trie, which decides. An empty list is all clear.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hints {
    /// The bits, 64 a word: bit `b` is `words[b / 64] >> (b % 64) & 1`.
    pub words: [u64; HINT_WORDS],
}

/// Bits in a [`Hints`]: one per value of a 16-bit hint.
pub const HINT_BITS: usize = 1 << 16;
/// Words in a [`Hints`].
pub const HINT_WORDS: usize = HINT_BITS / 64;

/// Indexes of the `HINTS` map: which list a [`Hints`] summarises.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// The IPv4 allowlist.
    AllowV4 = 0,
    /// The IPv6 allowlist.
    AllowV6 = 1,
    /// The IPv4 blocklist.
    BlockV4 = 2,
    /// The IPv6 blocklist.
    BlockV6 = 3,
    /// The IPv4 ranges open while under attack.
    OpenV4 = 4,
    /// The IPv6 ranges open while under attack.
    OpenV6 = 5,
}

/// The names of the program's maps: each is a static of that name in the eBPF crate
/// (aya names a map after its static), and the loader finds them under these names
/// only, checking at load that the object has every one.
pub mod maps {
    /// Drop and pass counts per reason.
    pub const COUNTERS: &str = "COUNTERS";
    /// IPv4 allowlist trie.
    pub const ALLOW_V4: &str = "ALLOW_V4";
    /// IPv6 allowlist trie.
    pub const ALLOW_V6: &str = "ALLOW_V6";
    /// IPv4 blocklist trie.
    pub const BLOCK_V4: &str = "BLOCK_V4";
    /// IPv6 blocklist trie.
    pub const BLOCK_V6: &str = "BLOCK_V6";
    /// Protected IPv4 prefixes.
    pub const PROTECTED_V4: &str = "PROTECTED_V4";
    /// Protected IPv6 prefixes.
    pub const PROTECTED_V6: &str = "PROTECTED_V6";
    /// How many protected prefixes of each family are in use.
    pub const PROTECTED_COUNT: &str = "PROTECTED_COUNT";
    /// TCP ports served, indexed by port.
    pub const TCP_PORTS: &str = "TCP_PORTS";
    /// UDP ports served, indexed by port.
    pub const UDP_PORTS: &str = "UDP_PORTS";
    /// The rate limits.
    pub const LIMITS: &str = "LIMITS";
    /// Each list's hints.
    pub const HINTS: &str = "HINTS";
    /// IPv4 trie of the ranges open while under attack.
    pub const OPEN_V4: &str = "OPEN_V4";
    /// IPv6 trie of the ranges open while under attack.
    pub const OPEN_V6: &str = "OPEN_V6";
    /// Whether under-attack mode holds: [`super::SHIELD_UP`] at index 0, else down.
    pub const SHIELD: &str = "SHIELD";
    /// New SYNs to served ports of protected prefixes, per CPU (whatever their verdict):
    /// what the loader's automatic mode measures.
    pub const SYNS: &str = "SYNS";
    /// The maps the loader fills or reads (the SYN and ICMP buckets are the program's own).
    pub const FILLED: [&str; 16] = [
        COUNTERS,
        ALLOW_V4,
        ALLOW_V6,
        BLOCK_V4,
        BLOCK_V6,
        PROTECTED_V4,
        PROTECTED_V6,
        PROTECTED_COUNT,
        TCP_PORTS,
        UDP_PORTS,
        LIMITS,
        HINTS,
        OPEN_V4,
        OPEN_V6,
        SHIELD,
        SYNS,
    ];
}

/// How many lists there are: the length of the `HINTS` map.
pub const LISTS: u32 = 6;

/// The `SHIELD` value while under-attack mode holds.
pub const SHIELD_UP: u32 = 1;

impl Hints {
    /// Nothing listed.
    pub const EMPTY: Hints = Hints {
        words: [0; HINT_WORDS],
    };

    /// Whether `hint`'s bit is set.
    #[inline(always)]
    pub fn has(&self, hint: u16) -> bool {
        self.words
            .get(usize::from(hint) / 64)
            .is_some_and(|word| word >> (hint % 64) & 1 != 0)
    }

    /// Sets `hint`'s bit.
    pub fn set(&mut self, hint: u16) {
        self.words[usize::from(hint) / 64] |= 1 << (hint % 64);
    }

    /// Sets the bits of every source in an IPv4 prefix (`addr` in host order, masked).
    pub fn add_v4(&mut self, addr: u32, prefix_len: u8) {
        let first = v4_hint(addr);
        let count = if prefix_len >= 16 {
            1
        } else {
            1u32 << (16 - prefix_len)
        };
        for offset in 0..count {
            self.set(first.wrapping_add(offset as u16));
        }
    }

    /// Sets the bits of every source in an IPv6 prefix (`top` is its first 32 bits in
    /// host order, masked). Prefixes up to /16 set every bit.
    pub fn add_v6(&mut self, top: u32, prefix_len: u8) {
        if prefix_len <= 16 {
            self.words = [u64::MAX; HINT_WORDS];
            return;
        }
        let count = if prefix_len >= 32 {
            1
        } else {
            1u32 << (32 - prefix_len)
        };
        for offset in 0..count {
            self.set(v6_hint(top.wrapping_add(offset)));
        }
    }
}

/// An IPv4 source's hint: its /16 (`addr` in host order).
#[inline(always)]
pub const fn v4_hint(addr: u32) -> u16 {
    (addr >> 16) as u16
}

/// An IPv6 source's hint: its /32 (`top`, the first 32 bits in host order), hashed
/// (Fibonacci hashing) so that the few /16s holding most of IPv6 spread over the bits.
#[inline(always)]
pub const fn v6_hint(top: u32) -> u16 {
    (top.wrapping_mul(0x9e37_79b1) >> 16) as u16
}

/// One protected (anycast) prefix, in network byte order split into 64-bit halves
/// (IPv4 uses the first word's low 32 bits). The program scans at most
/// [`MAX_PROTECTED`] of them: a PoP announces a handful, and a scan beats a trie lookup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prefix {
    /// The prefix's address, masked.
    pub addr: [u64; 2],
    /// Its netmask.
    pub mask: [u64; 2],
}

/// Protected prefixes per address family.
pub const MAX_PROTECTED: u32 = 16;

/// A token bucket: tokens scaled by [`TOKEN_SCALE`], last refill in ns.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Tokens left, times [`TOKEN_SCALE`].
    pub tokens: u64,
    /// When it was last refilled (`bpf_ktime_get_ns`); 0: never, so it starts full.
    pub last_ns: u64,
}

/// Fixed-point scale of the tokens: a thousandth of a token is the refill unit.
pub const TOKEN_SCALE: u64 = 1000;

/// Value stored in the port sets (presence is what matters).
pub const PRESENT: u8 = 1;

/// The largest rate and burst the loader accepts; they keep the token arithmetic inside
/// 64 bits (BPF has no 128-bit multiply).
pub const MAX_RATE: u64 = 1_000_000;
/// See [`MAX_RATE`].
pub const MAX_BURST: u64 = 1_000_000_000;

/// Refills and takes one token; pure, so both sides (and tests) share it. `per_second`
/// must be at most [`MAX_RATE`] and `burst` at most [`MAX_BURST`].
pub fn take_token(bucket: &mut Bucket, now_ns: u64, per_second: u64, burst: u64) -> bool {
    let cap = burst.min(MAX_BURST) * TOKEN_SCALE;
    if bucket.last_ns == 0 {
        bucket.tokens = cap;
    } else {
        // At most 10 s of refill: MAX_RATE * TOKEN_SCALE * 1e10 ns < 2^64.
        let elapsed = now_ns.saturating_sub(bucket.last_ns).min(10_000_000_000);
        let refill = per_second.min(MAX_RATE) * TOKEN_SCALE * elapsed / 1_000_000_000;
        bucket.tokens = (bucket.tokens + refill).min(cap);
    }
    bucket.last_ns = now_ns;
    if bucket.tokens >= TOKEN_SCALE {
        bucket.tokens -= TOKEN_SCALE;
        true
    } else {
        false
    }
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain `#[repr(C)]` data without padding-sensitive invariants.
    unsafe impl aya::Pod for super::Counter {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Limits {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Bucket {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Prefix {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Hints {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bucket_allows_burst_then_rate() {
        let mut b = Bucket::default();
        let sec = 1_000_000_000u64;
        let taken = (0..10).filter(|_| take_token(&mut b, sec, 2, 5)).count();
        assert_eq!(taken, 5, "burst");
        assert!(
            !take_token(&mut b, sec + sec / 4, 2, 5),
            "a quarter second refills half a token"
        );
        assert!(
            take_token(&mut b, sec + sec / 2, 2, 5),
            "half a second refills one token"
        );
        assert!(take_token(&mut b, 100 * sec, 2, 5));
        let after_idle = (0..10)
            .filter(|_| take_token(&mut b, 100 * sec, 2, 5))
            .count();
        assert_eq!(after_idle, 4, "refill is capped at the burst");
    }

    #[test]
    fn a_v4_hint_is_set_for_every_source_of_the_prefix_and_few_others() {
        let mut hints = Hints::EMPTY;
        hints.add_v4(0xcb00_7100, 24); // 203.0.113.0/24
        assert!(hints.has(v4_hint(0xcb00_7101)) && hints.has(v4_hint(0xcb00_71ff)));
        assert!(
            hints.has(v4_hint(0xcb00_0001)),
            "the same /16 shares the bit"
        );
        assert!(!hints.has(v4_hint(0xcb01_7101)) && !hints.has(v4_hint(0x6440_0001)));
        assert_eq!(set_bits(&hints), 1);

        let mut wide = Hints::EMPTY;
        wide.add_v4(0x0a00_0000, 8); // 10.0.0.0/8
        assert_eq!(set_bits(&wide), 256);
        assert!(wide.has(v4_hint(0x0a00_0000)) && wide.has(v4_hint(0x0aff_ffff)));
        assert!(!wide.has(v4_hint(0x0b00_0000)) && !wide.has(v4_hint(0x09ff_ffff)));

        let mut all = Hints::EMPTY;
        all.add_v4(0, 0);
        assert_eq!(set_bits(&all), HINT_BITS);
    }

    #[test]
    fn a_v6_hint_is_set_for_every_source_of_the_prefix() {
        let mut hints = Hints::EMPTY;
        hints.add_v6(0x2001_0db8, 48);
        assert!(hints.has(v6_hint(0x2001_0db8)));
        assert!(!hints.has(v6_hint(0x2001_0db9)) && !hints.has(v6_hint(0x2a01_0000)));
        assert_eq!(set_bits(&hints), 1);

        let mut wide = Hints::EMPTY;
        wide.add_v6(0x2a00_0000, 20); // 2a00::/20: 4,096 /32s
        for top in (0x2a00_0000u32..0x2a00_1000).step_by(97) {
            assert!(wide.has(v6_hint(top)), "{top:x}");
        }
        assert!(set_bits(&wide) <= 4096 && set_bits(&wide) > 3000);

        let mut all = Hints::EMPTY;
        all.add_v6(0x2000_0000, 3);
        assert_eq!(set_bits(&all), HINT_BITS);
    }

    #[test]
    fn v6_hints_spread_a_crowded_slash_16() {
        let mut hints = Hints::EMPTY;
        for top in 0x2a01_0000u32..0x2a01_0100 {
            hints.set(v6_hint(top));
        }
        assert!(set_bits(&hints) > 250, "256 /32s of one /16 share few bits");
    }

    #[test]
    fn reasons_index_their_counter() {
        for (i, reason) in Reason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i);
        }
        assert!(!Reason::Allowlist.drops() && Reason::SynRate.drops());
    }

    fn set_bits(hints: &Hints) -> usize {
        hints.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}
