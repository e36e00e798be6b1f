//! The XDP program in the kernel, fed crafted packets with BPF_PROG_TEST_RUN: the
//! verifier accepts it, and every packet gets the expected verdict and counter. Root.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::net::{Ipv4Addr, Ipv6Addr};

use edge_xdp::config::Settings;
use edge_xdp::filter::Filter;
use testkit::packets::*;
use xdp_common::Reason;

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;

const CONFIG: &str = r#"
pop: test
interface: lo
metrics_listen: 127.0.0.1:0
protected: [192.0.2.0/24, "2001:db8:1::/48"]
tcp_ports: [80, 443]
udp_ports: [4433]
allowlist: [198.51.100.0/24, "2001:db8:aaaa::/48"]
blocklist: [203.0.113.0/24, "2001:db8:bad::/48"]
syn_rate: { per_second: 1, burst: 3 }
icmp_rate: { per_second: 1, burst: 2 }
"#;

const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const CLIENT: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 10);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 1, 0, 0, 0, 1);

fn filter() -> Filter {
    let mut filter = Filter::load().expect("the verifier accepts the program");
    filter.apply(&Settings::parse(CONFIG).unwrap()).unwrap();
    filter
}

/// Runs one packet; asserts the action and that exactly `reason`'s counter moved by one
/// packet of the packet's length.
#[track_caller]
fn expect(filter: &Filter, packet: &[u8], reason: Reason, what: &str) {
    let before = filter.counters().unwrap();
    let (action, _) = filter
        .test_run(packet, 1)
        .unwrap_or_else(|e| panic!("{what}: test_run: {e:#}"));
    let after = filter.counters().unwrap();
    let expected_action = if reason.drops() { XDP_DROP } else { XDP_PASS };
    let moved: Vec<&str> = xdp_common::Reason::ALL
        .iter()
        .filter(|r| after[**r as usize].packets != before[**r as usize].packets)
        .map(|r| r.name())
        .collect();
    assert_eq!(moved, vec![reason.name()], "{what}: counters moved");
    assert_eq!(
        after[reason as usize].bytes - before[reason as usize].bytes,
        packet.len() as u64,
        "{what}: bytes"
    );
    assert_eq!(action, expected_action, "{what}: action");
}

#[test]
fn every_rule_and_reason_v4() {
    testkit::require_root!("loading an XDP program");
    let f = filter();
    let syn = |src, dst, port| ipv4(src, dst, 6, &tcp(port, SYN)).bytes();
    expect(&f, &arp().bytes(), Reason::Pass, "non-IP passes");
    expect(
        &f,
        &syn(CLIENT, VIP, 443),
        Reason::Pass,
        "SYN to a served port",
    );
    expect(
        &f,
        &ipv4(CLIENT, Ipv4Addr::new(10, 1, 1, 1), 6, &tcp(22, SYN | FIN)).bytes(),
        Reason::Pass,
        "unprotected destination",
    );
    expect(
        &f,
        &ipv4(Ipv4Addr::new(198, 51, 100, 7), VIP, 6, &tcp(22, SYN | FIN)).bytes(),
        Reason::Allowlist,
        "allowlisted source",
    );
    expect(
        &f,
        &syn(Ipv4Addr::new(203, 0, 113, 9), VIP, 443),
        Reason::Blocklist,
        "blocklisted source",
    );
    expect(
        &f,
        &ipv4(
            Ipv4Addr::new(203, 0, 113, 9),
            Ipv4Addr::new(10, 1, 1, 1),
            6,
            &tcp(443, ACK),
        )
        .bytes(),
        Reason::Blocklist,
        "blocklist applies to any destination",
    );
    expect(
        &f,
        &ipv4_with(CLIENT, VIP, 6, &tcp(443, ACK), &[], 0x2000).bytes(),
        Reason::Fragment,
        "more-fragments",
    );
    expect(
        &f,
        &ipv4_with(CLIENT, VIP, 6, &[0; 8], &[], 0x0010).bytes(),
        Reason::Fragment,
        "non-zero offset",
    );
    expect(
        &f,
        &ipv4(CLIENT, VIP, 47, &[0; 8]).bytes(),
        Reason::Protocol,
        "GRE",
    );
    expect(
        &f,
        &ipv4(CLIENT, VIP, 17, &udp(53)).bytes(),
        Reason::Protocol,
        "UDP to an unserved port",
    );
    expect(
        &f,
        &ipv4(CLIENT, VIP, 17, &udp(4433)).bytes(),
        Reason::Pass,
        "UDP to a served port",
    );
    expect(
        &f,
        &ipv4(CLIENT, VIP, 6, &tcp(22, SYN)).bytes(),
        Reason::Port,
        "closed port",
    );
    for (flags, name) in [
        (SYN | FIN, "SYN+FIN"),
        (SYN | RST, "SYN+RST"),
        (FIN, "FIN without ACK"),
        (0, "NULL"),
        (FIN | PSH | URG, "XMAS"),
    ] {
        expect(
            &f,
            &ipv4(CLIENT, VIP, 6, &tcp(443, flags)).bytes(),
            Reason::TcpFlags,
            name,
        );
    }
    expect(
        &f,
        &ipv4(CLIENT, VIP, 6, &tcp(443, FIN | ACK)).bytes(),
        Reason::Pass,
        "FIN+ACK is fine",
    );
    expect(
        &f,
        &ipv4_with(CLIENT, VIP, 6, &tcp(443, ACK), &[1, 1, 1, 0], 0).bytes(),
        Reason::Pass,
        "IPv4 options",
    );
}

#[test]
fn syn_and_icmp_rates() {
    testkit::require_root!("loading an XDP program");
    let f = filter();
    let src = Ipv4Addr::new(100, 64, 9, 9);
    for i in 0..3 {
        expect(
            &f,
            &ipv4(src, VIP, 6, &tcp(443, SYN)).bytes(),
            Reason::Pass,
            &format!("SYN {i} within the burst"),
        );
    }
    expect(
        &f,
        &ipv4(src, VIP, 6, &tcp(443, SYN)).bytes(),
        Reason::SynRate,
        "SYN over the rate",
    );
    expect(
        &f,
        &ipv4(src, VIP, 6, &tcp(443, ACK)).bytes(),
        Reason::Pass,
        "established traffic is not rate limited",
    );
    expect(
        &f,
        &ipv4(Ipv4Addr::new(100, 64, 9, 10), VIP, 6, &tcp(443, SYN)).bytes(),
        Reason::Pass,
        "another source has its own bucket",
    );
    for i in 0..2 {
        expect(
            &f,
            &ipv4(CLIENT, VIP, 1, &icmp_echo()).bytes(),
            Reason::Pass,
            &format!("ICMP {i}"),
        );
    }
    expect(
        &f,
        &ipv4(Ipv4Addr::new(100, 64, 1, 2), VIP, 1, &icmp_echo()).bytes(),
        Reason::IcmpRate,
        "ICMP over the global rate",
    );
}

#[test]
fn vlan_tags() {
    testkit::require_root!("loading an XDP program");
    let f = filter();
    let syn = ipv4(CLIENT, VIP, 6, &tcp(80, SYN | ACK));
    expect(&f, &syn.clone().vlan(10).bytes(), Reason::Pass, "one tag");
    expect(
        &f,
        &syn.clone().vlan(10).vlan(20).bytes(),
        Reason::Pass,
        "two tags",
    );
    expect(
        &f,
        &ipv4(CLIENT, VIP, 6, &tcp(22, SYN))
            .vlan(10)
            .vlan(20)
            .bytes(),
        Reason::Port,
        "rules apply behind two tags",
    );
    expect(
        &f,
        &syn.vlan(10).vlan(20).vlan(30).bytes(),
        Reason::Malformed,
        "three tags",
    );
}

#[test]
fn malformed_v4() {
    testkit::require_root!("loading an XDP program");
    let f = filter();
    let whole = ipv4(CLIENT, VIP, 6, &tcp(443, ACK)).vlan(5).bytes();
    // The kernel runs XDP tests only on frames of at least an Ethernet header.
    for cut in 14..whole.len() {
        expect(
            &f,
            &whole[..cut],
            Reason::Malformed,
            &format!("truncated at {cut}"),
        );
    }
    expect(&f, &whole, Reason::Pass, "whole");
    let mut bad_ihl = ipv4(CLIENT, VIP, 6, &tcp(443, ACK)).bytes();
    bad_ihl[14] = 0x44;
    expect(&f, &bad_ihl, Reason::Malformed, "IHL 4");
    let mut long_total = ipv4(CLIENT, VIP, 6, &tcp(443, ACK)).bytes();
    long_total[16..18].copy_from_slice(&200u16.to_be_bytes());
    expect(
        &f,
        &long_total,
        Reason::Malformed,
        "total length past the frame",
    );
    let mut short_total = ipv4(CLIENT, VIP, 6, &tcp(443, ACK)).bytes();
    short_total[16..18].copy_from_slice(&12u16.to_be_bytes());
    expect(
        &f,
        &short_total,
        Reason::Malformed,
        "total length under the header",
    );
    let mut version = ipv4(CLIENT, VIP, 6, &tcp(443, ACK)).bytes();
    version[14] = 0x65;
    expect(
        &f,
        &version,
        Reason::Malformed,
        "version 6 in an IPv4 frame",
    );
    let mut doff = ipv4(CLIENT, VIP, 6, &tcp(443, ACK)).bytes();
    doff[34 + 12] = 4 << 4;
    expect(&f, &doff, Reason::Malformed, "TCP data offset 4");
}

#[test]
fn ipv6_rules_extension_headers_and_rates() {
    testkit::require_root!("loading an XDP program");
    let f = filter();
    let syn6 = |src, ext: &[(u8, usize)]| ipv6(src, VIP6, ext, 6, &tcp(443, SYN)).bytes();
    expect(&f, &syn6(CLIENT6, &[]), Reason::Pass, "v6 SYN");
    expect(
        &f,
        &syn6(CLIENT6, &[(0, 0), (60, 1)]),
        Reason::Pass,
        "hop-by-hop + destination options",
    );
    expect(
        &f,
        &syn6(CLIENT6, &[(44, 0)]),
        Reason::Fragment,
        "fragment header",
    );
    expect(
        &f,
        &syn6(CLIENT6, &[(60, 0); 7]),
        Reason::Malformed,
        "extension chain longer than we walk",
    );
    let mut truncated = syn6(CLIENT6, &[(60, 2)]);
    truncated.truncate(14 + 40 + 10);
    expect(
        &f,
        &truncated,
        Reason::Malformed,
        "truncated extension header",
    );
    let mut long_payload = syn6(CLIENT6, &[]);
    long_payload[14 + 4..14 + 6].copy_from_slice(&500u16.to_be_bytes());
    expect(
        &f,
        &long_payload,
        Reason::Malformed,
        "payload length past the frame",
    );
    expect(
        &f,
        &ipv6(CLIENT6, VIP6, &[], 17, &udp(53)).bytes(),
        Reason::Protocol,
        "v6 UDP unserved",
    );
    expect(
        &f,
        &ipv6(CLIENT6, VIP6, &[], 6, &tcp(8080, SYN)).bytes(),
        Reason::Port,
        "v6 closed port",
    );
    expect(
        &f,
        &ipv6(CLIENT6, VIP6, &[], 6, &tcp(443, 0)).bytes(),
        Reason::TcpFlags,
        "v6 NULL scan",
    );
    expect(
        &f,
        &ipv6(
            CLIENT6,
            Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1),
            &[],
            6,
            &tcp(22, 0),
        )
        .bytes(),
        Reason::Pass,
        "v6 unprotected",
    );
    let allowed = Ipv6Addr::new(0x2001, 0xdb8, 0xaaaa, 0, 0, 0, 0, 5);
    expect(
        &f,
        &ipv6(allowed, VIP6, &[], 6, &tcp(22, 0)).bytes(),
        Reason::Allowlist,
        "v6 allowlist",
    );
    let blocked = Ipv6Addr::new(0x2001, 0xdb8, 0xbad, 0, 0, 0, 0, 5);
    expect(&f, &syn6(blocked, &[]), Reason::Blocklist, "v6 blocklist");
    let whole = syn6(CLIENT6, &[(0, 0)]);
    for cut in 14..whole.len() {
        expect(
            &f,
            &whole[..cut],
            Reason::Malformed,
            &format!("v6 truncated at {cut}"),
        );
    }
    // One bucket per /64: two hosts in the same /64 share it.
    let a = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 1, 0, 0, 0, 1);
    let b = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 1, 0, 0, 0, 2);
    for src in [a, b, a] {
        expect(&f, &syn6(src, &[]), Reason::Pass, "within the /64's burst");
    }
    expect(
        &f,
        &syn6(b, &[]),
        Reason::SynRate,
        "the /64 is over its rate",
    );
    for _ in 0..2 {
        expect(
            &f,
            &ipv6(CLIENT6, VIP6, &[], 58, &icmpv6_echo()).bytes(),
            Reason::Pass,
            "ICMPv6",
        );
    }
    expect(
        &f,
        &ipv6(CLIENT6, VIP6, &[], 58, &icmpv6_echo()).bytes(),
        Reason::IcmpRate,
        "ICMPv6 over the rate",
    );
}

#[test]
fn empty_lists_are_skipped_and_refilled_lists_apply() {
    testkit::require_root!("loading an XDP program");
    let mut f = filter();
    let text = CONFIG.replace(
        "allowlist: [198.51.100.0/24, \"2001:db8:aaaa::/48\"]",
        "allowlist: []",
    );
    f.apply(&Settings::parse(&text).unwrap()).unwrap();
    let src = Ipv4Addr::new(198, 51, 100, 7);
    expect(
        &f,
        &ipv4(src, VIP, 6, &tcp(22, SYN | FIN)).bytes(),
        Reason::TcpFlags,
        "no allowlist any more",
    );
    f.apply(&Settings::parse(CONFIG).unwrap()).unwrap();
    expect(
        &f,
        &ipv4(src, VIP, 6, &tcp(22, SYN | FIN)).bytes(),
        Reason::Allowlist,
        "allowlist back",
    );
}

#[test]
fn lists_are_replaced_on_reapply() {
    testkit::require_root!("loading an XDP program");
    let mut f = filter();
    let src = Ipv4Addr::new(100, 64, 200, 1);
    expect(
        &f,
        &ipv4(src, VIP, 6, &tcp(443, ACK)).bytes(),
        Reason::Pass,
        "before",
    );
    let text = CONFIG.replace("blocklist: [203.0.113.0/24", "blocklist: [100.64.200.0/24");
    f.apply(&Settings::parse(&text).unwrap()).unwrap();
    expect(
        &f,
        &ipv4(src, VIP, 6, &tcp(443, ACK)).bytes(),
        Reason::Blocklist,
        "after the reload",
    );
    expect(
        &f,
        &ipv4(Ipv4Addr::new(203, 0, 113, 9), VIP, 6, &tcp(443, ACK)).bytes(),
        Reason::Pass,
        "the old entry is gone",
    );
}

#[test]
fn list_hints_only_skip_sources_the_lists_cannot_hold() {
    testkit::require_root!("loading an XDP program");
    let mut f = filter();
    let text = CONFIG.replace(
        "blocklist: [203.0.113.0/24, \"2001:db8:bad::/48\"]",
        "blocklist: [203.0.113.0/24, 10.0.0.0/7, 172.16.5.7/32, \"2001:db8:bad::/48\", \"2a00::/20\", \"::/0\"]",
    );
    f.apply(&Settings::parse(&text).unwrap()).unwrap();
    let ack = |src| ipv4(src, VIP, 6, &tcp(443, ACK)).bytes();
    for (src, reason, what) in [
        (
            Ipv4Addr::new(203, 0, 113, 255),
            Reason::Blocklist,
            "in the /24",
        ),
        (
            Ipv4Addr::new(203, 0, 1, 1),
            Reason::Pass,
            "its /16, outside the /24",
        ),
        (
            Ipv4Addr::new(10, 0, 0, 1),
            Reason::Blocklist,
            "first of a /7",
        ),
        (
            Ipv4Addr::new(11, 255, 255, 255),
            Reason::Blocklist,
            "last of a /7",
        ),
        (Ipv4Addr::new(12, 0, 0, 0), Reason::Pass, "just past the /7"),
        (Ipv4Addr::new(172, 16, 5, 7), Reason::Blocklist, "a /32"),
        (
            Ipv4Addr::new(172, 16, 5, 8),
            Reason::Pass,
            "next to the /32",
        ),
    ] {
        expect(&f, &ack(src), reason, what);
    }
    // "::/0" hints every IPv6 source: the trie alone decides, and blocks them all.
    let ack6 = |src| ipv6(src, VIP6, &[], 6, &tcp(443, ACK)).bytes();
    expect(
        &f,
        &ack6(CLIENT6),
        Reason::Blocklist,
        "::/0 holds every source",
    );
    let text = text.replace(", \"::/0\"]", "]");
    f.apply(&Settings::parse(&text).unwrap()).unwrap();
    for (src, reason, what) in [
        (
            Ipv6Addr::new(0x2a00, 0xfff, 0, 0, 0, 0, 0, 1),
            Reason::Blocklist,
            "in the /20",
        ),
        (
            Ipv6Addr::new(0x2a00, 0x1000, 0, 0, 0, 0, 0, 1),
            Reason::Pass,
            "past the /20",
        ),
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0xbad, 9, 0, 0, 0, 1),
            Reason::Blocklist,
            "in the /48",
        ),
        (
            CLIENT6,
            Reason::Pass,
            "::/0 is gone: the old hints went with it",
        ),
    ] {
        expect(&f, &ack6(src), reason, what);
    }
}

/// Under attack only the open ranges reach the served ports; the allowlist, other ports
/// and an open sender's own SYN budget behave as before; new SYNs are counted whatever
/// their verdict; lowered, every source passes again.
#[test]
fn under_attack_only_open_ranges_reach_the_served_ports() {
    testkit::require_root!("loading an XDP program");
    let mut f = filter();
    let open = Ipv4Addr::new(140, 82, 112, 9);
    let open6 = Ipv6Addr::new(0x2a0a, 0xa440, 0, 0, 0, 0, 0, 7);
    f.set_open(&[
        "140.82.112.0/20".parse().unwrap(),
        "2a0a:a440::/29".parse().unwrap(),
    ])
    .unwrap();
    f.set_shield(true).unwrap();
    let syns_before = f.new_syns().unwrap();
    let syn = |src, port| ipv4(src, VIP, 6, &tcp(port, SYN)).bytes();
    expect(&f, &syn(open, 443), Reason::Pass, "a provider's SYN");
    expect(
        &f,
        &syn(CLIENT, 443),
        Reason::UnderAttack,
        "anyone else's SYN",
    );
    expect(
        &f,
        &ipv4(CLIENT, VIP, 6, &tcp(443, ACK)).bytes(),
        Reason::UnderAttack,
        "anyone else's established flow",
    );
    expect(
        &f,
        &ipv6(CLIENT6, VIP6, &[], 6, &tcp(443, SYN)).bytes(),
        Reason::UnderAttack,
        "anyone else over IPv6",
    );
    expect(
        &f,
        &ipv6(open6, VIP6, &[], 6, &tcp(443, SYN)).bytes(),
        Reason::Pass,
        "a provider over IPv6",
    );
    expect(
        &f,
        &syn(CLIENT, 22),
        Reason::Port,
        "other ports keep their rule",
    );
    expect(
        &f,
        &syn(Ipv4Addr::new(198, 51, 100, 4), 443),
        Reason::Allowlist,
        "management is allowlisted",
    );
    for _ in 0..2 {
        expect(
            &f,
            &syn(open, 443),
            Reason::Pass,
            "within the provider's burst",
        );
    }
    expect(
        &f,
        &syn(open, 443),
        Reason::SynRate,
        "past its own SYN budget",
    );
    // Seven SYNs to 443 after the allowlist (which passes before anything is counted).
    assert_eq!(
        f.new_syns().unwrap() - syns_before,
        7,
        "every new SYN to a served port"
    );

    f.set_shield(false).unwrap();
    expect(
        &f,
        &syn(Ipv4Addr::new(100, 64, 9, 9), 443),
        Reason::Pass,
        "lowered: anyone",
    );
}
