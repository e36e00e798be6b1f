//! The lab's Prometheus (the node whose service is `prometheus`), read through its HTTP
//! API from inside its namespace: the alerts it holds and PromQL queries.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::netns::{self, namespace};
use crate::runner::Lab;

/// The lab's Prometheus: its node and the address its API listens on.
pub struct Prometheus {
    node: String,
    address: String,
}

/// An alert the rules hold: pending (its `for:` not yet elapsed) or firing.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Alert {
    /// The alert's labels (`alertname`, `pop`, …).
    pub labels: BTreeMap<String, String>,
    /// `pending` or `firing`.
    pub state: String,
    /// When it became active (RFC 3339).
    #[serde(rename = "activeAt")]
    pub active_at: String,
}

impl Prometheus {
    /// The lab's Prometheus, found by its service's `--web.listen-address`.
    pub fn of(lab: &Lab) -> anyhow::Result<Prometheus> {
        for (name, node) in lab.topology.nodes() {
            for service in node.services()? {
                if service.name != "prometheus" {
                    continue;
                }
                let address = service
                    .command
                    .split_whitespace()
                    .find_map(|arg| arg.strip_prefix("--web.listen-address="))
                    .with_context(|| format!("{name}: prometheus has no --web.listen-address"))?;
                return Ok(Prometheus {
                    node: name.clone(),
                    address: address.to_owned(),
                });
            }
        }
        bail!("no node of the topology runs prometheus")
    }

    /// The node Prometheus runs on.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The alerts pending or firing now.
    pub fn alerts(&self) -> anyhow::Result<Vec<Alert>> {
        let data = self.api("/api/v1/alerts", &[])?;
        serde_json::from_value(data["alerts"].clone()).context("reading /api/v1/alerts")
    }

    /// An instant query's result (`data` of `/api/v1/query`); an invalid expression is
    /// an error that carries Prometheus's reason.
    pub fn query(&self, expr: &str) -> anyhow::Result<serde_json::Value> {
        self.api("/api/v1/query", &[("query", expr)])
    }

    /// GET `path` with `params` (URL-encoded by curl): the answer's `data`.
    fn api(&self, path: &str, params: &[(&str, &str)]) -> anyhow::Result<serde_json::Value> {
        let url = format!("http://{}{path}", self.address);
        let encoded: String = params
            .iter()
            .map(|(name, value)| {
                format!(
                    " --data-urlencode {}",
                    shell_quote(&format!("{name}={value}"))
                )
            })
            .collect();
        let body = netns::run_ok(
            &namespace(&self.node),
            &format!("curl -s --max-time 5 -G{encoded} '{url}'"),
        )
        .with_context(|| format!("{}: GET {url}", self.node))?;
        answer(&body).with_context(|| format!("GET {url} {params:?}"))
    }
}

impl Alert {
    /// The alert's name.
    pub fn name(&self) -> &str {
        self.label("alertname")
    }

    /// Whether it fires (not only pending).
    pub fn firing(&self) -> bool {
        self.state == "firing"
    }

    /// A label's value, "" when the alert has none.
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

impl std::fmt::Display for Alert {
    /// `firing WebhookEdgeTargetDown{job="edge", pop="pop-a"} since 2026-…`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let labels: Vec<String> = self
            .labels
            .iter()
            .filter(|(name, _)| *name != "alertname")
            .map(|(name, value)| format!("{name}={value:?}"))
            .collect();
        write!(
            f,
            "{} {}{{{}}} since {}",
            self.state,
            self.name(),
            labels.join(", "),
            self.active_at
        )
    }
}

/// The `data` of an API answer, or its error.
fn answer(body: &str) -> anyhow::Result<serde_json::Value> {
    let reply: serde_json::Value =
        serde_json::from_str(body).with_context(|| format!("not an API answer: {body:?}"))?;
    if reply["status"] != "success" {
        bail!("{}: {}", reply["errorType"], reply["error"]);
    }
    Ok(reply["data"].clone())
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
