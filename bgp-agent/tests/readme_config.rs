//! bgp-agent/README.md's agent config is real: it parses and validates as the agent's own file,
//! and the values it shows for what can be left out are the defaults.

use bgp_agent::config::Settings;

#[test]
fn the_readme_agent_config_parses_and_shows_the_defaults() {
    let block = testkit::readme::yaml_block("bgp-agent/README.md", "## BGP agent");
    let readme = Settings::parse(&block).unwrap_or_else(|e| panic!("{e:?}\n{block}"));
    assert_eq!(readme.prefixes.len(), 2);
    let required_only = testkit::readme::without_keys(&block, DEFAULTED);
    let defaults = Settings::parse(&required_only).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(readme.interval, defaults.interval, "interval");
    assert_eq!(
        readme.policy, defaults.policy,
        "rise, fall, hold_down, dampening"
    );
    assert_eq!(readme.withdraw_on_exit, defaults.withdraw_on_exit);
    assert_eq!(
        format!("{:?}", readme.graceful_shutdown),
        format!("{:?}", defaults.graceful_shutdown)
    );
    assert_eq!(
        readme.checks[0].timeout, defaults.checks[0].timeout,
        "check timeout"
    );
}

/// The top-level keys the README's block sets to their default values.
const DEFAULTED: &[&str] = &[
    "interval",
    "rise",
    "fall",
    "hold_down",
    "dampening",
    "withdraw_on_exit",
    "graceful_shutdown",
];
