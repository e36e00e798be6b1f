//! Health checks. Each runs under its own timeout and reports pass or fail with a short
//! reason; the hysteresis decides what a round of results means.

mod http;
mod xdp;

use std::time::Instant;

use crate::config::{CheckClass, CheckConfig, CheckKind};

#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    pub name: String,
    pub class: CheckClass,
    pub ok: bool,
    pub detail: String,
    pub duration_ms: f64,
}

/// The body of a 2xx answer to GET `url` (the peer guard reads other agents' status).
pub async fn fetch(url: &str) -> Result<String, String> {
    match http::get(url).await? {
        (status, body) if status.is_success() => Ok(body),
        (status, _) => Err(format!("{url}: {status}")),
    }
}

pub async fn run(check: &CheckConfig) -> Outcome {
    let started = Instant::now();
    let result = tokio::time::timeout(check.timeout, probe(&check.kind)).await;
    let (ok, detail) = match result {
        Ok(Ok(detail)) => (true, detail),
        Ok(Err(detail)) => (false, detail),
        Err(_) => (false, format!("timed out after {:?}", check.timeout)),
    };
    Outcome {
        name: check.name.clone(),
        class: check.class,
        ok,
        detail,
        duration_ms: started.elapsed().as_secs_f64() * 1e3,
    }
}

async fn probe(kind: &CheckKind) -> Result<String, String> {
    match kind {
        CheckKind::Http { url } => http::get_2xx(url).await,
        CheckKind::Tcp { address } => tokio::net::TcpStream::connect(address.as_str())
            .await
            .map(|_| "connected".to_owned())
            .map_err(|e| format!("connect {address}: {e}")),
        CheckKind::Exec { command } => {
            let status = tokio::process::Command::new(&command[0])
                .args(&command[1..])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .status()
                .await
                .map_err(|e| format!("{}: {e}", command[0]))?;
            if status.success() {
                Ok("exit 0".into())
            } else {
                Err(format!("{status}"))
            }
        }
        CheckKind::File { path } => match tokio::fs::try_exists(path).await {
            Ok(false) => Ok("no maintenance file".into()),
            Ok(true) => Err(format!("maintenance file {} exists", path.display())),
            Err(e) => Err(format!("{}: {e}", path.display())),
        },
        CheckKind::Xdp { interface } => xdp::attached(interface).await,
    }
}
