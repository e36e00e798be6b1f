//! xdp/README.md's edge-xdp config is real: it parses and validates as the loader's own
//! file, and the values it shows for what can be left out are the defaults.

use edge_xdp::config::Settings;

#[test]
fn the_readme_xdp_config_parses_and_shows_the_defaults() {
    let block = testkit::readme::yaml_block("xdp/README.md", "## XDP filter");
    let readme = Settings::parse(&block).unwrap_or_else(|e| panic!("{e:?}\n{block}"));
    assert_eq!(readme.interface, "eth0");
    let required_only = testkit::readme::without_keys(&block, DEFAULTED);
    let defaults = Settings::parse(&required_only).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(readme.tcp_ports, defaults.tcp_ports);
    assert_eq!(readme.syn_rate, defaults.syn_rate);
    assert_eq!(readme.icmp_rate, defaults.icmp_rate);
}

/// The keys the README's block sets to their default values.
const DEFAULTED: &[&str] = &["tcp_ports", "syn_rate", "icmp_rate"];
