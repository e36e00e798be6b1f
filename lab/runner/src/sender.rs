//! A webhook sender for the lab's client node: signed GitHub deliveries at a steady rate,
//! each on a new TLS connection (as providers send, and so ECMP spreads them) or over a
//! set of keep-alive connections, with every outcome recorded: when it left, when it
//! ended, the status and the PoP that answered (`Edge-Pop`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::Mac;
use serde::{Deserialize, Serialize};

/// What to send (also the `lab send` options).
#[derive(Clone, Debug, clap::Args)]
pub struct Plan {
    /// Where webhooks are sent.
    #[arg(long, default_value = "https://192.0.2.10/hooks/github")]
    pub url: String,
    /// Webhooks per second.
    #[arg(long, default_value_t = 50)]
    pub rate: u32,
    /// How long to send.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// The GitHub webhook secret signatures are made with.
    #[arg(long, default_value = "lab-github-secret")]
    pub secret: String,
    /// Delivery ids are this prefix and a counter.
    #[arg(long, default_value = "lab")]
    pub id_prefix: String,
    /// One request's time limit.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Keep-alive connections the webhooks are spread over, each sending its share in
    /// turn (0: a new connection for every webhook).
    #[arg(long, default_value_t = 0)]
    pub connections: u32,
}

/// What happened to one webhook.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    /// Its delivery id.
    pub id: String,
    /// Unix time in ms when the request left and when it ended.
    pub sent_ms: u64,
    /// Unix time in ms when it ended.
    pub done_ms: u64,
    /// None: no answer (connect refused, reset, timeout).
    pub status: Option<u16>,
    /// The PoP that answered (its `edge-pop` header).
    pub pop: Option<String>,
    /// Why there was no answer.
    pub error: Option<String>,
}

impl Outcome {
    /// Whether the edge acknowledged it (2xx).
    pub fn acked(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// Sends `plan`'s webhooks at its rate and returns every outcome, in sending order.
pub async fn send(plan: Plan) -> anyhow::Result<Vec<Outcome>> {
    let plan = Arc::new(plan);
    let total = (plan.duration.as_secs_f64() * f64::from(plan.rate)).round() as u64;
    let interval = Duration::from_secs_f64(1.0 / f64::from(plan.rate.max(1)));
    let started = Instant::now();
    let at = move |n: u64| tokio::time::sleep_until((started + interval * n as u32).into());
    let mut tasks = Vec::new();
    if plan.connections == 0 {
        let client = client(&plan, 0)?;
        for n in 0..total {
            at(n).await;
            let (client, plan) = (client.clone(), Arc::clone(&plan));
            tasks.push(tokio::spawn(async move {
                vec![one(&client, &plan, format!("{}-{n}", plan.id_prefix)).await]
            }));
        }
    } else {
        // Connection c sends webhooks c, c + connections, ...: one at a time, so each
        // stays one flow (a new one only after a failure closed it).
        let connections = u64::from(plan.connections);
        for c in 0..connections.min(total) {
            let (client, plan) = (client(&plan, 1)?, Arc::clone(&plan));
            tasks.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for n in (c..total).step_by(connections as usize) {
                    at(n).await;
                    outcomes.push(one(&client, &plan, format!("{}-{n}", plan.id_prefix)).await);
                }
                outcomes
            }));
        }
    }
    let mut outcomes = Vec::with_capacity(total as usize);
    for task in tasks {
        outcomes.extend(task.await?);
    }
    outcomes.sort_by_key(|o| o.sent_ms);
    Ok(outcomes)
}

/// An HTTP/1.1 client keeping at most `idle` connections open between requests.
fn client(plan: &Plan, idle: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .pool_max_idle_per_host(idle)
        .http1_only()
        .timeout(plan.timeout)
        .build()?)
}

async fn one(client: &reqwest::Client, plan: &Plan, id: String) -> Outcome {
    let body = format!(r#"{{"zen":"anycast","delivery":"{id}"}}"#);
    let signature = github_signature(&plan.secret, &body);
    let sent_ms = now_ms();
    let result = client
        .post(&plan.url)
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", &id)
        .header("X-Hub-Signature-256", signature)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await;
    let (status, pop, error) = match result {
        Ok(response) => (
            Some(response.status().as_u16()),
            response
                .headers()
                .get("edge-pop")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            None,
        ),
        Err(e) => (None, None, Some(format!("{e:#}"))),
    };
    Outcome {
        id,
        sent_ms,
        done_ms: now_ms(),
        status,
        pop,
        error,
    }
}

/// GitHub's `X-Hub-Signature-256` value for `body`.
pub fn github_signature(secret: &str, body: &str) -> String {
    #[expect(clippy::expect_used, reason = "HMAC takes keys of any length")]
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body.as_bytes());
    format!("sha256={}", const_hex::encode(mac.finalize().into_bytes()))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| e.to_string())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
