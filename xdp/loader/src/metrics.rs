//! Prometheus text for the XDP counters.

use std::fmt::Write;

use xdp_common::{Counter, REASONS, Reason};

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
