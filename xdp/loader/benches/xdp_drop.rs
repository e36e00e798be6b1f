//! Benchmarks (root): `cargo bench -p edge-xdp --bench xdp_drop`.
//!
//! 1. The program's size after the verifier, and nanoseconds per packet in the kernel
//!    (BPF_PROG_TEST_RUN, 1,000,000 repeats) for drop and pass paths beside the anchor,
//!    the smallest XDP program (what the harness costs by itself); medians and minimums
//!    of 15 alternating rounds.
//! 2. A SYN flood on a veth pair from a fast sender of our own (AF_PACKET,
//!    PACKET_QDISC_BYPASS, sendmmsg): XDP (driver and skb mode) dropping it by its SYN
//!    rate rule against an iptables `-t raw ... -j DROP` rule, same sender, alternating
//!    rounds: packets dropped per second, and machine CPU per packet (all CPUs, from
//!    /proc/stat, sender included: on veth the receive path runs inside the sender's
//!    transmit call, so the two cannot be told apart).

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark stops at the line that failed"
)]

use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::{Duration, Instant};

use edge_xdp::config::Settings;
use edge_xdp::filter::Filter;
use testkit::packets::*;

const FLOOD_SECONDS: u64 = 3;
const TEST_RUN_REPEATS: u32 = 1_000_000;
const TEST_RUN_ROUNDS: usize = 15;
const TEST_RUN_CPU: usize = 1;

fn main() {
    if let Ok(spec) = std::env::var("XDP_BENCH_SENDER") {
        return sender(&spec);
    }
    test_run_nanoseconds();
    syn_flood();
}

fn test_run_nanoseconds() {
    // BPF_PROG_TEST_RUN runs on the calling CPU: one CPU for every sample.
    pin_to_cpu(TEST_RUN_CPU);
    let config = Settings::parse("pop: b\ninterface: lo\nmetrics_listen: 127.0.0.1:0\nprotected: [192.0.2.0/24, \"2001:db8:1::/48\"]\nblocklist: [203.0.113.0/24]\n").unwrap();
    let load = || {
        let mut filter = Filter::load().unwrap();
        filter.apply(&config).unwrap();
        (filter, SmallestXdp::load())
    };
    let (instructions, jited) = load().0.program_size().unwrap();
    let vip = Ipv4Addr::new(192, 0, 2, 10);
    let cases = [
        (
            "drop: SYN+FIN to the VIP",
            ipv4(Ipv4Addr::new(100, 64, 0, 1), vip, 6, &tcp(443, SYN | FIN)).bytes(),
        ),
        (
            "drop: blocklisted source",
            ipv4(Ipv4Addr::new(203, 0, 113, 1), vip, 6, &tcp(443, ACK)).bytes(),
        ),
        (
            "pass: ACK to 443",
            ipv4(Ipv4Addr::new(100, 64, 0, 1), vip, 6, &tcp(443, ACK)).bytes(),
        ),
        (
            "pass: IPv6 ACK to 443",
            ipv6(
                Ipv6Addr::new(0x2001, 0xdb8, 0x77, 1, 0, 0, 0, 1),
                Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 10),
                &[],
                6,
                &tcp(443, ACK),
            )
            .bytes(),
        ),
        (
            "pass: not for a protected prefix",
            ipv4(
                Ipv4Addr::new(100, 64, 0, 1),
                Ipv4Addr::new(10, 0, 0, 1),
                6,
                &tcp(443, ACK),
            )
            .bytes(),
        ),
    ];
    // Rounds alternate the anchor and the cases so drift hits them alike. Each round
    // loads both programs anew: where the JIT and the maps land moves a figure by up to
    // 15 ns from one load to the next, and a median over loads is what a PoP can expect.
    let mut anchor_ns = Vec::new();
    let mut case_ns: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for _ in 0..TEST_RUN_ROUNDS {
        let (filter, anchor) = load();
        anchor_ns.push(anchor.test_run(&cases[0].1, TEST_RUN_REPEATS));
        for (samples, (_, packet)) in case_ns.iter_mut().zip(&cases) {
            let (_, mean) = filter.test_run(packet, TEST_RUN_REPEATS).unwrap();
            samples.push(mean.as_nanos() as f64);
        }
    }
    let floor = median(&mut anchor_ns);
    let floor_min = anchor_ns[0];
    println!("program after the verifier: {instructions} instructions, {jited} bytes JIT-compiled");
    println!(
        "BPF_PROG_TEST_RUN on CPU {TEST_RUN_CPU}, {TEST_RUN_REPEATS} repeats, {TEST_RUN_ROUNDS} alternating rounds on fresh loads; ns/packet, median (min):"
    );
    println!(
        "  {:<34} {floor:>5.1} ({floor_min:>4.1})  the harness's own cost",
        "anchor: `return XDP_DROP`"
    );
    for ((name, _), samples) in cases.iter().zip(&mut case_ns) {
        let ns = median(samples);
        let min = samples[0];
        println!(
            "  {name:<34} {ns:>5.1} ({min:>4.1})  {:>4.1} ({:>4.1}) above the anchor",
            ns - floor,
            min - floor_min
        );
    }
}

fn syn_flood() {
    let mut lab = testkit::xdp::Lab::new("b");
    let victim_mac = mac(&lab, &lab.victim, &lab.veth);
    let sender_mac = mac(&lab, &lab.sender, &lab.peer);
    let contenders = ["xdp-driver", "iptables", "xdp-skb"];
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); contenders.len()];
    for round in 0..3 {
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        order.rotate_left(round % contenders.len());
        for index in order {
            let contender = contenders[index];
            let (dropped, cpu_ns, sent) = match contender.strip_prefix("xdp-") {
                Some(mode) => {
                    let config = lab.config(mode, "203.0.113.0/24");
                    let loader = lab.start_loader(&config);
                    let before = lab.counters()["syn_rate"];
                    let (sent, cpu_ns) = flood(&lab, &victim_mac, &sender_mac);
                    let dropped = lab.counters()["syn_rate"] - before;
                    nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(loader as i32),
                        nix::sys::signal::Signal::SIGTERM,
                    )
                    .unwrap();
                    while !lab.xdp_prog_id().is_empty() {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    (dropped, cpu_ns, sent)
                }
                None => {
                    let rule = [
                        "-t",
                        "raw",
                        "-A",
                        "PREROUTING",
                        "-p",
                        "tcp",
                        "--syn",
                        "-d",
                        "192.0.2.10",
                        "-j",
                        "DROP",
                    ];
                    lab.exec(&lab.victim, &[&["iptables"][..], &rule[..]].concat());
                    let (sent, cpu_ns) = flood(&lab, &victim_mac, &sender_mac);
                    let listing = lab.exec(
                        &lab.victim,
                        &[
                            "iptables",
                            "-t",
                            "raw",
                            "-L",
                            "PREROUTING",
                            "-v",
                            "-x",
                            "-n",
                        ],
                    );
                    let dropped = listing
                        .lines()
                        .find(|l| l.contains("DROP"))
                        .and_then(|l| l.split_whitespace().next())
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    lab.exec(&lab.victim, &["iptables", "-t", "raw", "-F", "PREROUTING"]);
                    (dropped, cpu_ns, sent)
                }
            };
            let rate = dropped as f64 / FLOOD_SECONDS as f64;
            let cpu_per_packet = cpu_ns as f64 / dropped.max(1) as f64;
            println!(
                "round {round}: {contender:<10} sent {sent:>9}  dropped {dropped:>9} ({rate:>9.0}/s)  {cpu_per_packet:>6.0} ns CPU per packet"
            );
            results[index].push((rate, cpu_per_packet));
        }
    }
    let median = |v: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
        median(&mut v.iter().map(pick).collect::<Vec<f64>>())
    };
    println!(
        "\nSYN flood on veth, {FLOOD_SECONDS} s per round, medians of 3 (machine CPU per packet, sender included):"
    );
    for (index, contender) in contenders.iter().enumerate() {
        println!(
            "  {contender:<10} {:>9.0} drops/s  {:>6.0} ns CPU per packet",
            median(&results[index], |e| e.0),
            median(&results[index], |e| e.1)
        );
    }
    let (ipt_rate, ipt_cpu) = (median(&results[1], |e| e.0), median(&results[1], |e| e.1));
    for index in [0, 2] {
        println!(
            "  ratio {} / iptables: drops/s {:.2}, CPU per packet (iptables/XDP) {:.2}",
            contenders[index],
            median(&results[index], |e| e.0) / ipt_rate,
            ipt_cpu / median(&results[index], |e| e.1)
        );
    }
}

/// Runs the sender in the sender namespace for FLOOD_SECONDS; returns frames sent and
/// the CPU time all CPUs spent meanwhile.
fn flood(lab: &testkit::xdp::Lab, victim_mac: &[u8; 6], sender_mac: &[u8; 6]) -> (u64, u64) {
    let spec = format!("{},{},{}", lab.peer, hex(victim_mac), hex(sender_mac));
    let busy_before = busy_ns();
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.sender])
        .arg(std::env::current_exe().unwrap())
        .env("XDP_BENCH_SENDER", spec)
        .output()
        .unwrap();
    let busy = busy_ns() - busy_before;
    std::thread::sleep(Duration::from_millis(200));
    let sent = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (sent, busy)
}

/// Sender mode: SYN frames to the VIP from one source, as fast as sendmmsg goes.
fn sender(spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    let (ifname, dst_mac, src_mac) = (parts[0], unhex(parts[1]), unhex(parts[2]));
    let mut frame = ipv4(
        Ipv4Addr::new(100, 64, 55, 5),
        Ipv4Addr::new(192, 0, 2, 10),
        6,
        &tcp(443, SYN),
    )
    .bytes();
    frame[0..6].copy_from_slice(&dst_mac);
    frame[6..12].copy_from_slice(&src_mac);
    // SAFETY: plain socket calls with correctly sized arguments; the frame outlives them.
    let sent = unsafe {
        let fd = libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            (libc::ETH_P_ALL as u16).to_be() as i32,
        );
        assert!(fd >= 0, "AF_PACKET socket");
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            (&one as *const libc::c_int).cast(),
            4,
        );
        let name = std::ffi::CString::new(ifname).unwrap();
        let mut addr: libc::sockaddr_ll = std::mem::zeroed();
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_IP as u16).to_be();
        addr.sll_ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
        assert_eq!(
            libc::bind(
                fd,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32
            ),
            0,
            "bind"
        );
        let mut iov = libc::iovec {
            iov_base: frame.as_mut_ptr().cast(),
            iov_len: frame.len(),
        };
        let mut messages: Vec<libc::mmsghdr> = (0..64)
            .map(|_| {
                let mut m: libc::mmsghdr = std::mem::zeroed();
                m.msg_hdr.msg_iov = &mut iov;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(FLOOD_SECONDS);
        let mut sent = 0u64;
        while Instant::now() < deadline {
            let n = libc::sendmmsg(fd, messages.as_mut_ptr(), messages.len() as u32, 0);
            if n > 0 {
                sent += n as u64;
            }
        }
        libc::close(fd);
        sent
    };
    println!("{sent}");
}

fn mac(lab: &testkit::xdp::Lab, ns: &str, ifname: &str) -> [u8; 6] {
    let out = lab.exec(ns, &["cat", &format!("/sys/class/net/{ifname}/address")]);
    unhex(&out.trim().replace(':', ""))
}

fn hex(mac: &[u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> [u8; 6] {
    let mut out = [0u8; 6];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; the set outlives the call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity"
        );
    }
}

/// The anchor: the smallest XDP program there is (`r0 = XDP_DROP; exit`), loaded with
/// the bpf syscall, so what BPF_PROG_TEST_RUN costs by itself is measured beside ours.
struct SmallestXdp {
    fd: i32,
}

impl SmallestXdp {
    fn load() -> SmallestXdp {
        let instructions: [u64; 2] = [
            u64::from_le_bytes([0xb7, 0, 0, 0, XDP_DROP as u8, 0, 0, 0]),
            u64::from_le_bytes([0x95, 0, 0, 0, 0, 0, 0, 0]),
        ];
        let license = c"GPL";
        let mut attr = [0u8; BPF_ATTR_BYTES];
        attr[0..4].copy_from_slice(&BPF_PROG_TYPE_XDP.to_ne_bytes());
        attr[4..8].copy_from_slice(&(instructions.len() as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(instructions.as_ptr() as u64).to_ne_bytes());
        attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
        let fd = bpf(BPF_PROG_LOAD, &mut attr);
        assert!(
            fd >= 0,
            "loading the anchor program: {}",
            std::io::Error::last_os_error()
        );
        SmallestXdp { fd: fd as i32 }
    }

    /// Mean ns per run of `packet`, as the kernel measured it.
    fn test_run(&self, packet: &[u8], repeat: u32) -> f64 {
        let mut attr = [0u8; BPF_ATTR_BYTES];
        attr[0..4].copy_from_slice(&(self.fd as u32).to_ne_bytes());
        attr[8..12].copy_from_slice(&(packet.len() as u32).to_ne_bytes());
        attr[16..24].copy_from_slice(&(packet.as_ptr() as u64).to_ne_bytes());
        attr[32..36].copy_from_slice(&repeat.to_ne_bytes());
        let status = bpf(BPF_PROG_TEST_RUN, &mut attr);
        assert_eq!(status, 0, "test run: {}", std::io::Error::last_os_error());
        let retval = u32::from_ne_bytes(attr[4..8].try_into().unwrap());
        assert_eq!(retval, XDP_DROP, "the anchor drops");
        f64::from(u32::from_ne_bytes(attr[36..40].try_into().unwrap()))
    }
}

impl Drop for SmallestXdp {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

fn bpf(command: libc::c_long, attr: &mut [u8; BPF_ATTR_BYTES]) -> libc::c_long {
    // SAFETY: `attr` is a zero-padded `union bpf_attr` of the size passed.
    unsafe { libc::syscall(libc::SYS_bpf, command, attr.as_mut_ptr(), BPF_ATTR_BYTES) }
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_ATTR_BYTES: usize = 128;
const XDP_DROP: u32 = 1;

/// Non-idle CPU time of all CPUs so far, in ns.
fn busy_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields[3] + fields[4];
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    (total - idle) * 1_000_000_000 / hz
}
