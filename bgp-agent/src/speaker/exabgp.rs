//! ExaBGP speaker: the agent runs as an ExaBGP `process`. Commands go to stdout, one per
//! line, flushed; ExaBGP answers each with `done` or `error` on our stdin.
//!
//! With `neighbor-changes` in the neighbor's `api` block, ExaBGP also writes `neighbor
//! ADDR up|connected|down - REASON` lines: they keep the session gauges, apart from the
//! acknowledgements.
//!
//! If the agent dies, ExaBGP does not withdraw: it respawns the process. A fresh agent
//! starts withdrawn and says so (a withdraw per prefix) before anything else, so a route
//! left behind by a dead agent is taken back at once and comes back only after `rise`.

use std::time::Duration;

use anyhow::{Context, bail};
use ipnet::IpNet;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::advert::{Advert, GRACEFUL_SHUTDOWN};
use crate::config::ExabgpSettings;
use crate::metrics::{PeerLabel, Sessions};

pub(crate) struct ExaBgp {
    prefixes: Vec<IpNet>,
    attributes: String,
    /// The same with GRACEFUL_SHUTDOWN added to the communities.
    graceful_attributes: String,
    /// With the degraded MED and AS-path prepends instead.
    degraded_attributes: String,
    ack_timeout: Duration,
    acks: mpsc::UnboundedReceiver<String>,
}

impl ExaBgp {
    pub(crate) fn new(settings: &ExabgpSettings, prefixes: Vec<IpNet>, sessions: Sessions) -> Self {
        let ExabgpSettings {
            communities,
            med,
            as_path_prepend,
            local_as,
            degraded,
            ack_timeout,
        } = settings;
        let (tx, acks) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(tokio::io::stdin()).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("neighbor ") {
                    if let Some((peer, up)) = neighbor_change(&line) {
                        tracing::info!(peer, up, "BGP session changed");
                        sessions
                            .get_or_create(&PeerLabel { peer })
                            .set(i64::from(up));
                    }
                    continue;
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
            // ExaBGP closed our stdin: it is gone or restarting us. Without it there is
            // no session to speak on, so stop and let ExaBGP start a fresh agent.
            tracing::warn!("ExaBGP closed stdin; exiting");
            std::process::exit(0);
        });
        let mut graceful_communities = communities.clone();
        graceful_communities.push(GRACEFUL_SHUTDOWN.to_owned());
        Self {
            prefixes,
            attributes: attributes(communities, *med, *as_path_prepend, *local_as),
            graceful_attributes: attributes(
                &graceful_communities,
                *med,
                *as_path_prepend,
                *local_as,
            ),
            degraded_attributes: attributes(
                communities,
                degraded.med,
                degraded.as_path_prepend,
                *local_as,
            ),
            ack_timeout: *ack_timeout,
            acks,
        }
    }

    pub(crate) async fn apply(&mut self, advert: Advert) -> anyhow::Result<()> {
        let mut out = String::new();
        for prefix in &self.prefixes {
            let line = match advert {
                Advert::Announced => {
                    format!("announce route {prefix} next-hop self{}", self.attributes)
                }
                Advert::Degraded => format!(
                    "announce route {prefix} next-hop self{}",
                    self.degraded_attributes
                ),
                Advert::GracefulShutdown => format!(
                    "announce route {prefix} next-hop self{}",
                    self.graceful_attributes
                ),
                Advert::Withdrawn => format!("withdraw route {prefix} next-hop self"),
            };
            out.push_str(&line);
            out.push('\n');
        }
        let mut stdout = tokio::io::stdout();
        stdout
            .write_all(out.as_bytes())
            .await
            .context("writing to ExaBGP")?;
        stdout.flush().await.context("flushing to ExaBGP")?;
        for prefix in &self.prefixes {
            let ack = tokio::time::timeout(self.ack_timeout, self.acks.recv())
                .await
                .with_context(|| {
                    format!(
                        "no acknowledgement from ExaBGP for {prefix} within {:?}",
                        self.ack_timeout
                    )
                })?;
            match ack.as_deref() {
                Some("done") => {}
                Some(other) => bail!("ExaBGP answered {other:?} for {prefix}"),
                None => bail!("ExaBGP closed stdin"),
            }
        }
        Ok(())
    }
}

/// `neighbor ADDR up` → (ADDR, true); `connected` and `down` → false; other neighbor
/// messages (updates, keepalives) → None.
fn neighbor_change(line: &str) -> Option<(String, bool)> {
    let mut words = line.split_whitespace();
    let (Some("neighbor"), Some(peer), Some(state)) = (words.next(), words.next(), words.next())
    else {
        return None;
    };
    let up = match state {
        "up" => true,
        "down" | "connected" => false,
        _ => return None,
    };
    Some((peer.to_owned(), up))
}

fn attributes(
    communities: &[String],
    med: Option<u32>,
    prepend: u32,
    local_as: Option<u32>,
) -> String {
    let mut attrs = String::new();
    if let Some(med) = med {
        attrs.push_str(&format!(" med {med}"));
    }
    if !communities.is_empty() {
        attrs.push_str(&format!(" community [{}]", communities.join(" ")));
    }
    if let (Some(asn), true) = (local_as, prepend > 0) {
        // ExaBGP sends the path as given (it adds no AS of its own to one that starts
        // with it), so the AS itself comes once more than the prepends.
        let path: Vec<String> = (0..=prepend).map(|_| asn.to_string()).collect();
        attrs.push_str(&format!(" as-path [{}]", path.join(" ")));
    }
    attrs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbor_changes_are_told_apart_from_other_messages() {
        assert_eq!(
            neighbor_change("neighbor 10.0.1.1 up"),
            Some(("10.0.1.1".into(), true))
        );
        assert_eq!(
            neighbor_change("neighbor 2001:db8:1::1 down - peer reset"),
            Some(("2001:db8:1::1".into(), false))
        );
        assert_eq!(
            neighbor_change("neighbor 10.0.1.1 connected"),
            Some(("10.0.1.1".into(), false))
        );
        assert_eq!(neighbor_change("neighbor 10.0.1.1 receive keepalive"), None);
        assert_eq!(neighbor_change("done"), None);
    }

    #[test]
    fn attribute_text() {
        assert_eq!(attributes(&[], None, 0, None), "");
        assert_eq!(
            attributes(
                &["65000:100".into(), "65000:200".into()],
                Some(50),
                2,
                Some(65001)
            ),
            " med 50 community [65000:100 65000:200] as-path [65001 65001 65001]"
        );
    }
}
