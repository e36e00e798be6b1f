//! The small plain-HTTP server each binary runs on its admin address (`/metrics`,
//! health, status). Answers depend only on the path. An accept error (out of file
//! descriptors, mostly) backs off instead of spinning.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// One answer of the admin server.
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The `Content-Type` header.
    pub content_type: &'static str,
    /// The whole body.
    pub body: String,
}

impl Answer {
    /// Any answer.
    pub fn new(status: StatusCode, content_type: &'static str, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type,
            body: body.into(),
        }
    }

    /// `/metrics` as [`crate::metrics::encode`] writes it (OpenMetrics text).
    pub fn openmetrics(body: String) -> Self {
        Self::new(StatusCode::OK, OPENMETRICS, body)
    }

    /// 404, naming the paths that exist.
    pub fn not_found(paths: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("not found; try {paths}\n"),
        )
    }
}

/// Serves HTTP/1.1 on `listener` for the life of the process, `answer` mapping a
/// request path to its answer.
pub async fn serve<F>(listener: TcpListener, answer: F)
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let mut backoff = MIN_BACKOFF;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = MIN_BACKOFF;
                stream
            }
            Err(e) => {
                tracing::warn!(error = %e, backoff_ms = backoff.as_millis() as u64, "admin accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let answer = Arc::clone(&answer);
        tokio::spawn(async move {
            let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let response = respond(answer(request.uri().path()));
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn respond(answer: Answer) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(answer.body)));
    *response.status_mut() = answer.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    response
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const MIN_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
