//! The admin listener (plain HTTP, bind it to a management address): `/healthz` (the
//! process is alive), `/readyz` (this PoP can accept and store events: the BGP agent
//! withdraws the prefix when it fails) and `/metrics`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::spool::Spool;

/// Process-level readiness flags.
#[derive(Debug, Default)]
pub struct Readiness {
    pub listening: AtomicBool,
    pub draining: AtomicBool,
}

pub struct Admin {
    pub readiness: Arc<Readiness>,
    pub spool: Arc<Spool>,
    pub metrics: Arc<Metrics>,
}

impl Admin {
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let admin = Arc::clone(&self);
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let admin = Arc::clone(&admin);
                    async move { Ok::<_, Infallible>(admin.answer(&request)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        match request.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok\n".into(), "text/plain"),
            "/readyz" => match self.unready_reason() {
                None => text(StatusCode::OK, "ready\n".into(), "text/plain"),
                Some(reason) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {reason}\n"),
                    "text/plain",
                ),
            },
            "/metrics" => text(
                StatusCode::OK,
                self.metrics.encode(),
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            ),
            _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
        }
    }

    pub fn unready_reason(&self) -> Option<&'static str> {
        if self.readiness.draining.load(Ordering::Acquire) {
            Some("draining")
        } else if !self.readiness.listening.load(Ordering::Acquire) {
            Some("listeners not up")
        } else {
            self.spool.unready_reason()
        }
    }
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
