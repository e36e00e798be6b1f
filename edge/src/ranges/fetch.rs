//! Getting a source's bytes: an HTTP(S) GET with a deadline and a size bound, or a local
//! file. Errors are sentences for the operator, since nothing branches on them.

use std::io::Read;
use std::time::Duration;

use crate::config::Location;

/// The body at `location`, at most [`MAX_BODY`] bytes.
pub(super) async fn fetch(location: &Location) -> Result<Vec<u8>, String> {
    match location {
        Location::Url(url) => get(url).await.map_err(|e| format!("GET {url}: {e}")),
        Location::File(path) => std::fs::File::open(path)
            .and_then(|file| {
                let mut body = Vec::new();
                file.take(MAX_BODY as u64 + 1).read_to_end(&mut body)?;
                Ok(body)
            })
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|body| bounded(body, &path.display().to_string())),
    }
}

async fn get(url: &str) -> Result<Vec<u8>, String> {
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .user_agent(concat!("webhook-edge/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())?;
    let mut response = client.get(url).send().await.map_err(|e| causes(&e))?;
    if !response.status().is_success() {
        return Err(format!("answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| causes(&e))? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_BODY {
            break;
        }
    }
    bounded(body, url)
}

/// An error and its sources, `: `-joined ("error sending request: … Connection refused").
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

fn bounded(body: Vec<u8>, what: &str) -> Result<Vec<u8>, String> {
    if body.len() > MAX_BODY {
        return Err(format!("{what}: larger than {MAX_BODY} bytes"));
    }
    Ok(body)
}

/// GitHub's whole `/meta` document is ~200 KB; a list past this is not a list.
const MAX_BODY: usize = 4 << 20;
const TIMEOUT: Duration = Duration::from_secs(30);
