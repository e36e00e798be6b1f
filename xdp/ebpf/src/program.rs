use core::mem::size_of;

use aya_ebpf::bindings::xdp_action;
use aya_ebpf::helpers::bpf_ktime_get_ns;
use aya_ebpf::macros::{map, xdp};
use aya_ebpf::maps::lpm_trie::Key;
use aya_ebpf::maps::{Array, LpmTrie, LruHashMap, PerCpuArray};
use aya_ebpf::programs::XdpContext;
use xdp_common::{
    Bucket, Counter, Hints, LISTS, Limits, List, MAX_PROTECTED, Prefix, REASONS, Reason, SHIELD_UP,
    take_token, v4_hint, v6_hint,
};

#[map]
static COUNTERS: PerCpuArray<Counter> = PerCpuArray::with_max_entries(REASONS as u32, 0);
#[map]
static ALLOW_V4: LpmTrie<[u8; 4], u8> = LpmTrie::with_max_entries(LIST_ENTRIES, 0);
#[map]
static ALLOW_V6: LpmTrie<[u8; 16], u8> = LpmTrie::with_max_entries(LIST_ENTRIES, 0);
#[map]
static BLOCK_V4: LpmTrie<[u8; 4], u8> = LpmTrie::with_max_entries(LIST_ENTRIES, 0);
#[map]
static BLOCK_V6: LpmTrie<[u8; 16], u8> = LpmTrie::with_max_entries(LIST_ENTRIES, 0);
#[map]
static PROTECTED_V4: Array<Prefix> = Array::with_max_entries(MAX_PROTECTED, 0);
#[map]
static PROTECTED_V6: Array<Prefix> = Array::with_max_entries(MAX_PROTECTED, 0);
/// How many entries of PROTECTED_V4 (index 0) and PROTECTED_V6 (index 1) are in use.
#[map]
static PROTECTED_COUNT: Array<u32> = Array::with_max_entries(2, 0);
// Indexed by port: an array slot is cheaper to test than a hash lookup.
#[map]
static TCP_PORTS: Array<u8> = Array::with_max_entries(PORTS, 0);
#[map]
static UDP_PORTS: Array<u8> = Array::with_max_entries(PORTS, 0);
#[map]
static LIMITS: Array<Limits> = Array::with_max_entries(1, 0);
#[map]
static SYN_V4: LruHashMap<u32, Bucket> = LruHashMap::with_max_entries(RATE_ENTRIES, 0);
#[map]
static SYN_V6: LruHashMap<u64, Bucket> = LruHashMap::with_max_entries(RATE_ENTRIES, 0);
#[map]
static ICMP_BUCKET: Array<Bucket> = Array::with_max_entries(1, 0);
/// Each list's [`Hints`], indexed by [`List`]: most sources skip the trie lookups.
#[map]
static HINTS: Array<Hints> = Array::with_max_entries(LISTS, 0);
/// Who may reach the served ports while under attack (the loader fills it).
#[map]
static OPEN_V4: LpmTrie<[u8; 4], u8> = LpmTrie::with_max_entries(LIST_ENTRIES, 0);
#[map]
static OPEN_V6: LpmTrie<[u8; 16], u8> = LpmTrie::with_max_entries(LIST_ENTRIES, 0);
/// `SHIELD_UP` while under-attack mode holds; the loader decides.
#[map]
static SHIELD: Array<u32> = Array::with_max_entries(1, 0);
/// New SYNs to served ports, for the loader's automatic mode.
#[map]
static SYNS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[xdp]
pub(crate) fn edge_xdp(ctx: XdpContext) -> u32 {
    let reason = classify(&ctx);
    let bytes = (ctx.data_end() - ctx.data()) as u64;
    if let Some(counter) = COUNTERS.get_ptr_mut(reason as u32) {
        // SAFETY: a per-CPU slot of a map this program owns.
        unsafe {
            (*counter).packets += 1;
            (*counter).bytes += bytes;
        }
    }
    if reason.drops() {
        xdp_action::XDP_DROP
    } else {
        xdp_action::XDP_PASS
    }
}

/// The packet's addresses. IPv6 ones stay in the packet: copying 32 bytes that are not
/// known to be aligned costs a byte load and store each.
enum Addrs<'a> {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
    },
    V6 {
        src: &'a [u8; 16],
        dst: &'a [u8; 16],
    },
}

#[inline(always)]
fn classify(ctx: &XdpContext) -> Reason {
    let Some(eth) = bytes::<14>(ctx, 0) else {
        return Reason::Malformed;
    };
    let mut ethertype = u16::from_be_bytes([eth[12], eth[13]]);
    let mut offset = 14;
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        let Some(tag) = bytes::<4>(ctx, offset) else {
            return Reason::Malformed;
        };
        ethertype = u16::from_be_bytes([tag[2], tag[3]]);
        offset += 4;
    }
    match ethertype {
        ETH_P_IP => ipv4(ctx, offset),
        ETH_P_IPV6 => ipv6(ctx, offset),
        ETH_P_8021Q | ETH_P_8021AD => Reason::Malformed,
        _ => Reason::Pass,
    }
}

#[inline(always)]
fn ipv4(ctx: &XdpContext, offset: usize) -> Reason {
    let Some(ip) = bytes::<20>(ctx, offset) else {
        return Reason::Malformed;
    };
    if ip[0] >> 4 != 4 {
        return Reason::Malformed;
    }
    let header_len = ((ip[0] & 0x0f) as usize) * 4;
    let total_len = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let available = ctx.data_end() - ctx.data() - offset;
    if header_len < 20 || total_len < header_len || total_len > available {
        return Reason::Malformed;
    }
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
    let addrs = Addrs::V4 {
        src: [ip[12], ip[13], ip[14], ip[15]],
        dst: [ip[16], ip[17], ip[18], ip[19]],
    };
    decide(ctx, &addrs, ip[9], fragment, offset + header_len)
}

#[inline(always)]
fn ipv6(ctx: &XdpContext, offset: usize) -> Reason {
    let Some(ip) = bytes::<40>(ctx, offset) else {
        return Reason::Malformed;
    };
    if ip[0] >> 4 != 6 {
        return Reason::Malformed;
    }
    let payload_len = u16::from_be_bytes([ip[4], ip[5]]) as usize;
    if payload_len > ctx.data_end() - ctx.data() - offset - 40 {
        return Reason::Malformed;
    }
    let mut next = ip[6];
    let mut l4 = offset + 40;
    let mut fragment = false;
    for _ in 0..MAX_EXTENSION_HEADERS {
        match next {
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS => {
                let Some(ext) = bytes::<2>(ctx, l4) else {
                    return Reason::Malformed;
                };
                next = ext[0];
                l4 += (ext[1] as usize + 1) * 8;
            }
            IPPROTO_AH => {
                let Some(ext) = bytes::<2>(ctx, l4) else {
                    return Reason::Malformed;
                };
                next = ext[0];
                l4 += (ext[1] as usize + 2) * 4;
            }
            IPPROTO_FRAGMENT => {
                let Some(ext) = bytes::<8>(ctx, l4) else {
                    return Reason::Malformed;
                };
                next = ext[0];
                fragment = true;
                l4 += 8;
            }
            _ => break,
        }
        if l4 > MAX_L4_OFFSET {
            return Reason::Malformed;
        }
    }
    if matches!(
        next,
        IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS | IPPROTO_AH | IPPROTO_FRAGMENT
    ) {
        // More extension headers than we walk: nothing legitimate sends that.
        return Reason::Malformed;
    }
    let (Ok(src), Ok(dst)) = (ip[8..24].try_into(), ip[24..40].try_into()) else {
        return Reason::Malformed;
    };
    decide(ctx, &Addrs::V6 { src, dst }, next, fragment, l4)
}

#[inline(always)]
fn decide(ctx: &XdpContext, addrs: &Addrs<'_>, protocol: u8, fragment: bool, l4: usize) -> Reason {
    if listed(
        addrs,
        (List::AllowV4, &ALLOW_V4),
        (List::AllowV6, &ALLOW_V6),
    ) {
        return Reason::Allowlist;
    }
    if listed(
        addrs,
        (List::BlockV4, &BLOCK_V4),
        (List::BlockV6, &BLOCK_V6),
    ) {
        return Reason::Blocklist;
    }
    let protected = match addrs {
        Addrs::V4 { dst, .. } => {
            protected(&PROTECTED_V4, 0, [u64::from(u32::from_be_bytes(*dst)), 0])
        }
        Addrs::V6 { dst, .. } => protected(&PROTECTED_V6, 1, halves(dst)),
    };
    if !protected {
        return Reason::Pass;
    }
    if fragment {
        return Reason::Fragment;
    }
    let v6 = matches!(addrs, Addrs::V6 { .. });
    match protocol {
        IPPROTO_TCP => tcp(ctx, addrs, l4),
        IPPROTO_UDP => {
            let Some(udp) = bytes::<8>(ctx, l4) else {
                return Reason::Malformed;
            };
            let port = u16::from_be_bytes([udp[2], udp[3]]);
            if served(&UDP_PORTS, port) {
                Reason::Pass
            } else {
                Reason::Protocol
            }
        }
        IPPROTO_ICMP if !v6 => icmp(),
        IPPROTO_ICMPV6 if v6 => icmp(),
        _ => Reason::Protocol,
    }
}

#[inline(always)]
fn tcp(ctx: &XdpContext, addrs: &Addrs<'_>, l4: usize) -> Reason {
    let Some(tcp) = bytes::<20>(ctx, l4) else {
        return Reason::Malformed;
    };
    let header_len = ((tcp[12] >> 4) as usize) * 4;
    if header_len < 20 || l4 + header_len > ctx.data_end() - ctx.data() {
        return Reason::Malformed;
    }
    let flags = tcp[13];
    let invalid = flags & (SYN | FIN) == SYN | FIN
        || flags & (SYN | RST) == SYN | RST
        || (flags & FIN != 0 && flags & ACK == 0)
        || flags & 0x3f == 0
        || flags & (FIN | PSH | URG) == FIN | PSH | URG;
    if invalid {
        return Reason::TcpFlags;
    }
    let port = u16::from_be_bytes([tcp[2], tcp[3]]);
    if !served(&TCP_PORTS, port) {
        return Reason::Port;
    }
    let new_connection = flags & (SYN | ACK) == SYN;
    if new_connection && let Some(seen) = SYNS.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of a map this program owns.
        unsafe { *seen += 1 };
    }
    if SHIELD.get(0).is_some_and(|shield| *shield == SHIELD_UP)
        && !listed(addrs, (List::OpenV4, &OPEN_V4), (List::OpenV6, &OPEN_V6))
    {
        return Reason::UnderAttack;
    }
    if new_connection && !syn_allowed(addrs) {
        return Reason::SynRate;
    }
    Reason::Pass
}

/// Whether the source is on a list (IPv4 and IPv6 sides): its hint bit first, then the
/// trie only when the bit is set.
#[inline(always)]
fn listed(
    addrs: &Addrs<'_>,
    v4: (List, &LpmTrie<[u8; 4], u8>),
    v6: (List, &LpmTrie<[u8; 16], u8>),
) -> bool {
    let hinted = |list: List, hint| HINTS.get(list as u32).is_some_and(|h| h.has(hint));
    match addrs {
        Addrs::V4 { src, .. } => {
            hinted(v4.0, v4_hint(u32::from_be_bytes(*src)))
                && v4.1.get(Key::new(32, *src)).is_some()
        }
        Addrs::V6 { src, .. } => {
            hinted(
                v6.0,
                v6_hint(u32::from_be_bytes([src[0], src[1], src[2], src[3]])),
            ) && v6.1.get(Key::new(128, **src)).is_some()
        }
    }
}

/// Per-source token bucket for new connections: per /32, or per /64 for IPv6 (one host
/// usually holds a whole /64).
#[inline(always)]
fn syn_allowed(addrs: &Addrs<'_>) -> bool {
    let Some(limits) = LIMITS.get(0) else {
        return true;
    };
    if limits.syn_per_second == 0 {
        return true;
    }
    // SAFETY: reading the monotonic clock has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    match addrs {
        Addrs::V4 { src, .. } => spend(
            &SYN_V4,
            u32::from_be_bytes(*src),
            now,
            limits.syn_per_second,
            limits.syn_burst,
        ),
        Addrs::V6 { src, .. } => {
            let mut prefix = [0u8; 8];
            prefix.copy_from_slice(&src[..8]);
            spend(
                &SYN_V6,
                u64::from_be_bytes(prefix),
                now,
                limits.syn_per_second,
                limits.syn_burst,
            )
        }
    }
}

#[inline(always)]
fn spend<K>(
    buckets: &LruHashMap<K, Bucket>,
    key: K,
    now: u64,
    per_second: u64,
    burst: u64,
) -> bool {
    match buckets.get_ptr_mut(&key) {
        // SAFETY: an entry of a map this program owns; races between CPUs only blur
        // the count a little, which a rate limit tolerates.
        Some(bucket) => take_token(unsafe { &mut *bucket }, now, per_second, burst),
        None => {
            let mut bucket = Bucket::default();
            let allowed = take_token(&mut bucket, now, per_second, burst);
            let _ = buckets.insert(&key, bucket, 0);
            allowed
        }
    }
}

#[inline(always)]
fn icmp() -> Reason {
    let Some(limits) = LIMITS.get(0) else {
        return Reason::Pass;
    };
    if limits.icmp_per_second == 0 {
        return Reason::Pass;
    }
    let Some(bucket) = ICMP_BUCKET.get_ptr_mut(0) else {
        return Reason::Pass;
    };
    // SAFETY: a helper without arguments, callable from any XDP program.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: as in `spend`; this bucket is global, shared by every CPU.
    let bucket = unsafe { &mut *bucket };
    if take_token(bucket, now, limits.icmp_per_second, limits.icmp_burst) {
        Reason::Pass
    } else {
        Reason::IcmpRate
    }
}

#[inline(always)]
fn protected(prefixes: &Array<Prefix>, family: u32, addr: [u64; 2]) -> bool {
    let count = PROTECTED_COUNT.get(family).copied().unwrap_or(0);
    for i in 0..MAX_PROTECTED {
        if i >= count {
            break;
        }
        if let Some(p) = prefixes.get(i)
            && addr[0] & p.mask[0] == p.addr[0]
            && addr[1] & p.mask[1] == p.addr[1]
        {
            return true;
        }
    }
    false
}

#[inline(always)]
fn halves(addr: &[u8; 16]) -> [u64; 2] {
    let mut high = [0u8; 8];
    let mut low = [0u8; 8];
    high.copy_from_slice(&addr[..8]);
    low.copy_from_slice(&addr[8..]);
    [u64::from_be_bytes(high), u64::from_be_bytes(low)]
}

#[inline(always)]
fn served(ports: &Array<u8>, port: u16) -> bool {
    ports
        .get(u32::from(port))
        .is_some_and(|present| *present != 0)
}

/// `N` packet bytes at `offset`, if the packet holds them.
#[inline(always)]
fn bytes<const N: usize>(ctx: &XdpContext, offset: usize) -> Option<&[u8; N]> {
    let start = ctx.data() + offset;
    if start + size_of::<[u8; N]>() > ctx.data_end() {
        return None;
    }
    // SAFETY: bounds checked against data_end just above; u8 arrays need no alignment.
    Some(unsafe { &*(start as *const [u8; N]) })
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ROUTING: u8 = 43;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_AH: u8 = 51;
const IPPROTO_ICMPV6: u8 = 58;
const IPPROTO_DSTOPTS: u8 = 60;
const MAX_EXTENSION_HEADERS: usize = 6;
const MAX_L4_OFFSET: usize = 512;
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const URG: u8 = 0x20;
const LIST_ENTRIES: u32 = 65_536;
const PORTS: u32 = 65_536;
const RATE_ENTRIES: u32 = 65_536;
