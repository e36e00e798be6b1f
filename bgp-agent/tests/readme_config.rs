//! The README's agent config is real: it parses and validates as the agent's own file.

#[test]
fn the_readme_agent_config_parses() {
    let block = lab::readme::yaml_block("## BGP agent");
    let config =
        bgp_agent::config::Settings::parse(&block).unwrap_or_else(|e| panic!("{e:?}\n{block}"));
    assert_eq!(config.prefixes.len(), 2);
}
