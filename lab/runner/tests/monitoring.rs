//! The monitoring role's Prometheus rules and dashboard, as `promtool` (Debian's
//! prometheus package, which lab/setup.sh installs) sees them: `check rules` clean, the
//! unit tests pass, every alert has a test in which it fires and a runbook section its
//! `runbook_url` points at, and every dashboard query parses. (The lab scenarios run the
//! dashboard's queries against the lab's Prometheus.)

#![allow(clippy::unwrap_used, reason = "a test stops at the line that failed")]
#![allow(
    clippy::expect_used,
    reason = "test code: a failed step stops the run where it says"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use lab::dashboard::{Dashboard, instantiate};

#[test]
fn alert_rules_are_valid_and_every_alert_fires_in_a_passing_unit_test() {
    let rules = role().join("files/webhook-edge.rules.yml");
    let tests = role().join("tests/webhook-edge.rules.test.yml");
    promtool(&["check", "rules"], &rules);
    promtool(&["test", "rules"], &tests);

    let alerts: BTreeSet<String> = yaml(&rules)["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_sequence().unwrap())
        .filter_map(|rule| rule["alert"].as_str().map(str::to_owned))
        .collect();
    let fired: BTreeSet<String> = yaml(&tests)["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|test| test["alert_rule_test"].as_sequence().into_iter().flatten())
        .filter(|case| {
            case["exp_alerts"]
                .as_sequence()
                .is_some_and(|alerts| !alerts.is_empty())
        })
        .map(|case| case["alertname"].as_str().unwrap().to_owned())
        .collect();
    let untested: Vec<&String> = alerts.difference(&fired).collect();
    assert!(untested.is_empty(), "alerts no test fires: {untested:?}");
    println!(
        "monitoring: {} alerts, each fired by a passing promtool unit test",
        alerts.len()
    );
}

#[test]
fn every_alert_links_its_own_section_of_the_runbook() {
    let runbook = std::fs::read_to_string(role().join("RUNBOOK.md")).expect("RUNBOOK.md");
    let sections: BTreeSet<String> = runbook
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(|heading| heading.trim().to_lowercase())
        .collect();
    let rules = yaml(&role().join("files/webhook-edge.rules.yml"));
    let mut linked = 0;
    for rule in rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_sequence().unwrap())
    {
        let Some(alert) = rule["alert"].as_str() else {
            continue;
        };
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert} has no runbook_url"));
        let anchor = url
            .strip_prefix(RUNBOOK_URL)
            .unwrap_or_else(|| panic!("{alert}: runbook_url {url} is not in {RUNBOOK_URL}"));
        assert_eq!(
            anchor,
            alert.to_lowercase(),
            "{alert} links another alert's section"
        );
        assert!(
            sections.contains(anchor),
            "{alert}: RUNBOOK.md has no section `## {alert}`"
        );
        linked += 1;
    }
    assert_eq!(
        linked,
        sections.len(),
        "one runbook section per alert, none for an alert that is gone"
    );
    println!("monitoring: {linked} alerts, each with its runbook section");
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    let dashboard = Dashboard::load(&Dashboard::file()).unwrap();
    // As recording rules, so that promtool parses each expression (JSON is YAML).
    let rules: Vec<serde_json::Value> = dashboard
        .exprs()
        .enumerate()
        .map(|(n, expr)| {
            serde_json::json!({ "record": format!("dashboard:query_{n}"), "expr": instantiate(expr, ".*") })
        })
        .collect();
    let count = rules.len();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-queries.rules.yml");
    let groups = serde_json::json!({ "groups": [{ "name": "dashboard", "rules": rules }] });
    std::fs::write(&file, groups.to_string()).unwrap();
    promtool(&["check", "rules"], &file);
    println!(
        "monitoring: {} dashboard panels, {count} queries, all valid PromQL",
        dashboard.panels.len()
    );
}

fn role() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ansible/roles/monitoring")
}

fn promtool(command: &[&str], file: &Path) {
    let output = Command::new("promtool")
        .args(command)
        .arg(file)
        .output()
        .expect("promtool (lab/setup.sh installs Debian's prometheus package)");
    assert!(
        output.status.success(),
        "promtool {command:?} {}:\n{}{}",
        file.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn yaml(path: &Path) -> serde_yaml::Value {
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Where every alert's `runbook_url` points, up to the section's anchor (GitHub's: the
/// heading in lower case).
const RUNBOOK_URL: &str = "ansible/roles/monitoring/RUNBOOK.md#";
