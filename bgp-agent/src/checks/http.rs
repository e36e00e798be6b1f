//! A plain-HTTP GET (the edge's `/readyz` lives on its admin listener).

use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

pub(super) async fn get_2xx(url: &str) -> Result<String, String> {
    let (status, body) = get(url, 4096).await?;
    if status.is_success() {
        Ok(format!("{status}"))
    } else {
        Err(format!("{status} {}", body.trim()))
    }
}

/// GET `url`; the status and up to `limit` bytes of the body.
pub(super) async fn get(url: &str, limit: usize) -> Result<(http::StatusCode, String), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let host = uri.host().ok_or_else(|| format!("{url}: no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("connect {host}:{port}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    tokio::spawn(connection);
    let request = http::Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(http::header::HOST, host)
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Ok((
        status,
        String::from_utf8_lossy(&body[..body.len().min(limit)]).into_owned(),
    ))
}
