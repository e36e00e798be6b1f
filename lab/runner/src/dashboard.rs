//! The fleet's Grafana dashboard (`ansible/roles/monitoring/files/`) read as its rows,
//! panels and PromQL, with Grafana's variables filled in as Grafana does before it
//! sends a query, so that tests can run each query against a Prometheus.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// The Grafana dashboard's queries, as the monitoring role ships it.
pub struct Dashboard {
    /// The template variables' names (`pop`, `datasource`).
    pub variables: Vec<String>,
    /// Its graph panels.
    pub panels: Vec<Panel>,
    /// The annotation queries' expressions.
    pub annotations: Vec<String>,
}

/// A graph panel under its row.
pub struct Panel {
    /// The row the panel is under.
    pub row: String,
    /// The panel's title.
    pub title: String,
    /// Its queries' expressions.
    pub exprs: Vec<String>,
}

impl Dashboard {
    /// The dashboard the monitoring role installs.
    pub fn file() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../ansible/roles/monitoring/files/webhook-edge.dashboard.json")
    }

    /// Reads the dashboard JSON at `path`.
    pub fn load(path: &Path) -> anyhow::Result<Dashboard> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let json: Json =
            serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
        let mut row = String::new();
        let mut panels = Vec::new();
        for panel in json.panels {
            if panel.kind == "row" {
                row = panel.title;
                continue;
            }
            panels.push(Panel {
                row: row.clone(),
                title: panel.title,
                exprs: panel.targets.into_iter().map(|t| t.expr).collect(),
            });
        }
        Ok(Dashboard {
            variables: json.templating.list.into_iter().map(|v| v.name).collect(),
            panels,
            annotations: json.annotations.list.into_iter().map(|a| a.expr).collect(),
        })
    }

    /// Every expression of the dashboard: panels' targets, then annotations.
    pub fn exprs(&self) -> impl Iterator<Item = &str> {
        self.panels
            .iter()
            .flat_map(|p| p.exprs.iter())
            .chain(&self.annotations)
            .map(String::as_str)
    }
}

/// `expr` as Grafana sends it with `pops` (a regex of PoP names) selected:
/// `$__rate_interval` becomes a window of a few scrapes.
pub fn instantiate(expr: &str, pops: &str) -> String {
    expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$pop", pops)
}

#[derive(Deserialize)]
struct Json {
    panels: Vec<PanelJson>,
    templating: List<Variable>,
    annotations: List<Annotation>,
}

#[derive(Deserialize)]
struct List<T> {
    list: Vec<T>,
}

#[derive(Deserialize)]
struct Variable {
    name: String,
}

#[derive(Deserialize)]
struct Annotation {
    expr: String,
}

#[derive(Deserialize)]
struct PanelJson {
    #[serde(rename = "type")]
    kind: String,
    title: String,
    #[serde(default)]
    targets: Vec<Target>,
}

#[derive(Deserialize)]
struct Target {
    expr: String,
}

/// Grafana's $__rate_interval for a 15 s scrape interval: four scrapes.
const RATE_INTERVAL: &str = "1m";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_filled_in() {
        assert_eq!(
            instantiate(
                r#"sum by (pop) (rate(edge_requests_total{pop=~"$pop"}[$__rate_interval]))"#,
                "pop-a|pop-b"
            ),
            r#"sum by (pop) (rate(edge_requests_total{pop=~"pop-a|pop-b"}[1m]))"#
        );
    }

    #[test]
    fn the_dashboard_has_a_row_per_concern_and_a_pop_variable() {
        let dashboard = Dashboard::load(&Dashboard::file()).unwrap();
        assert!(dashboard.variables.iter().any(|v| v == "pop"));
        let mut rows: Vec<&str> = dashboard.panels.iter().map(|p| p.row.as_str()).collect();
        rows.dedup();
        assert_eq!(
            rows,
            [
                "Requests",
                "Verification",
                "Spool",
                "Backhaul",
                "Routing",
                "XDP"
            ]
        );
        for panel in &dashboard.panels {
            assert!(!panel.exprs.is_empty(), "{} has no query", panel.title);
            for expr in &panel.exprs {
                assert!(
                    expr.contains(r#"pop=~"$pop""#),
                    "{}: {expr} ignores the pop variable",
                    panel.title
                );
            }
        }
    }
}
