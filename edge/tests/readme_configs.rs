//! The README's example configs are real: each parses as the edge parses its file, and
//! a block the README calls "the defaults" changes nothing when it is left out. So the
//! README cannot drift from the code without this test failing.

use std::path::Path;

use lab::readme::yaml_block as readme_block;

#[test]
fn the_readme_edge_config_parses() {
    let dir = tempfile::tempdir().unwrap();
    // The example's `secrets_file: stripe` is read beside the config.
    std::fs::write(dir.path().join("stripe"), "whsec_readme\n").unwrap();
    let settings = parse(&edge_example(), dir.path()).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(settings.pop, "fra1");
    assert_eq!(settings.routes.len(), 3);
}

#[test]
fn the_readme_backhaul_block_parses_in_the_example() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stripe"), "whsec_readme\n").unwrap();
    let block = readme_block("## Backhaul");
    let with = format!("{}{block}", edge_example());
    let settings = parse(&with, dir.path()).unwrap_or_else(|e| panic!("{e:?}\n{block}"));
    assert!(settings.backhaul.is_some());
}

#[test]
fn the_readme_admission_defaults_are_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stripe"), "whsec_readme\n").unwrap();
    let block = readme_block("admission:");
    assert!(
        block.contains("these are the defaults"),
        "the README no longer calls the admission block the defaults:\n{block}"
    );
    let without = parse(&edge_example(), dir.path()).unwrap();
    let with = parse(&format!("{}{block}", edge_example()), dir.path())
        .unwrap_or_else(|e| panic!("{e:?}\n{block}"));
    assert_eq!(
        format!("{:?}", with.admission),
        format!("{:?}", without.admission),
        "the README's admission block differs from the defaults"
    );
}

fn parse(text: &str, dir: &Path) -> Result<edge::config::Settings, Vec<edge::config::FieldError>> {
    let files = edge::config::SecretFiles {
        credentials_dir: None,
        config_dir: Some(dir.to_owned()),
    };
    edge::config::parse_with(text, &files)
}

/// The README's full edge example (the first YAML block under "## Configuration").
fn edge_example() -> String {
    readme_block("## Configuration")
}
