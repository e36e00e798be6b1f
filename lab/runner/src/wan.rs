//! A long-haul link for the lab, where the kernel has no netem (nor fq or NFQUEUE):
//! `lab wan` runs in a node whose two interfaces are the ends of one WAN link and
//! forwards every frame from one to the other after a delay, with jitter and random
//! loss, as a wire would. The node has no addresses on them: the routers on either side
//! are each other's neighbours. The schedule is a pure core ([`Link`]) fed the clock and
//! a seeded random stream; the sockets are a thin layer around it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;

/// What one direction of the link does to frames.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Impairment {
    /// One-way delay.
    pub delay: Duration,
    /// Each frame's delay varies by up to this much either way (uniformly).
    pub jitter: Duration,
    /// The share of frames lost, 0 to 1.
    pub loss: f64,
}

/// One direction of the link: when each frame leaves, or that it is lost.
pub struct Link {
    impairment: Impairment,
    last_departure: Option<Instant>,
    random: u64,
}

impl Link {
    /// A direction with `impairment`, its randomness from `seed`.
    pub fn new(impairment: Impairment, seed: u64) -> Link {
        Link {
            impairment,
            last_departure: None,
            random: seed | 1,
        }
    }

    /// When a frame that arrived at `now` leaves, or None when it is lost. A frame
    /// never overtakes the one before it: jitter delays, it does not reorder (TCP over a
    /// reordering link would measure its own fast retransmits, not the WAN).
    pub fn admit(&mut self, now: Instant) -> Option<Instant> {
        if self.uniform() < self.impairment.loss {
            return None;
        }
        let jitter = self.impairment.jitter.as_secs_f64() * (2.0 * self.uniform() - 1.0);
        let delay = (self.impairment.delay.as_secs_f64() + jitter).max(0.0);
        let mut departure = now + Duration::from_secs_f64(delay);
        if let Some(last) = self.last_departure {
            departure = departure.max(last);
        }
        self.last_departure = Some(departure);
        Some(departure)
    }

    /// xorshift64*: uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.random ^= self.random >> 12;
        self.random ^= self.random << 25;
        self.random ^= self.random >> 27;
        let bits = self.random.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (bits >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Forwards frames between interfaces `a` and `b` of this namespace, each direction
/// impaired as `impairment` says, until an error.
pub fn run(a: &str, b: &str, impairment: Impairment) -> anyhow::Result<()> {
    let a_end = Arc::new(bind(a)?);
    let b_end = Arc::new(bind(b)?);
    let forward = |from: &Arc<File>, to: &Arc<File>, seed: u64| {
        let (from, to) = (Arc::clone(from), Arc::clone(to));
        std::thread::spawn(move || carry(&from, to, Link::new(impairment, seed)))
    };
    let a_to_b = forward(&a_end, &b_end, 0x9e37_79b9_7f4a_7c15);
    let b_to_a = forward(&b_end, &a_end, 0xbf58_476d_1ce4_e5b9);
    for direction in [a_to_b, b_to_a] {
        direction
            .join()
            .map_err(|_| anyhow::anyhow!("a direction of the link panicked"))??;
    }
    Ok(())
}

/// Reads frames from `from` and hands each, at its departure time, to a thread that
/// writes it to `to`: reading never waits for a delay.
fn carry(from: &File, to: Arc<File>, mut link: Link) -> anyhow::Result<()> {
    let (queue, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        for (departure, frame) in due {
            if let Some(wait) = departure.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            // A frame the far side cannot take now is lost, as on a wire.
            let _ = (&*to).write(&frame);
        }
    });
    let mut buffer = vec![0; MAX_FRAME];
    loop {
        let length = (&*from).read(&mut buffer).context("reading a frame")?;
        if let Some(departure) = link.admit(Instant::now()) {
            queue
                .send((departure, buffer[..length].to_vec()))
                .context("the writer stopped")?;
        }
    }
}

/// A packet socket on interface `name` that sees every frame arriving there (none that
/// leave), each with its virtio-net header, so that a segmentation-offloaded frame
/// larger than the MTU is passed on as it is and segmented where it leaves.
fn bind(name: &str) -> anyhow::Result<File> {
    let index =
        nix::net::if_::if_nametoindex(name).with_context(|| format!("no interface {name}"))?;
    let protocol = (nix::libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket() takes no pointers; the result is checked before use.
    let fd = unsafe {
        nix::libc::socket(
            nix::libc::AF_PACKET,
            nix::libc::SOCK_RAW | nix::libc::SOCK_CLOEXEC,
            i32::from(protocol),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("packet socket (root?)");
    }
    // SAFETY: fd is a new socket that nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    for option in [
        nix::libc::PACKET_VNET_HDR,
        nix::libc::PACKET_IGNORE_OUTGOING,
    ] {
        let on: nix::libc::c_int = 1;
        // SAFETY: the option value is a c_int that lives across the call.
        let set = unsafe {
            nix::libc::setsockopt(
                fd,
                nix::libc::SOL_PACKET,
                option,
                (&on as *const nix::libc::c_int).cast(),
                std::mem::size_of::<nix::libc::c_int>() as nix::libc::socklen_t,
            )
        };
        if set != 0 {
            return Err(std::io::Error::last_os_error()).context(format!("packet option {option}"));
        }
    }
    // SAFETY: sockaddr_ll is plain data; all zero is a valid value to fill in.
    let mut address: nix::libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    address.sll_family = nix::libc::AF_PACKET as u16;
    address.sll_protocol = protocol;
    address.sll_ifindex = index as i32;
    // SAFETY: the address is a sockaddr_ll of the length given, alive across the call.
    let bound = unsafe {
        nix::libc::bind(
            fd,
            (&address as *const nix::libc::sockaddr_ll).cast(),
            std::mem::size_of::<nix::libc::sockaddr_ll>() as nix::libc::socklen_t,
        )
    };
    if bound != 0 {
        return Err(std::io::Error::last_os_error()).context(format!("binding to {name}"));
    }
    Ok(File::from(socket))
}

/// The virtio-net header and the largest segmentation-offloaded frame.
const MAX_FRAME: usize = 10 + 65_536;

#[cfg(test)]
mod tests {
    use super::*;

    fn link(delay_ms: u64, jitter_ms: u64, loss: f64) -> Link {
        Link::new(
            Impairment {
                delay: Duration::from_millis(delay_ms),
                jitter: Duration::from_millis(jitter_ms),
                loss,
            },
            42,
        )
    }

    #[test]
    fn a_plain_delay_is_exact() {
        let mut link = link(90, 0, 0.0);
        let now = Instant::now();
        for n in 0..100 {
            let arrival = now + Duration::from_millis(n);
            assert_eq!(
                link.admit(arrival),
                Some(arrival + Duration::from_millis(90))
            );
        }
    }

    #[test]
    fn jitter_stays_in_its_band() {
        let mut link = link(90, 5, 0.0);
        let start = Instant::now();
        let (mut shortest, mut longest) = (Duration::MAX, Duration::ZERO);
        // 20 ms apart, wider than the band: no frame waits for the one before.
        for n in 0..1_000u64 {
            let arrival = start + Duration::from_millis(n * 20);
            let delay = link.admit(arrival).unwrap() - arrival;
            assert!(delay >= Duration::from_millis(85) && delay <= Duration::from_millis(95));
            shortest = shortest.min(delay);
            longest = longest.max(delay);
        }
        assert!(shortest < Duration::from_millis(86), "{shortest:?}");
        assert!(longest > Duration::from_millis(94), "{longest:?}");
    }

    #[test]
    fn jitter_never_reorders() {
        let mut link = link(90, 5, 0.0);
        let start = Instant::now();
        let mut previous = start;
        for n in 0..10_000u64 {
            let arrival = start + Duration::from_micros(n * 100);
            let departure = link.admit(arrival).unwrap();
            assert!(departure >= previous, "frame {n} overtook the one before");
            assert!(departure - arrival <= Duration::from_millis(95));
            previous = departure;
        }
    }

    #[test]
    fn loss_is_the_share_asked_for() {
        for loss in [0.0, 0.005, 0.1, 1.0] {
            let mut link = link(10, 0, loss);
            let now = Instant::now();
            let lost = (0..100_000).filter(|_| link.admit(now).is_none()).count();
            let share = lost as f64 / 100_000.0;
            assert!((share - loss).abs() < 0.002, "asked {loss}, lost {share}");
        }
    }
}
