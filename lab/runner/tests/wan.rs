//! `lab wan` between two namespaces (as root): the round trip is twice the delay, a bulk
//! TCP transfer crosses whole (segmentation-offloaded frames included), and the share
//! of datagrams lost is the share asked for.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::Child;
use std::time::{Duration, Instant};

use lab::netns::{Netns, run_ok, spawn_logged, veth};

#[test]
fn a_wan_link_delays_and_loses_what_it_is_told() {
    if !lab::has_root("a_wan_link_delays_and_loses_what_it_is_told", NEEDS_ROOT) {
        return;
    }
    let (a, wire, b) = (
        Netns::create("wan-test-a").unwrap(),
        Netns::create("wan-test-wire").unwrap(),
        Netns::create("wan-test-b").unwrap(),
    );
    veth((a.name(), "a1"), (wire.name(), "w1")).unwrap();
    veth((b.name(), "b1"), (wire.name(), "w2")).unwrap();
    run_ok(a.name(), "ip addr add 10.99.0.1/24 dev a1").unwrap();
    run_ok(b.name(), "ip addr add 10.99.0.2/24 dev b1").unwrap();
    // Frames between the ends are addressed to their MACs, not the wire's.
    for end in ["w1", "w2"] {
        run_ok(wire.name(), &format!("ip link set {end} promisc on")).unwrap();
    }

    let mut link = Wan::start(wire.name(), "40ms", "0");
    let listener = in_ns(b.name(), || TcpListener::bind("10.99.0.2:9000").unwrap());
    let server = std::thread::spawn(move || {
        let mut received = Vec::new();
        for stream in listener.incoming().take(CONNECTS + 1) {
            let mut stream = stream.unwrap();
            let mut bytes = Vec::new();
            stream.read_to_end(&mut bytes).unwrap();
            received.push(bytes.len());
        }
        received
    });
    let mut round_trips: Vec<Duration> = (0..CONNECTS)
        .map(|_| {
            let started = Instant::now();
            in_ns(a.name(), || TcpStream::connect("10.99.0.2:9000").unwrap());
            started.elapsed()
        })
        .collect();
    // The first also waited for ARP across the link.
    round_trips.remove(0);
    round_trips.sort();
    let median = round_trips[round_trips.len() / 2];
    let started = Instant::now();
    let mut bulk = in_ns(a.name(), || TcpStream::connect("10.99.0.2:9000").unwrap());
    bulk.write_all(&vec![7u8; BULK]).unwrap();
    drop(bulk);
    let received = server.join().unwrap();
    let bulk_took = started.elapsed();
    link.stop();
    assert!(
        median >= Duration::from_millis(80) && median < Duration::from_millis(95),
        "connect round trip {median:?} over a 40 ms link"
    );
    assert_eq!(
        received.last(),
        Some(&BULK),
        "the bulk transfer arrived short"
    );

    let mut link = Wan::start(wire.name(), "1ms", "2");
    let receiver = in_ns(b.name(), || UdpSocket::bind("10.99.0.2:9001").unwrap());
    receiver
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    // Read as they come: a socket buffer holds only a few hundred small datagrams.
    let counter = std::thread::spawn(move || {
        let mut arrived = 0;
        let mut buffer = [0u8; 16];
        while receiver.recv(&mut buffer).is_ok() {
            arrived += 1;
        }
        arrived
    });
    let sender = in_ns(a.name(), || UdpSocket::bind("10.99.0.1:0").unwrap());
    for n in 0..DATAGRAMS {
        sender.send_to(&n.to_be_bytes(), "10.99.0.2:9001").unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    let arrived = counter.join().unwrap();
    link.stop();
    let lost = DATAGRAMS - arrived;
    // 2 % of 2,000 is 40, with a standard deviation of about 6.
    assert!(
        (15..=70).contains(&lost),
        "{lost} of {DATAGRAMS} lost at 2 %"
    );
    println!(
        "wan: connect round trip {median:?} over a 40 ms link (median of {}), {BULK} bytes across in {bulk_took:?}; {lost} of {DATAGRAMS} datagrams lost at 2 %",
        round_trips.len()
    );
}

/// `lab wan w1 w2` running in the wire's namespace, stopped by PID.
struct Wan(Child);

impl Wan {
    fn start(ns: &str, delay: &str, loss_percent: &str) -> Wan {
        let log = std::env::temp_dir().join("wan-test.log");
        let wan = spawn_logged(
            ns,
            &[
                env!("CARGO_BIN_EXE_lab"),
                "wan",
                "w1",
                "w2",
                "--delay",
                delay,
                "--loss-percent",
                loss_percent,
            ],
            &log,
        )
        .unwrap();
        // Its sockets are bound within milliseconds; frames before that would be lost.
        std::thread::sleep(Duration::from_millis(300));
        Wan(wan)
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Wan {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `make` on a thread inside namespace `ns`, so the sockets it opens live there
/// (and stay usable from any thread).
fn in_ns<T: Send>(ns: &str, make: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let namespace = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
                nix::sched::setns(namespace, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                make()
            })
            .join()
            .unwrap()
    })
}

const NEEDS_ROOT: &str = "network namespaces and packet sockets";
const CONNECTS: usize = 11;
const BULK: usize = 4 << 20;
const DATAGRAMS: usize = 2_000;
