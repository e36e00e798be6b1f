//! `edge/README.md`'s configuration is real: its example parses as the edge parses its
//! file, every key the parser knows is documented there, the values it shows for keys
//! that can be left out are the defaults, and a block it calls "the defaults" changes
//! nothing when left out. So the README cannot drift from the code without a test
//! failing.

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]

use std::collections::BTreeSet;
use std::path::Path;

use testkit::readme::yaml_block;

#[test]
fn the_readme_edge_config_parses() {
    let dir = config_dir();
    let settings = parse(&edge_example(), dir.path()).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(settings.pop, "fra1");
    assert_eq!(settings.routes.len(), 5);
    assert_eq!(
        settings.routes[3].challenge,
        Some(edge::verify::Challenge::Dropbox)
    );
}

#[test]
fn the_readme_backhaul_block_parses_in_the_example() {
    let dir = config_dir();
    let block = yaml_block(README, "## Backhaul");
    let with = format!("{}{block}", edge_example());
    let settings = parse(&with, dir.path()).unwrap_or_else(|e| panic!("{e:?}\n{block}"));
    assert!(settings.backhaul.is_some());
}

#[test]
fn the_readme_admission_defaults_are_the_defaults() {
    let dir = config_dir();
    let block = yaml_block(README, "admission:");
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

/// The parser names the keys it knows when it meets an unknown one: an unknown key is
/// put into every mapping of the README's full config, and every key the parser then
/// lists must appear as a key in one of the README's YAML blocks.
#[test]
fn every_key_the_parser_knows_is_in_the_readme() {
    let dir = config_dir();
    let full = full_config();
    let mut value: serde_yaml::Value = serde_yaml::from_str(&full).unwrap();
    put_unknown_key(&mut value);
    let errors = parse(&serde_yaml::to_string(&value).unwrap(), dir.path())
        .expect_err("unknown keys are errors");
    let documented = yaml_keys(&testkit::readme::text(README));
    let mut paths = 0;
    let mut missing = Vec::new();
    for error in &errors {
        let Some(expected) = error
            .message
            .strip_prefix(&format!("unknown field `{UNKNOWN}`, expected one of "))
            .or_else(|| {
                error
                    .message
                    .strip_prefix(&format!("unknown field `{UNKNOWN}`, expected "))
            })
        else {
            continue;
        };
        paths += 1;
        let section = error.field.trim_end_matches(UNKNOWN).trim_end_matches('.');
        // The keys are the quoted words: "`a`, `b` or `c`".
        for key in expected.split('`').skip(1).step_by(2) {
            if !documented.contains(key) {
                missing.push(format!("{section}.{key}"));
            }
        }
    }
    assert!(paths >= 12, "only {paths} sections checked: {errors:?}");
    assert!(
        missing.is_empty(),
        "keys of the parser missing from {README}: {missing:?}"
    );
}

/// Every key of the example the README shows at a value that is not the default is
/// named here; left out, the others change nothing.
#[test]
fn the_readme_example_shows_the_defaults() {
    let dir = config_dir();
    let example = edge_example();
    let defaults_left_out = without_defaulted_keys(&example, EXAMPLE_VALUES);
    let shown = parse(&example, dir.path()).unwrap();
    let defaulted = parse(&defaults_left_out, dir.path())
        .unwrap_or_else(|e| panic!("{e:?}\n{defaults_left_out}"));
    for ((name, shown), (_, defaulted)) in sections(&shown).into_iter().zip(sections(&defaulted)) {
        assert_eq!(
            shown, defaulted,
            "{README} shows a value for {name} that is not its default"
        );
    }
}

/// The settings of the sections with defaults, as text to compare.
fn sections(settings: &edge::config::Settings) -> [(&'static str, String); 6] {
    [
        ("listener", format!("{:?}", settings.listener)),
        ("tls", format!("{:?}", settings.tls)),
        ("spool", format!("{:?}", settings.spool)),
        ("http", format!("{:?}", settings.http)),
        ("connections", format!("{:?}", settings.connections)),
        (
            "drain",
            format!("{:?}", (settings.drain_grace, settings.shutdown_timeout)),
        ),
    ]
}

/// Keys the example sets to values of its own (required ones, or chosen to show how).
const EXAMPLE_VALUES: &[&str] = &[
    "pop",
    "listen",
    "admin_listen",
    "tls.cert",
    "tls.key",
    "tls.min_version",
    "tls.sni",
    "tls.session_tickets",
    "spool.dir",
    "connections.trusted",
];

/// `example` without the lines of keys not in `keep` (routes are kept whole), and
/// without the mappings that leaves empty.
fn without_defaulted_keys(example: &str, keep: &[&str]) -> String {
    let mut lines: Vec<&str> = Vec::new();
    let mut parents: Vec<(usize, String)> = Vec::new();
    for line in example.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            lines.push(line);
            continue;
        }
        while parents.last().is_some_and(|(at, _)| *at >= indent) {
            parents.pop();
        }
        let in_routes = parents.first().is_some_and(|(_, key)| key == "routes");
        let Some((key, value)) = trimmed.split_once(':').filter(|_| !in_routes) else {
            lines.push(line);
            continue;
        };
        let value = value.split(" #").next().unwrap_or_default().trim();
        if value.is_empty() {
            parents.push((indent, key.to_owned()));
            lines.push(line);
            continue;
        }
        let path: Vec<&str> = parents
            .iter()
            .map(|(_, key)| key.as_str())
            .chain([key])
            .collect();
        if keep.contains(&path.join(".").as_str()) {
            lines.push(line);
        }
    }
    // A mapping whose keys all went is left out too.
    let kept: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, line)| {
            let trimmed = line.trim_start();
            let is_header = trimmed.ends_with(':') && !trimmed.starts_with('#');
            let indent = line.len() - trimmed.len();
            !is_header
                || lines[i + 1..]
                    .iter()
                    .find(|next| !next.trim().is_empty() && !next.trim_start().starts_with('#'))
                    .is_some_and(|next| next.len() - next.trim_start().len() > indent)
        })
        .map(|(_, line)| *line)
        .collect();
    kept.iter().map(|line| format!("{line}\n")).collect()
}

/// Puts [`UNKNOWN`] into every mapping of `value`.
fn put_unknown_key(value: &mut serde_yaml::Value) {
    match value {
        serde_yaml::Value::Mapping(mapping) => {
            for (_, child) in mapping.iter_mut() {
                put_unknown_key(child);
            }
            mapping.insert(UNKNOWN.into(), 1.into());
        }
        serde_yaml::Value::Sequence(items) => items.iter_mut().for_each(put_unknown_key),
        _ => {}
    }
}

/// Every key of every mapping in the README's YAML blocks, commented ones too (`# key:`).
fn yaml_keys(readme: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut in_yaml = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_yaml = line.starts_with("```yaml");
            continue;
        }
        if !in_yaml {
            continue;
        }
        for piece in line.split([' ', '{', ',', '[']) {
            if let Some(key) = piece.strip_suffix(':')
                && !key.is_empty()
                && key.chars().all(|c| c.is_alphanumeric() || c == '_')
            {
                keys.insert(key.to_owned());
            }
        }
    }
    keys
}

fn parse(text: &str, dir: &Path) -> Result<edge::config::Settings, Vec<edge::config::FieldError>> {
    let files = edge::config::SecretFiles {
        credentials_dir: None,
        config_dir: Some(dir.to_owned()),
    };
    edge::config::parse_with(text, &files)
}

/// A directory with the example's `secrets_file: stripe`.
fn config_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stripe"), "whsec_readme\n").unwrap();
    dir
}

/// The README's full edge example (the first YAML block under "## Configuration").
fn edge_example() -> String {
    yaml_block(README, "## Configuration")
}

/// The example with the backhaul and admission blocks: every section.
fn full_config() -> String {
    format!(
        "{}{}{}",
        edge_example(),
        yaml_block(README, "## Backhaul"),
        yaml_block(README, "admission:")
    )
}

const README: &str = "edge/README.md";
const UNKNOWN: &str = "zz_unknown";
