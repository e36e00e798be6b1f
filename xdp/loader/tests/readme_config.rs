//! The README's edge-xdp config is real: it parses and validates as the loader's own file.

#[test]
fn the_readme_xdp_config_parses() {
    let block = lab::readme::yaml_block("## XDP filter");
    let config =
        edge_xdp::config::Settings::parse(&block).unwrap_or_else(|e| panic!("{e:?}\n{block}"));
    assert_eq!(config.interface, "eth0");
}
