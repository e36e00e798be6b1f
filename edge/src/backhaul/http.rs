//! HTTP/2 origin sink. `connections` HTTP/2 connections are dialled at start and kept
//! warm with PING frames; a connection that dies is re-dialled in the background with
//! backoff and full jitter, before the next event needs it. `https://` origins get TLS
//! (ALPN h2, optional mTLS); `http://` origins get HTTP/2 with prior knowledge.
//!
//! Each event is a POST of the raw body with the kept provider headers, the edge's own
//! `Edge-*` headers (`Edge-Event-Id`: the provider's id) and `Idempotency-Key: <the
//! event's origin key>` (route-scoped: `crate::event::origin_key`). 2xx is delivered; an
//! answer that refuses the event itself (400, 413, 415, 422) sends it to the dead-letter
//! store; any other answer is the origin's problem (down, overloaded, a rotated
//! credential, a wrong URL) and is retried, honouring `Retry-After`, so that one bad
//! deploy at the origin does not move the whole stream out of the delivery path.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode, Uri};
use http_body_util::Full;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::{Notify, watch};

use super::error::DeliveryError;
use super::metrics::BackhaulMetrics;
use super::retry::{Backoff, parse_retry_after, unit_random};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{ClientTls, HttpSinkSettings};
use crate::event::id_of_key;
use crate::spool::record::Record;

type Sender = http2::SendRequest<Full<Bytes>>;

pub struct HttpSink {
    uri: Uri,
    timeout: Duration,
    slots: Vec<watch::Receiver<Option<Sender>>>,
    next: AtomicUsize,
    pub(super) origin_back: Arc<Notify>,
}

impl HttpSink {
    pub async fn connect(
        settings: &HttpSinkSettings,
        metrics: BackhaulMetrics,
    ) -> anyhow::Result<Self> {
        let uri: Uri = settings
            .url
            .parse()
            .with_context(|| format!("backhaul.http.url {}", settings.url))?;
        let tls = match uri.scheme_str() {
            Some("https") => Some(tokio_rustls::TlsConnector::from(client_tls(
                settings.tls.as_ref(),
            )?)),
            Some("http") => None,
            _ => anyhow::bail!("backhaul.http.url: must be http:// or https://"),
        };
        let origin_back = Arc::new(Notify::new());
        let dialer = Arc::new(Dialer {
            uri: uri.clone(),
            tls,
            metrics,
            origin_back: Arc::clone(&origin_back),
        });
        let mut slots = Vec::new();
        for _ in 0..settings.connections {
            let (tx, rx) = watch::channel(None);
            tokio::spawn(Arc::clone(&dialer).keep_warm(tx));
            slots.push(rx);
        }
        // Give the first dials a moment so the first event finds a warm connection; an
        // unreachable origin must not delay the edge's start for long.
        let deadline = tokio::time::Instant::now() + INITIAL_DIAL_WAIT;
        for slot in &mut slots {
            let _ = tokio::time::timeout_at(deadline, slot.wait_for(Option::is_some)).await;
        }
        Ok(Self {
            uri,
            timeout: settings.timeout,
            slots,
            next: AtomicUsize::new(0),
            origin_back,
        })
    }

    pub async fn deliver(&self, record: &Record, origin_key: &str) -> Result<(), DeliveryError> {
        let mut sender = self.ready_sender().ok_or(DeliveryError::Retry {
            reason: "not_connected",
            detail: "no warm connection to the origin".into(),
            after: None,
        })?;
        let request = self
            .request(record, origin_key)
            .map_err(|e| DeliveryError::Rejected(format!("cannot form a request: {e}")))?;
        let response = tokio::time::timeout(self.timeout, sender.send_request(request))
            .await
            .map_err(|_| {
                retry(
                    "timeout",
                    format!("no answer within {:?}", self.timeout),
                    None,
                )
            })?
            .map_err(|e| retry("connection", e.to_string(), None))?;
        classify(
            response.status(),
            response.headers().get(http::header::RETRY_AFTER),
            SystemTime::now(),
        )
    }

    fn ready_sender(&self) -> Option<Sender> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..self.slots.len()).find_map(|i| {
            let slot = &self.slots[(start + i) % self.slots.len()];
            slot.borrow().as_ref().filter(|s| s.is_ready()).cloned()
        })
    }

    fn request(
        &self,
        record: &Record,
        origin_key: &str,
    ) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut builder = Request::post(self.uri.clone())
            .header("idempotency-key", origin_key)
            .header("edge-event-id", id_of_key(&record.event_id))
            .header("edge-pop", record.pop.as_str())
            .header("edge-route", record.route.as_str())
            .header("edge-seq", record.seq)
            .header("edge-received-ms", record.received_ms)
            .header("edge-early", if record.early { "1" } else { "0" });
        for (name, value) in &record.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name.as_str()),
                HeaderValue::from_bytes(value),
            ) {
                builder = builder.header(name, value);
            }
        }
        builder.body(Full::new(Bytes::from(record.body.clone())))
    }
}

/// What an origin's answer means for the event.
pub(super) fn classify(
    status: StatusCode,
    retry_after: Option<&HeaderValue>,
    now: SystemTime,
) -> Result<(), DeliveryError> {
    let after = retry_after
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, now));
    match status.as_u16() {
        200..=299 => Ok(()),
        429 => Err(retry("throttled", status.to_string(), after)),
        503 => Err(retry("unavailable", status.to_string(), after)),
        408 => Err(retry("timeout", status.to_string(), after)),
        500..=599 => Err(retry("server_error", status.to_string(), after)),
        400 | 413 | 415 | 422 => Err(DeliveryError::Rejected(format!("origin answered {status}"))),
        401 | 403 | 407 => Err(retry("origin_unauthorized", status.to_string(), after)),
        _ => Err(retry("origin_refusing", status.to_string(), after)),
    }
}

fn retry(reason: &'static str, detail: String, after: Option<Duration>) -> DeliveryError {
    DeliveryError::Retry {
        reason,
        detail,
        after,
    }
}

struct Dialer {
    uri: Uri,
    tls: Option<tokio_rustls::TlsConnector>,
    metrics: BackhaulMetrics,
    origin_back: Arc<Notify>,
}

impl Dialer {
    /// Keeps one connection open for as long as the edge runs.
    async fn keep_warm(self: Arc<Self>, slot: watch::Sender<Option<Sender>>) {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(10),
        };
        let mut failures = 0;
        loop {
            match self.dial().await {
                Ok((sender, connection)) => {
                    failures = 0;
                    self.metrics.dials.inc();
                    self.metrics.ready_connections.inc();
                    let _ = slot.send(Some(sender));
                    self.origin_back.notify_waiters();
                    if let Err(e) = connection.await {
                        tracing::warn!(error = %e, origin = %self.uri, "backhaul: origin connection closed");
                    }
                    self.metrics.ready_connections.dec();
                    let _ = slot.send(None);
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), origin = %self.uri, "backhaul: cannot connect to the origin");
                }
            }
            if slot.is_closed() {
                return;
            }
            tokio::time::sleep(backoff.delay(failures, unit_random())).await;
            failures = failures.saturating_add(1);
        }
    }

    async fn dial(
        &self,
    ) -> anyhow::Result<(Sender, tokio::task::JoinHandle<Result<(), hyper::Error>>)> {
        let host = self.uri.host().context("origin url has no host")?;
        let port = self
            .uri
            .port_u16()
            .unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = tokio::time::timeout(DIAL_TIMEOUT, crate::server::sockets::connect(host, port))
            .await
            .context("connect timed out")??;
        let mut builder = http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        match &self.tls {
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())?;
                let stream = tokio::time::timeout(DIAL_TIMEOUT, connector.connect(name, tcp))
                    .await
                    .context("TLS handshake timed out")??;
                let (sender, connection) = builder.handshake(TokioIo::new(stream)).await?;
                Ok((sender, tokio::spawn(connection)))
            }
            None => {
                let (sender, connection) = builder.handshake(TokioIo::new(tcp)).await?;
                Ok((sender, tokio::spawn(connection)))
            }
        }
    }
}

fn client_tls(tls: Option<&ClientTls>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca = tls
        .and_then(|t| t.ca.as_ref())
        .context("backhaul.http.tls.ca is required for https origins")?;
    let pem =
        std::fs::read(ca).with_context(|| format!("backhaul.http.tls.ca {}", ca.display()))?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert?)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match tls.and_then(|t| t.client_cert.as_ref().zip(t.client_key.as_ref())) {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&std::fs::read(cert)?)
                .collect::<Result<Vec<_>, _>>()?;
            let key = PrivateKeyDer::from_pem_slice(&std::fs::read(key)?)
                .context("backhaul.http.tls.client_key: no key")?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
const INITIAL_DIAL_WAIT: Duration = Duration::from_secs(2);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_delivered_retry_or_rejected() {
        let now = SystemTime::UNIX_EPOCH;
        assert!(classify(StatusCode::OK, None, now).is_ok());
        assert!(classify(StatusCode::ACCEPTED, None, now).is_ok());
        let seconds = HeaderValue::from_static("7");
        match classify(StatusCode::SERVICE_UNAVAILABLE, Some(&seconds), now) {
            Err(DeliveryError::Retry {
                reason: "unavailable",
                after,
                ..
            }) => assert_eq!(after, Some(Duration::from_secs(7))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(StatusCode::TOO_MANY_REQUESTS, None, now),
            Err(DeliveryError::Retry {
                reason: "throttled",
                after: None,
                ..
            })
        ));
        assert!(matches!(
            classify(StatusCode::REQUEST_TIMEOUT, None, now),
            Err(DeliveryError::Retry { .. })
        ));
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, None, now),
            Err(DeliveryError::Retry {
                reason: "server_error",
                ..
            })
        ));
        assert!(matches!(
            classify(StatusCode::BAD_REQUEST, None, now),
            Err(DeliveryError::Rejected(_))
        ));
        for refuses_the_event in [400, 413, 415, 422] {
            let status = StatusCode::from_u16(refuses_the_event).unwrap();
            assert!(
                matches!(classify(status, None, now), Err(DeliveryError::Rejected(_))),
                "{status}"
            );
        }
        for (origins_problem, reason) in [
            (401, "origin_unauthorized"),
            (403, "origin_unauthorized"),
            (404, "origin_refusing"),
            (405, "origin_refusing"),
            (410, "origin_refusing"),
        ] {
            let status = StatusCode::from_u16(origins_problem).unwrap();
            match classify(status, None, now) {
                Err(DeliveryError::Retry { reason: got, .. }) => assert_eq!(got, reason),
                other => panic!("{status}: {other:?}"),
            }
        }
    }
}
