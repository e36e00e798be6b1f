//! Types shared by the kernel-side XDP program and the user-side loader. Everything is
//! `#[repr(C)]` and plain data, so both sides agree on the layout of every map.
#![no_std]
#![warn(missing_docs)]

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
}

/// How many reasons there are: the length of the counters map.
pub const REASONS: usize = 10;

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

/// Bits of the `LISTS` word: which source lists hold entries. The program skips the
/// lookups of an empty list (an LPM lookup is most of its per-packet cost). This one:
/// the IPv4 allowlist holds entries.
pub const ALLOW_V4_SET: u32 = 1;
/// The IPv6 allowlist holds entries.
pub const ALLOW_V6_SET: u32 = 2;
/// The IPv4 blocklist holds entries.
pub const BLOCK_V4_SET: u32 = 4;
/// The IPv6 blocklist holds entries.
pub const BLOCK_V6_SET: u32 = 8;

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
    fn reasons_index_their_counter() {
        for (i, reason) in Reason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i);
        }
        assert!(!Reason::Allowlist.drops() && Reason::SynRate.drops());
    }
}
