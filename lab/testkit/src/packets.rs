//! Crafted packets for the filter's tests: Ethernet (with VLAN tags), IPv4/IPv6 (with
//! options and extension headers), TCP, UDP, ICMP. The IPv4 header checksum is right
//! (the kernel drops a bad one before iptables sees the packet); L4 checksums are left
//! zero: neither XDP nor the raw table checks them.

use std::net::{Ipv4Addr, Ipv6Addr};

/// TCP flag FIN.
pub const FIN: u8 = 0x01;
/// TCP flag SYN.
pub const SYN: u8 = 0x02;
/// TCP flag RST.
pub const RST: u8 = 0x04;
/// TCP flag PSH.
pub const PSH: u8 = 0x08;
/// TCP flag ACK.
pub const ACK: u8 = 0x10;
/// TCP flag URG.
pub const URG: u8 = 0x20;

/// An Ethernet frame to craft: VLAN tags, ethertype and the bytes after them.
#[derive(Clone)]
pub struct Packet {
    /// 802.1Q tags, outermost first.
    pub vlans: Vec<u16>,
    /// The ethertype after the tags.
    pub ethertype: u16,
    /// The layer-3 packet.
    pub l3: Vec<u8>,
}

impl Packet {
    /// The frame's bytes on the wire.
    pub fn bytes(&self) -> Vec<u8> {
        let mut wire = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        // Each tag: the TPID where the ethertype would be, then the TCI; the real
        // ethertype follows the last tag.
        for vid in &self.vlans {
            wire.extend_from_slice(&0x8100u16.to_be_bytes());
            wire.extend_from_slice(&vid.to_be_bytes());
        }
        wire.extend_from_slice(&self.ethertype.to_be_bytes());
        wire.extend_from_slice(&self.l3);
        wire
    }

    /// The same frame with one more VLAN tag.
    pub fn vlan(mut self, vid: u16) -> Packet {
        self.vlans.push(vid);
        self
    }
}

/// An ARP request.
pub fn arp() -> Packet {
    Packet {
        vlans: vec![],
        ethertype: 0x0806,
        l3: vec![0; 28],
    }
}

/// An IPv4 packet with a correct header checksum.
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4: &[u8]) -> Packet {
    ipv4_with(src, dst, protocol, l4, &[], 0)
}

/// IPv4 with `options` (a multiple of 4 bytes) and the flags/fragment-offset field.
pub fn ipv4_with(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    l4: &[u8],
    options: &[u8],
    frag: u16,
) -> Packet {
    let header_len = 20 + options.len();
    let total = (header_len + l4.len()) as u16;
    let mut ip = vec![0x40 | (header_len / 4) as u8, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 1]);
    ip.extend_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&[64, protocol, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(options);
    let checksum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    ip.extend_from_slice(l4);
    Packet {
        vlans: vec![],
        ethertype: 0x0800,
        l3: ip,
    }
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// IPv6 with extension headers `(type, body)`; bodies are padded to 8-byte units.
pub fn ipv6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    extensions: &[(u8, usize)],
    protocol: u8,
    l4: &[u8],
) -> Packet {
    let mut chain = Vec::new();
    let mut types: Vec<u8> = extensions.iter().map(|(t, _)| *t).collect();
    types.push(protocol);
    for (i, (kind, units)) in extensions.iter().enumerate() {
        let next = types[i + 1];
        if *kind == 44 {
            chain.extend_from_slice(&[next, 0, 0, 1, 0, 0, 0, 7]);
        } else {
            let len = 8 * (units + 1);
            let mut header = vec![0u8; len];
            header[0] = next;
            header[1] = *units as u8;
            chain.extend_from_slice(&header);
        }
    }
    let payload_len = (chain.len() + l4.len()) as u16;
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&payload_len.to_be_bytes());
    ip.push(types[0]);
    ip.push(64);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(&chain);
    ip.extend_from_slice(l4);
    Packet {
        vlans: vec![],
        ethertype: 0x86dd,
        l3: ip,
    }
}

/// A TCP header to `dst_port` with `flags`.
pub fn tcp(dst_port: u16, flags: u8) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0..2].copy_from_slice(&40000u16.to_be_bytes());
    h[2..4].copy_from_slice(&dst_port.to_be_bytes());
    h[12] = 5 << 4;
    h[13] = flags;
    h
}

/// A UDP header to `dst_port`.
pub fn udp(dst_port: u16) -> Vec<u8> {
    let mut h = vec![0u8; 8 + 16];
    h[0..2].copy_from_slice(&40000u16.to_be_bytes());
    h[2..4].copy_from_slice(&dst_port.to_be_bytes());
    h[4..6].copy_from_slice(&24u16.to_be_bytes());
    h
}

/// An ICMP echo request.
pub fn icmp_echo() -> Vec<u8> {
    let mut h = vec![0u8; 16];
    h[0] = 8;
    h
}

/// An ICMPv6 echo request.
pub fn icmpv6_echo() -> Vec<u8> {
    let mut h = vec![0u8; 16];
    h[0] = 128;
    h
}
