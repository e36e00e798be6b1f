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

/// An instant vector's values (a query's `data`) by one of its series' labels.
pub fn values_by(data: &serde_json::Value, label: &str) -> BTreeMap<String, f64> {
    series(data)
        .filter_map(|s| Some((label_of(s, label)?, number(&s["value"][1])?)))
        .collect()
}

/// An instant vector's `label` to its `other` label, series by series.
pub fn labels_by(data: &serde_json::Value, label: &str, other: &str) -> BTreeMap<String, String> {
    series(data)
        .filter_map(|s| Some((label_of(s, label)?, label_of(s, other)?)))
        .collect()
}

/// A range vector's samples (unix seconds, value), oldest first, by one of its series'
/// labels.
pub fn samples_by(data: &serde_json::Value, label: &str) -> BTreeMap<String, Vec<(f64, f64)>> {
    series(data)
        .filter_map(|s| {
            let samples = s["values"]
                .as_array()?
                .iter()
                .filter_map(|sample| Some((sample[0].as_f64()?, number(&sample[1])?)))
                .collect();
            Some((label_of(s, label)?, samples))
        })
        .collect()
}

fn series(data: &serde_json::Value) -> impl Iterator<Item = &serde_json::Value> {
    data["result"].as_array().into_iter().flatten()
}

fn label_of(series: &serde_json::Value, label: &str) -> Option<String> {
    Some(series["metric"][label].as_str()?.to_owned())
}

/// A sample's value: Prometheus writes numbers as strings.
fn number(value: &serde_json::Value) -> Option<f64> {
    value.as_str()?.parse().ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_read_by_label() {
        let instant: serde_json::Value = serde_json::from_str(
            r#"{"resultType":"vector","result":[
                {"metric":{"pop":"pop-a","instance":"10.0.1.2:9180"},"value":[100.5,"12.5"]},
                {"metric":{"instance":"10.0.2.2:9180"},"value":[100.5,"3"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            values_by(&instant, "pop"),
            BTreeMap::from([("pop-a".to_owned(), 12.5)])
        );
        assert_eq!(
            labels_by(&instant, "pop", "instance"),
            BTreeMap::from([("pop-a".to_owned(), "10.0.1.2:9180".to_owned())])
        );
        let range: serde_json::Value = serde_json::from_str(
            r#"{"resultType":"matrix","result":[
                {"metric":{"pop":"pop-b"},"values":[[100,"1"],[102,"4"]]}]}"#,
        )
        .unwrap();
        assert_eq!(
            samples_by(&range, "pop"),
            BTreeMap::from([("pop-b".to_owned(), vec![(100.0, 1.0), (102.0, 4.0)])])
        );
        assert!(values_by(&serde_json::Value::Null, "pop").is_empty());
    }
}
