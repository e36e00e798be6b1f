//! Prometheus text for the XDP counters.

use std::fmt::Write;

use xdp_common::{Counter, REASONS, Reason};

use crate::under_attack::Status;

/// `xdp_attached`: constant for the life of the loader, which holds the program on
/// `interface` until it exits (a stopped loader is a target down).
pub fn attached(pop: &str, interface: &str, mode: &str) -> String {
    format!(
        "# HELP xdp_attached 1 while this loader holds the XDP program on the interface, by mode.\n\
         # TYPE xdp_attached gauge\n\
         xdp_attached{{pop=\"{pop}\",interface=\"{interface}\",mode=\"{mode}\"}} 1\n"
    )
}

/// The Prometheus text of the filter's counters: packets and bytes by reason and action.
pub fn render(pop: &str, counters: &[Counter; REASONS]) -> String {
    let mut out = String::new();
    out.push_str("# HELP xdp_packets_total Packets seen by the XDP filter, by verdict reason.\n# TYPE xdp_packets_total counter\n");
    for reason in Reason::ALL {
        let _ = writeln!(
            out,
            "xdp_packets_total{{pop=\"{pop}\",reason=\"{}\",action=\"{}\"}} {}",
            reason.name(),
            action(reason),
            counters[reason as usize].packets
        );
    }
    out.push_str("# HELP xdp_bytes_total Bytes seen by the XDP filter, by verdict reason.\n# TYPE xdp_bytes_total counter\n");
    for reason in Reason::ALL {
        let _ = writeln!(
            out,
            "xdp_bytes_total{{pop=\"{pop}\",reason=\"{}\",action=\"{}\"}} {}",
            reason.name(),
            action(reason),
            counters[reason as usize].bytes
        );
    }
    out
}

/// Under-attack mode's state: whether it holds and why, the open ranges' size, the SYN
/// rate it is decided by.
pub fn under_attack(pop: &str, status: &Status) -> String {
    format!(
        "# HELP xdp_under_attack 1 while only the open ranges reach the served ports; why: off, forced, syn_rate, calm, fail_open.\n\
         # TYPE xdp_under_attack gauge\n\
         xdp_under_attack{{pop=\"{pop}\",why=\"{}\"}} {}\n\
         # HELP xdp_open_ranges Entries of the ranges open under attack (provider lists in force and also_open).\n\
         # TYPE xdp_open_ranges gauge\n\
         xdp_open_ranges{{pop=\"{pop}\"}} {}\n\
         # HELP xdp_new_syns_per_second New SYNs to the served ports per second, over the last second.\n\
         # TYPE xdp_new_syns_per_second gauge\n\
         xdp_new_syns_per_second{{pop=\"{pop}\"}} {}\n",
        status.verdict.why.as_str(),
        u8::from(status.verdict.up),
        status.open_entries,
        status.syn_rate,
    )
}

/// The `edge-xdp stats` table.
pub fn table(counters: &[Counter; REASONS]) -> String {
    let mut out = format!(
        "{:<12} {:<6} {:>14} {:>16}\n",
        "reason", "action", "packets", "bytes"
    );
    for reason in Reason::ALL {
        let c = counters[reason as usize];
        let _ = writeln!(
            out,
            "{:<12} {:<6} {:>14} {:>16}",
            reason.name(),
            action(reason),
            c.packets,
            c.bytes
        );
    }
    out
}

fn action(reason: Reason) -> &'static str {
    if reason.drops() { "drop" } else { "pass" }
}

/// Reads counters back from [`render`]'s text (for `edge-xdp stats`).
pub fn parse(text: &str) -> [Counter; REASONS] {
    let mut out = [Counter::default(); REASONS];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        let Some(reason) = Reason::ALL
            .into_iter()
            .find(|r| series.contains(&format!("reason=\"{}\"", r.name())))
        else {
            continue;
        };
        if series.starts_with("xdp_packets_total") {
            out[reason as usize].packets = value;
        } else if series.starts_with("xdp_bytes_total") {
            out[reason as usize].bytes = value;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_then_parse_round_trips() {
        let mut counters = [Counter::default(); REASONS];
        counters[Reason::SynRate as usize] = Counter {
            packets: 7,
            bytes: 420,
        };
        counters[Reason::Pass as usize] = Counter {
            packets: 1,
            bytes: 60,
        };
        let text = render("fra1", &counters);
        assert!(
            text.contains(r#"xdp_packets_total{pop="fra1",reason="syn_rate",action="drop"} 7"#),
            "{text}"
        );
        assert_eq!(parse(&text), counters);
        assert!(table(&counters).contains("syn_rate"));
    }

    #[test]
    fn attached_names_the_interface_and_mode() {
        assert!(
            attached("fra1", "eth0", "driver")
                .contains(r#"xdp_attached{pop="fra1",interface="eth0",mode="driver"} 1"#)
        );
    }
}
