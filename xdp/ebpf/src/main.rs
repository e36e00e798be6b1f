//! The XDP program on the PoP's public interface. In order: parse (Ethernet, up to two
//! VLAN tags, IPv4 with options, IPv6 with a bounded extension-header walk; anything
//! truncated or inconsistent is dropped as `malformed`, non-IP passes), allowlist →
//! pass, blocklist → drop, destination outside the protected (anycast) prefixes → pass,
//! then for protected destinations: fragments, unserved protocols and ports, invalid TCP
//! flags, per-source SYN rate, global ICMP rate. Every verdict is counted by reason.
//!
//! Built for the host it is an empty binary, so `cargo build --workspace` works; the
//! loader's build script builds it for the BPF target.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]

#[cfg(target_arch = "bpf")]
mod program;

#[cfg(not(target_arch = "bpf"))]
fn main() {}
