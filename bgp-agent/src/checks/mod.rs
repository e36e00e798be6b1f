//! Health checks. Each runs under its own timeout and reports pass or fail with a short
//! reason; the hysteresis decides what a round of results means.

mod http;
mod metric;
mod xdp;

use std::time::Instant;

use crate::config::{CheckClass, CheckKind, CheckSettings};

#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Outcome {
    pub name: String,
    pub class: CheckClass,
    pub ok: bool,
    pub detail: String,
    pub duration_ms: f64,
}

/// A round is healthy when every local check passed. Shared checks (a dependency every
/// PoP has, such as the origin) are reported but never make a PoP withdraw: if they did,
/// an origin outage would take every PoP off the internet at once.
pub(crate) fn local_health(outcomes: &[Outcome]) -> bool {
    outcomes
        .iter()
        .filter(|o| o.class == CheckClass::Local)
        .all(|o| o.ok)
}

/// Whether every degrade check passed: a failure makes the PoP less preferred.
pub(crate) fn degrade_health(outcomes: &[Outcome]) -> bool {
    outcomes
        .iter()
        .filter(|o| o.class == CheckClass::Degrade)
        .all(|o| o.ok)
}

/// The body of a 2xx answer to GET `url` (the peer guard reads other agents' status).
pub async fn fetch(url: &str) -> Result<String, String> {
    match http::get(url, STATUS_LIMIT).await? {
        (status, body) if status.is_success() => Ok(body),
        (status, _) => Err(format!("{url}: {status}")),
    }
}

pub(crate) async fn run(check: &CheckSettings) -> Outcome {
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
        CheckKind::Metric { url, metric, max } => match http::get(url, METRICS_LIMIT).await? {
            (status, page) if status.is_success() => metric::at_most(&page, metric, *max),
            (status, _) => Err(format!("{url}: {status}")),
        },
    }
}

/// A peer's `/status` is a few KiB; an edge's `/metrics` page is well under this.
const STATUS_LIMIT: usize = 64 << 10;
const METRICS_LIMIT: usize = 4 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(class: CheckClass, ok: bool) -> Outcome {
        Outcome {
            name: "c".into(),
            class,
            ok,
            detail: String::new(),
            duration_ms: 0.0,
        }
    }

    #[test]
    fn only_degrade_checks_decide_degradation() {
        let outcomes = [
            outcome(CheckClass::Local, false),
            outcome(CheckClass::Degrade, true),
        ];
        assert!(degrade_health(&outcomes));
        assert!(!degrade_health(&[outcome(CheckClass::Degrade, false)]));
        assert!(local_health(&[outcome(CheckClass::Degrade, false)]));
    }

    #[test]
    fn shared_failures_never_make_a_round_unhealthy() {
        let shared_down = [
            outcome(CheckClass::Local, true),
            outcome(CheckClass::Shared, false),
        ];
        assert!(local_health(&shared_down));
        let local_down = [
            outcome(CheckClass::Local, false),
            outcome(CheckClass::Shared, true),
        ];
        assert!(!local_health(&local_down));
    }

    #[tokio::test]
    async fn file_check_is_a_maintenance_switch_and_exec_uses_the_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maintenance");
        let check = |kind| CheckSettings {
            name: "c".into(),
            kind,
            timeout: std::time::Duration::from_secs(2),
            interval: None,
            class: CheckClass::Local,
        };
        assert!(run(&check(CheckKind::File { path: path.clone() })).await.ok);
        std::fs::write(&path, "").unwrap();
        assert!(!run(&check(CheckKind::File { path })).await.ok);
        assert!(
            run(&check(CheckKind::Exec {
                command: vec!["true".into()]
            }))
            .await
            .ok
        );
        assert!(
            !run(&check(CheckKind::Exec {
                command: vec!["false".into()]
            }))
            .await
            .ok
        );
        let slow = CheckSettings {
            timeout: std::time::Duration::from_millis(50),
            ..check(CheckKind::Exec {
                command: vec!["sleep".into(), "5".into()],
            })
        };
        let out = run(&slow).await;
        assert!(!out.ok && out.detail.contains("timed out"), "{out:?}");
    }

    #[tokio::test]
    async fn xdp_check_reports_no_program_on_loopback() {
        let out = run(&CheckSettings {
            name: "xdp".into(),
            kind: CheckKind::Xdp {
                interface: "lo".into(),
            },
            timeout: std::time::Duration::from_secs(2),
            interval: None,
            class: CheckClass::Local,
        })
        .await;
        assert!(!out.ok);
        assert!(out.detail.contains("no XDP program on lo"), "{out:?}");
    }
}
