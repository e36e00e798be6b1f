//! HTTP/2 load for the benchmarks (`lab h2-load`): many streams at once on each of a few
//! TLS connections, each request a distinct signed GitHub delivery (its own id and body
//! from the `signature<TAB>body` file `lab/bench/lib.sh` writes). h2load would send one
//! body under every id, which the edge acknowledges as a replay without storing.
//! Prints the wrk script's result line: `RESULT rps=.. p50_us=.. p99_us=.. non2xx=..
//! errors=.. requests=..`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

/// The load (also the `lab h2-load` options).
#[derive(Clone, Debug, clap::Args)]
pub struct Plan {
    /// Where the webhooks go (https, ALPN h2).
    #[arg(long)]
    pub url: String,
    /// The `signature<TAB>body` lines, one per delivery.
    #[arg(long)]
    pub bodies: PathBuf,
    /// Makes this run's delivery ids differ from another run's.
    #[arg(long, default_value = "h2")]
    pub run: String,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Requests in flight on each connection.
    #[arg(long, default_value_t = 100)]
    pub streams: usize,
    /// How long to send.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Send the first body under every id: the replay path, which stores nothing.
    #[arg(long)]
    pub replay: bool,
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Requests answered 2xx, and their latencies.
    pub latencies: Vec<Duration>,
    /// Requests answered otherwise.
    pub non_2xx: u64,
    /// Requests without an answer.
    pub errors: u64,
    /// How long the run took.
    pub elapsed: Duration,
}

impl Summary {
    /// The wrk script's result line.
    pub fn line(&self) -> String {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let at = |q: f64| {
            sorted
                .get(((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1)))
                .map_or(0, |d| d.as_micros())
        };
        let requests = sorted.len() as u64 + self.non_2xx + self.errors;
        format!(
            "RESULT rps={:.1} p50_us={} p99_us={} non2xx={} errors={} requests={requests}",
            requests as f64 / self.elapsed.as_secs_f64().max(1e-9),
            at(0.5),
            at(0.99),
            self.non_2xx,
            self.errors,
        )
    }

    fn merge(&mut self, other: Summary) {
        self.latencies.extend(other.latencies);
        self.non_2xx += other.non_2xx;
        self.errors += other.errors;
    }
}

/// Runs `plan`: `streams` senders per connection, each sending the next delivery as soon
/// as its previous one is answered, until `duration` has passed.
pub async fn run(plan: Plan) -> anyhow::Result<Summary> {
    let deliveries = Arc::new(read_bodies(&plan.bodies)?);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut senders = tokio::task::JoinSet::new();
    for _ in 0..plan.connections {
        // One client per connection: reqwest multiplexes a client's requests on one.
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .http2_prior_knowledge()
            .build()?;
        for _ in 0..plan.streams {
            let sender = Sender {
                client: client.clone(),
                url: plan.url.clone(),
                run: plan.run.clone(),
                deliveries: Arc::clone(&deliveries),
                next: Arc::clone(&next),
                replay: plan.replay,
            };
            senders.spawn(sender.send_until(started + plan.duration));
        }
    }
    let mut summary = Summary::default();
    while let Some(sent) = senders.join_next().await {
        summary.merge(sent?);
    }
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// One stream's worth of load.
struct Sender {
    client: reqwest::Client,
    url: String,
    run: String,
    deliveries: Arc<Vec<(String, bytes::Bytes)>>,
    next: Arc<AtomicUsize>,
    replay: bool,
}

impl Sender {
    async fn send_until(self, end: Instant) -> Summary {
        let mut summary = Summary::default();
        while Instant::now() < end {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let pick = if self.replay {
                0
            } else {
                n % self.deliveries.len()
            };
            let (signature, body) = &self.deliveries[pick];
            let sent = Instant::now();
            let answer = self
                .client
                .post(&self.url)
                .header("content-type", "application/json")
                .header("x-github-event", "push")
                .header("x-github-delivery", format!("{}-{n}", self.run))
                .header("x-hub-signature-256", signature)
                .body(body.clone())
                .send()
                .await;
            match answer {
                Ok(answer) if answer.status().is_success() => {
                    let _ = answer.bytes().await;
                    summary.latencies.push(sent.elapsed());
                }
                Ok(_) => summary.non_2xx += 1,
                Err(_) => summary.errors += 1,
            }
        }
        summary
    }
}

fn read_bodies(path: &std::path::Path) -> anyhow::Result<Vec<(String, bytes::Bytes)>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let deliveries: Vec<_> = text
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(signature, body)| {
            (
                signature.to_owned(),
                bytes::Bytes::copy_from_slice(body.as_bytes()),
            )
        })
        .collect();
    anyhow::ensure!(
        !deliveries.is_empty(),
        "{}: no signature<TAB>body lines",
        path.display()
    );
    Ok(deliveries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_counts_every_outcome_and_reads_the_quantiles() {
        let summary = Summary {
            latencies: (1..=100).rev().map(Duration::from_micros).collect(),
            non_2xx: 3,
            errors: 2,
            elapsed: Duration::from_secs(2),
        };
        assert_eq!(
            summary.line(),
            "RESULT rps=52.5 p50_us=51 p99_us=100 non2xx=3 errors=2 requests=105"
        );
    }
}
