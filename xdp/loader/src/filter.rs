//! The loaded XDP program and its maps: load, fill from config, attach, read counters,
//! and run packets through it with BPF_PROG_TEST_RUN.

use std::net::IpAddr;

use anyhow::Context;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{TestRun, TestRunOptions, Xdp, XdpMode};
use ipnet::IpNet;
use xdp_common::{Counter, Hints, Limits, List, PRESENT, Prefix, REASONS, Reason, SHIELD_UP, maps};

use crate::config::{Mode, Settings};

/// The loaded XDP program and its maps: attached to an interface, filled from the
/// settings, read for counters. Dropping it detaches the program.
pub struct Filter {
    ebpf: aya::Ebpf,
    /// Ports marked in the port arrays, to clear them on the next apply.
    marked_ports: std::collections::HashMap<&'static str, Vec<u16>>,
}

impl Filter {
    /// Loads the program into the kernel (the verifier runs here) without attaching it.
    pub fn load() -> anyhow::Result<Filter> {
        let mut ebpf = aya::Ebpf::load(aya::include_bytes_aligned!(concat!(
            env!("OUT_DIR"),
            "/xdp-ebpf"
        )))
        .context("loading the XDP object")?;
        let program: &mut Xdp = ebpf
            .program_mut("edge_xdp")
            .context("no edge_xdp program")?
            .try_into()?;
        program
            .load()
            .context("the kernel refused the XDP program")?;
        if let Some(missing) = maps::FILLED.iter().find(|name| ebpf.map(name).is_none()) {
            anyhow::bail!(
                "the XDP object has no {missing} map: the eBPF crate and xdp_common disagree"
            );
        }
        Ok(Filter {
            ebpf,
            marked_ports: Default::default(),
        })
    }

    /// Fills every map from `config`: the lists are replaced whole.
    pub fn apply(&mut self, config: &Settings) -> anyhow::Result<()> {
        self.set_protected(&config.protected)?;
        self.set_prefixes(
            (maps::ALLOW_V4, List::AllowV4),
            (maps::ALLOW_V6, List::AllowV6),
            &config.allowlist,
        )?;
        self.set_prefixes(
            (maps::BLOCK_V4, List::BlockV4),
            (maps::BLOCK_V6, List::BlockV6),
            &config.blocklist,
        )?;
        self.set_ports(maps::TCP_PORTS, &config.tcp_ports)?;
        self.set_ports(maps::UDP_PORTS, &config.udp_ports)?;
        let limits = Limits {
            syn_per_second: config.syn_rate.per_second,
            syn_burst: config.syn_rate.burst,
            icmp_per_second: config.icmp_rate.per_second,
            icmp_burst: config.icmp_rate.burst,
        };
        let mut array: Array<&mut MapData, Limits> = Array::try_from(self.map(maps::LIMITS)?)?;
        array.set(0, limits, 0)?;
        Ok(())
    }

    /// Replaces the ranges open while under attack.
    pub fn set_open(&mut self, nets: &[IpNet]) -> anyhow::Result<()> {
        self.set_prefixes(
            (maps::OPEN_V4, List::OpenV4),
            (maps::OPEN_V6, List::OpenV6),
            nets,
        )
    }

    /// Raises or lowers under-attack mode.
    pub fn set_shield(&mut self, up: bool) -> anyhow::Result<()> {
        let mut shield: Array<&mut MapData, u32> = Array::try_from(self.map(maps::SHIELD)?)?;
        shield.set(0, if up { SHIELD_UP } else { 0 }, 0)?;
        Ok(())
    }

    /// New SYNs to served ports seen so far, summed over CPUs.
    pub fn new_syns(&self) -> anyhow::Result<u64> {
        let map = self.ebpf.map(maps::SYNS).context("no SYNS map")?;
        let per_cpu: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(map)?;
        Ok(per_cpu.get(&0, 0)?.iter().sum())
    }

    /// Attaches to `interface`; returns the mode in use.
    pub fn attach(&mut self, interface: &str, mode: Mode) -> anyhow::Result<&'static str> {
        let program: &mut Xdp = self
            .ebpf
            .program_mut("edge_xdp")
            .context("no edge_xdp program")?
            .try_into()?;
        let tries: &[(XdpMode, &'static str)] = match mode {
            Mode::Driver => &[(XdpMode::Driver, "driver")],
            Mode::Skb => &[(XdpMode::Skb, "skb")],
            Mode::Auto => &[(XdpMode::Driver, "driver"), (XdpMode::Skb, "skb")],
        };
        let mut last_error = None;
        for (flags, name) in tries {
            match program.attach(interface, *flags) {
                Ok(_) => return Ok(name),
                Err(e) => {
                    tracing::warn!(interface, mode = name, error = %e, "XDP attach failed");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error
            .map(anyhow::Error::from)
            .unwrap_or_else(|| anyhow::anyhow!("no attach mode")))
        .with_context(|| format!("attaching XDP to {interface}"))
    }

    /// Packets and bytes per reason, summed over CPUs.
    pub fn counters(&self) -> anyhow::Result<[Counter; REASONS]> {
        let map = self.ebpf.map(maps::COUNTERS).context("no COUNTERS map")?;
        let per_cpu: PerCpuArray<&MapData, Counter> = PerCpuArray::try_from(map)?;
        let mut out = [Counter::default(); REASONS];
        for reason in Reason::ALL {
            for value in per_cpu.get(&(reason as u32), 0)?.iter() {
                out[reason as usize].packets += value.packets;
                out[reason as usize].bytes += value.bytes;
            }
        }
        Ok(out)
    }

    /// Runs `packet` through the program `repeat` times with BPF_PROG_TEST_RUN; returns the
    /// XDP action and the kernel's mean time per run.
    pub fn test_run(
        &self,
        packet: &[u8],
        repeat: u32,
    ) -> anyhow::Result<(u32, std::time::Duration)> {
        let program: &Xdp = self
            .ebpf
            .program("edge_xdp")
            .context("no edge_xdp program")?
            .try_into()?;
        let result = program.test_run(TestRunOptions {
            data_in: Some(packet),
            repeat,
            ..Default::default()
        })?;
        Ok((result.return_value, result.duration))
    }

    /// The loaded program's size after the verifier: (instructions, JIT-compiled bytes).
    pub fn program_size(&self) -> anyhow::Result<(u32, u32)> {
        let program: &Xdp = self
            .ebpf
            .program("edge_xdp")
            .context("no edge_xdp program")?
            .try_into()?;
        let info = program.info()?;
        let instructions = info.size_translated().unwrap_or(0) / BPF_INSTRUCTION_BYTES;
        Ok((instructions, info.size_jitted()))
    }

    fn map(&mut self, name: &str) -> anyhow::Result<&mut aya::maps::Map> {
        self.ebpf
            .map_mut(name)
            .with_context(|| format!("no {name} map"))
    }

    fn set_protected(&mut self, prefixes: &[IpNet]) -> anyhow::Result<()> {
        let (v4, v6): (Vec<Prefix>, Vec<Prefix>) = (
            prefixes
                .iter()
                .filter(|p| matches!(p, IpNet::V4(_)))
                .map(prefix)
                .collect(),
            prefixes
                .iter()
                .filter(|p| matches!(p, IpNet::V6(_)))
                .map(prefix)
                .collect(),
        );
        for (name, list) in [(maps::PROTECTED_V4, &v4), (maps::PROTECTED_V6, &v6)] {
            let mut array: Array<&mut MapData, Prefix> = Array::try_from(self.map(name)?)?;
            for (i, p) in list.iter().enumerate() {
                array.set(i as u32, *p, 0)?;
            }
        }
        let mut counts: Array<&mut MapData, u32> =
            Array::try_from(self.map(maps::PROTECTED_COUNT)?)?;
        counts.set(0, v4.len() as u32, 0)?;
        counts.set(1, v6.len() as u32, 0)?;
        Ok(())
    }

    /// Replaces a list's tries, then its hints. Like the tries' replacement, this is not
    /// atomic: a new entry takes effect once its hint is written, moments later.
    fn set_prefixes(
        &mut self,
        (v4, v4_list): (&str, List),
        (v6, v6_list): (&str, List),
        prefixes: &[IpNet],
    ) -> anyhow::Result<()> {
        let mut v4_hints = Hints::EMPTY;
        let mut v6_hints = Hints::EMPTY;
        let mut trie4: LpmTrie<&mut MapData, [u8; 4], u8> = LpmTrie::try_from(self.map(v4)?)?;
        let old: Vec<Key<[u8; 4]>> = trie4.keys().collect::<Result<_, _>>()?;
        for key in old {
            trie4.remove(&key)?;
        }
        for net in prefixes {
            if let (IpNet::V4(net), IpAddr::V4(addr)) = (net, net.network()) {
                trie4.insert(
                    &Key::new(u32::from(net.prefix_len()), addr.octets()),
                    PRESENT,
                    0,
                )?;
                v4_hints.add_v4(u32::from(addr), net.prefix_len());
            }
        }
        let mut trie6: LpmTrie<&mut MapData, [u8; 16], u8> = LpmTrie::try_from(self.map(v6)?)?;
        let old: Vec<Key<[u8; 16]>> = trie6.keys().collect::<Result<_, _>>()?;
        for key in old {
            trie6.remove(&key)?;
        }
        for net in prefixes {
            if let (IpNet::V6(net), IpAddr::V6(addr)) = (net, net.network()) {
                trie6.insert(
                    &Key::new(u32::from(net.prefix_len()), addr.octets()),
                    PRESENT,
                    0,
                )?;
                v6_hints.add_v6((u128::from(addr) >> 96) as u32, net.prefix_len());
            }
        }
        let mut hints: Array<&mut MapData, Hints> = Array::try_from(self.map(maps::HINTS)?)?;
        hints.set(v4_list as u32, v4_hints, 0)?;
        hints.set(v6_list as u32, v6_hints, 0)?;
        Ok(())
    }

    fn set_ports(&mut self, name: &'static str, ports: &[u16]) -> anyhow::Result<()> {
        let previous = self.marked_ports.remove(name).unwrap_or_default();
        let mut array: Array<&mut MapData, u8> = Array::try_from(self.map(name)?)?;
        for port in previous {
            array.set(u32::from(port), 0, 0)?;
        }
        for port in ports {
            array.set(u32::from(*port), PRESENT, 0)?;
        }
        self.marked_ports.insert(name, ports.to_vec());
        Ok(())
    }
}

/// A prefix as the program compares it: address and mask as two big-endian words.
fn prefix(net: &IpNet) -> Prefix {
    match net {
        IpNet::V4(net) => Prefix {
            addr: [u64::from(u32::from(net.network())), 0],
            mask: [u64::from(u32::from(net.netmask())), 0],
        },
        IpNet::V6(net) => {
            let (addr, mask) = (u128::from(net.network()), u128::from(net.netmask()));
            Prefix {
                addr: [(addr >> 64) as u64, addr as u64],
                mask: [(mask >> 64) as u64, mask as u64],
            }
        }
    }
}

/// One eBPF instruction (`struct bpf_insn`); wide immediates take two.
const BPF_INSTRUCTION_BYTES: u32 = 8;
