//! One webhook request, end to end: route, method, size, verify, event id, spool, ack.
//! A 2xx leaves only after the spool reports the event durable. An answer decided before
//! the body ended (404, 405, 413, 425, 408…) is sent at once and the rest of the body is
//! read and thrown away in the background, bounded, so the client sees the answer: over
//! HTTP/2 a reset that arrives while curl is still sending makes it drop the answer.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use edge_kit::clock::unix_ms;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Body;

use super::ConnUsage;
use super::app::{App, RouteEntry};
use super::body::ResponseBody;
use super::keep_alive::RequestBody;
use crate::admission::body_rate::BodyRate;
use crate::admission::ledger::ShedEntry;
use crate::admission::limiter::ShedReason;
use crate::admission::{BodyClaim, Refusal};
use crate::config::EarlyDataPolicy;
use crate::event;
use crate::spool::{AppendError, Appended, NewEvent};
use crate::verify::{
    Challenge, ChallengeAnswer, ChallengeError, Verification, Verified, VerifyError,
};

/// What the connection knows about a request: whether it arrived as TLS early data
/// (0-RTT), from where, and the connection itself (to drop it on abuse).
#[derive(Clone, Debug)]
pub(crate) struct Arrival {
    pub early: bool,
    pub source: std::net::IpAddr,
    pub connection: Arc<ConnUsage>,
}

pub(crate) async fn handle(
    app: Arc<App>,
    arrival: Arrival,
    request: Request<RequestBody>,
) -> Result<Response<ResponseBody>, Infallible> {
    let (parts, mut body) = request.into_parts();
    if let Some(mut response) = oversized_head(&app, &parts.headers) {
        response.headers_mut().insert(POP_HEADER, app.pop.clone());
        discard_rest(body, parts.version, &response);
        return Ok(response);
    }
    let Some(entry) = app.routes.get(parts.uri.path()).cloned() else {
        app.metrics.reject("unknown_path");
        let mut response = json(StatusCode::NOT_FOUND, r#"{"error":"unknown path"}"#);
        response.headers_mut().insert(POP_HEADER, app.pop.clone());
        discard_rest(body, parts.version, &response);
        return Ok(response);
    };
    let routed = tokio::time::timeout(
        app.request_timeout,
        handle_route(&app, &entry, &arrival, &parts, &mut body),
    )
    .await;
    let mut response = match routed {
        Ok(response) => response,
        Err(_) => {
            // The body had its own deadline, so the time went here (spool, verification):
            // the sender retries and the event id de-duplicates if it was stored after all.
            app.metrics.reject("request_timeout");
            tracing::warn!(route = %entry.name, timeout_ms = app.request_timeout.as_millis() as u64, "request not answered within http.request_timeout: 503");
            let mut response = json(
                StatusCode::SERVICE_UNAVAILABLE,
                r#"{"error":"request deadline passed; retry later"}"#,
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    };
    if response.status() == entry.route.ack_status {
        entry.acknowledged.inc();
    } else {
        app.metrics.request(&entry.name, response.status());
    }
    response.headers_mut().insert(POP_HEADER, app.pop.clone());
    discard_rest(body, parts.version, &response);
    Ok(response)
}

async fn handle_route(
    app: &App,
    entry: &RouteEntry,
    arrival: &Arrival,
    parts: &http::request::Parts,
    body: &mut RequestBody,
) -> Response<ResponseBody> {
    let route = &entry.route;
    #[cfg(feature = "rollback-rehearsal")]
    if route.provider == crate::verify::Provider::Github {
        return json(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"error":"a deliberately broken build (rollback-rehearsal)"}"#,
        );
    }
    if let Some(challenge) = route.challenge
        && let Some(outcome) = challenge.answer(&parts.method, parts.uri.query(), &parts.headers)
    {
        return challenge_answered(app, entry, challenge, outcome);
    }
    // RFC 8470: a proxy in front of us that forwarded early data says so.
    let early = arrival.early
        || parts
            .headers
            .get(EARLY_DATA_HEADER)
            .is_some_and(|v| v == "1");
    let (claim, mut verification) = match before_body(app, entry, arrival, parts, early, body) {
        Ok(admitted) => admitted,
        Err(response) => return response,
    };
    let received_ms = unix_ms();
    // The MACs are taken as the body arrives: a large body costs its work in small
    // steps over the upload, and nothing is left for a second pass.
    let read = read_body(
        body,
        route.max_body,
        app.body_rate,
        &arrival.connection,
        |chunk| verification.update(chunk),
    )
    .await;
    let body = match read {
        Ok(body) => body,
        Err(e) => {
            if matches!(e, BodyError::Fragmented { .. }) {
                // Over HTTP/2 the rest would still be parsed frame by frame.
                arrival.connection.abandon();
            }
            return body_refused(app, entry, e);
        }
    };
    drop(claim);
    let verified = match verification.finish(SystemTime::now()) {
        Ok(verified) => verified,
        Err(e) => return unverified(app, entry, e),
    };

    store(app, entry, parts, early, received_ms, body, verified).await
}

/// Stores a verified delivery (or answers its provider's handshake) under an admission
/// slot, and answers once it is durable.
async fn store(
    app: &App,
    entry: &RouteEntry,
    parts: &http::request::Parts,
    early: bool,
    received_ms: u64,
    body: Bytes,
    verified: Verified,
) -> Response<ResponseBody> {
    let route = &entry.route;
    // The slot covers the append and its fsync: the work the adaptive limit measures.
    let mut permit = match app.admission.acquire(route.priority).await {
        Ok(permit) => permit,
        Err(reason) => return refused(app, entry, &parts.headers, Refusal::Shed(reason)),
    };
    if let Some(answer) = route.verifier.handshake(route.provider, &body, &verified) {
        return handshake_answered(answer);
    }
    let event_id = match event::event_id(
        route.provider,
        route.configured_id.as_ref(),
        &parts.headers,
        &body,
        verified.mac(),
    ) {
        Ok(id) => id,
        Err(e) => return json(StatusCode::BAD_REQUEST, format!(r#"{{"error":"{e}"}}"#)),
    };
    let new_event = NewEvent {
        received_ms,
        early,
        route: Arc::clone(&entry.name),
        headers: event::kept_headers(route.provider, &parts.headers),
        event_id,
        body,
        resend: false,
    };
    let appended = app.spool.append(new_event).await;
    if appended.is_ok() {
        permit.worked();
    }
    answer_append(app, entry, appended, received_ms)
}

/// What is decided before a byte of the body is read: method, 0-RTT policy, declared
/// size, the signature headers, shedding (which costs the sender one round trip and us
/// nothing here) and room in the body budget. A request let in holds a claim on a slot
/// and room for its body while its body is read, and its verification in progress.
#[allow(
    clippy::result_large_err,
    reason = "the answer is moved once, to the caller that sends it: boxing would cost a refusal an allocation"
)]
fn before_body(
    app: &App,
    entry: &RouteEntry,
    arrival: &Arrival,
    parts: &http::request::Parts,
    early: bool,
    body: &RequestBody,
) -> Result<(BodyClaim, Verification), Response<ResponseBody>> {
    let route = &entry.route;
    if parts.method != Method::POST {
        let mut response = json(
            StatusCode::METHOD_NOT_ALLOWED,
            r#"{"error":"only POST is accepted"}"#,
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Err(response);
    }
    if early && let Some(response) = guard_early(app, entry) {
        return Err(response);
    }
    if body.size_hint().lower() > route.max_body {
        return Err(too_large(route.max_body));
    }
    if app.spool.queue_full() {
        app.admission
            .count_shed(route.priority, ShedReason::SpoolQueue);
        return Err(refused(
            app,
            entry,
            &parts.headers,
            Refusal::Shed(ShedReason::SpoolQueue),
        ));
    }
    let verification = route
        .verifier
        .start(&parts.uri, &parts.headers)
        .map_err(|e| unverified(app, entry, e))?;
    // The most the body can be: its declared length, else the route's limit.
    let most = body
        .size_hint()
        .upper()
        .unwrap_or(route.max_body)
        .min(route.max_body);
    let claim = app
        .admission
        .check(
            &entry.name,
            route.priority,
            route.rate_limit,
            arrival.source,
            most,
        )
        .map_err(|refusal| refused(app, entry, &parts.headers, refusal))?;
    Ok((claim, verification))
}

/// 200 with a provider's endpoint handshake answered, or 400 for a value that is not
/// echoed. Anyone can send one (it is unsigned), so it is logged at most once a second.
fn challenge_answered(
    app: &App,
    entry: &RouteEntry,
    challenge: Challenge,
    outcome: Result<ChallengeAnswer, ChallengeError>,
) -> Response<ResponseBody> {
    let label = outcome.as_ref().map_or_else(|e| e.reason(), |_| "answered");
    app.metrics
        .challenge(&entry.name, challenge.as_str(), label);
    if app.challenge_log.allow() {
        tracing::info!(route = %entry.name, challenge = challenge.as_str(), outcome = label, "endpoint handshake (logged at most once a second)");
    }
    match outcome {
        Ok(answer) => handshake_answered(answer),
        Err(e) => json(StatusCode::BAD_REQUEST, format!(r#"{{"error":"{e}"}}"#)),
    }
}

/// A provider's handshake answered as it asks; nothing is stored.
fn handshake_answered(answer: ChallengeAnswer) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(answer.body));
    *response.status_mut() = answer.status;
    let headers = response.headers_mut();
    if let Some(content_type) = answer.content_type {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// 401: the signature headers are missing or malformed, or no signature matches.
fn unverified(app: &App, entry: &RouteEntry, error: VerifyError) -> Response<ResponseBody> {
    app.metrics.verify_failure(&entry.name, error.reason());
    if app.verify_log.allow() {
        tracing::info!(route = %entry.name, reason = error.reason(), "signature verification failed: 401 (logged at most once a second)");
    }
    json(
        StatusCode::UNAUTHORIZED,
        format!(r#"{{"error":"{error}"}}"#),
    )
}

/// The answer to a body that was too large, too slow or broken.
fn body_refused(app: &App, entry: &RouteEntry, error: BodyError) -> Response<ResponseBody> {
    match error {
        BodyError::TooLarge => too_large(entry.route.max_body),
        BodyError::TooSlow { received, elapsed } => {
            app.metrics.reject("slow_body");
            if app.slow_body_log.allow() {
                tracing::info!(route = %entry.name, received, elapsed_ms = elapsed.as_millis() as u64, "request body below the minimum rate or past its deadline: 408 (logged at most once a second)");
            }
            closing(json(
                StatusCode::REQUEST_TIMEOUT,
                r#"{"error":"request body too slow"}"#,
            ))
        }
        BodyError::Fragmented { pieces } => {
            app.metrics.reject("fragmented_body");
            if app.slow_body_log.allow() {
                tracing::info!(route = %entry.name, pieces, "request body sent in pieces of a few bytes each: 400 and closed (logged at most once a second)");
            }
            let mut response = closing(json(
                StatusCode::BAD_REQUEST,
                r#"{"error":"request body sent in too many small pieces"}"#,
            ));
            response.extensions_mut().insert(RestUnwanted);
            response
        }
        BodyError::Broken(e) => {
            tracing::debug!(route = %entry.name, error = %e, "request body not received whole");
            json(
                StatusCode::BAD_REQUEST,
                r#"{"error":"request body was not received whole"}"#,
            )
        }
    }
}

/// The acknowledgement once the spool has the event durable (or already had it), or 503.
fn answer_append(
    app: &App,
    entry: &RouteEntry,
    appended: Result<Appended, AppendError>,
    received_ms: u64,
) -> Response<ResponseBody> {
    let ack_status = entry.route.ack_status;
    match appended {
        Ok(Appended::Stored { seq }) => ack(ack_status, seq, false),
        Ok(Appended::Duplicate { seq }) => {
            app.metrics.duplicate(&entry.name);
            ack(ack_status, seq, true)
        }
        // Answered as a duplicate: a genuine sender is never punished, and an attacker
        // learns nothing it did not send.
        Ok(Appended::Replay { seq }) => {
            app.metrics.replay(&entry.name);
            ack(ack_status, seq, true)
        }
        Err(AppendError::TooLarge) => {
            app.metrics.reject("header_too_large");
            json(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                r#"{"error":"request head too large to store"}"#,
            )
        }
        Err(e) => {
            // Full and disk-full are logged once by the spool, not per request. The
            // sender is told what it can act on; the log keeps the cause.
            if !matches!(e, AppendError::Full | AppendError::DiskFull) {
                tracing::warn!(route = %entry.name, error = %e, "spool refused an event");
            }
            let said = match e {
                AppendError::Full => "spool full",
                AppendError::DiskFull => "spool disk full",
                _ => "spool unavailable",
            };
            let mut response = json(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(r#"{{"error":"{said}; retry later"}}"#),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after(received_ms));
            response
        }
    }
}

/// 431 when the head is over `http.max_header_bytes` (counted as HTTP/2 does: name +
/// value + 32 per field) or `http.max_headers`.
fn oversized_head(app: &App, headers: &http::HeaderMap) -> Option<Response<ResponseBody>> {
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum();
    if bytes <= app.max_header_bytes && headers.len() <= app.max_headers {
        return None;
    }
    app.metrics.reject("header_too_large");
    if app.head_log.allow() {
        tracing::info!(
            bytes,
            fields = headers.len(),
            "request head over http.max_header_bytes/max_headers: 431 (logged at most once a second)"
        );
    }
    Some(json(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        r#"{"error":"request head too large"}"#,
    ))
}

/// 503 (shed) or 429 (rate limited), each with a jittered `Retry-After`, a JSON body
/// that says why, and a throttled log line (the metric is counted by admission).
fn refused(
    app: &App,
    entry: &RouteEntry,
    headers: &http::HeaderMap,
    refusal: Refusal,
) -> Response<ResponseBody> {
    let (status, reason, retry_after) = match refusal {
        Refusal::Shed(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            reason.as_str(),
            retry_after(unix_ms()),
        ),
        Refusal::RateLimited(wait) => (
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            HeaderValue::from(wait.as_secs().max(1)),
        ),
    };
    let claimed_id = crate::event::claimed_id(
        entry.route.provider,
        entry.route.configured_id.as_ref(),
        headers,
    );
    if let Some(id) = &claimed_id {
        app.admission.record_shed(ShedEntry {
            time_ms: unix_ms(),
            pop: app.pop.to_str().unwrap_or_default().to_owned(),
            route: entry.name.to_string(),
            provider: entry.route.provider.as_str().to_owned(),
            claimed_id: id.clone(),
            reason: reason.to_owned(),
            status: status.as_u16(),
            verified: false,
        });
    }
    if app.shed_log.allow() {
        tracing::warn!(route = %entry.name, priority = entry.route.priority.as_str(), reason, claimed_id, status = status.as_u16(), "request refused by admission control (logged at most once a second)");
    }
    let mut response = json(
        status,
        format!(
            r#"{{"error":"{}","reason":"{reason}","priority":"{}"}}"#,
            if status == StatusCode::TOO_MANY_REQUESTS {
                "too many requests from this source; retry later"
            } else {
                "overloaded; retry later"
            },
            entry.route.priority.as_str()
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, retry_after);
    response.extensions_mut().insert(RestUnwanted);
    response
}

/// Marks an answer after which the rest of the body is not worth reading: admission
/// control's (503, 429) and a body sent in tiny pieces (see [`discard_rest`]).
#[derive(Clone, Copy)]
struct RestUnwanted;

/// Applies the route's 0-RTT policy to an early request: `Some` answer ends it (425).
fn guard_early(app: &App, entry: &RouteEntry) -> Option<Response<ResponseBody>> {
    let outcome = match entry.route.early_data {
        EarlyDataPolicy::Accept => "accepted",
        EarlyDataPolicy::Reject => "too_early",
    };
    app.metrics.early_request(outcome);
    if entry.route.early_data == EarlyDataPolicy::Accept {
        return None;
    }
    app.metrics.reject("too_early");
    if app.too_early_log.allow() {
        tracing::info!(route = %entry.name, "early (0-RTT) request on a route that rejects it: 425 (logged at most once a second)");
    }
    // Close: the sender retries on a fresh connection without early data.
    Some(closing(json(
        StatusCode::TOO_EARLY,
        r#"{"error":"sent as TLS early data; retry after the handshake"}"#,
    )))
}

enum BodyError {
    TooLarge,
    TooSlow {
        received: u64,
        elapsed: std::time::Duration,
    },
    /// Many pieces of a few bytes each (1-byte HTTP/2 DATA frames or HTTP/1.1 chunks):
    /// each costs the edge as much as a full one.
    Fragmented {
        pieces: u64,
    },
    Broken(hyper::Error),
}

/// Collects the body up to `limit` bytes, as long as it keeps to the minimum rate and
/// deadline, handing each chunk to `observe` as it comes, and telling `connection` while
/// the body trickles. What is left unread when it stops is the caller's to discard.
async fn read_body(
    body: &mut RequestBody,
    limit: u64,
    rate: BodyRate,
    connection: &ConnUsage,
    mut observe: impl FnMut(&[u8]),
) -> Result<Bytes, BodyError> {
    let mut trickle = Trickle {
        connection,
        on: false,
    };
    let started = tokio::time::Instant::now();
    // Sized once from the declared length: growing by doubling would hold up to twice
    // the body (and copy it) while it arrives.
    let declared = body.size_hint().lower().min(limit);
    let mut collected = BytesMut::with_capacity(declared as usize);
    let mut pieces = 0u64;
    loop {
        let received = collected.len() as u64;
        let too_slow = || BodyError::TooSlow {
            received,
            elapsed: started.elapsed(),
        };
        let next =
            match tokio::time::timeout_at(started + rate.next_deadline(received), body.frame())
                .await
            {
                Ok(Some(frame)) => frame.map_err(BodyError::Broken)?,
                Ok(None) => break,
                Err(_) => return Err(too_slow()),
            };
        let Ok(data) = next.into_data() else { continue };
        if received + data.len() as u64 > limit {
            return Err(BodyError::TooLarge);
        }
        pieces += 1;
        if pieces > FREE_PIECES && received + (data.len() as u64) < pieces * MIN_MEAN_PIECE {
            return Err(BodyError::Fragmented { pieces });
        }
        observe(&data);
        collected.extend_from_slice(&data);
        trickle.set(rate.trickles(started.elapsed(), collected.len() as u64));
        if rate.too_slow(started.elapsed(), collected.len() as u64) {
            return Err(BodyError::TooSlow {
                received: collected.len() as u64,
                elapsed: started.elapsed(),
            });
        }
    }
    Ok(collected.freeze())
}

/// A body's trickling state as its connection sees it, reset when the read ends.
struct Trickle<'c> {
    connection: &'c ConnUsage,
    on: bool,
}

impl Trickle<'_> {
    fn set(&mut self, on: bool) {
        if on != self.on {
            self.on = on;
            self.connection.trickling(on);
        }
    }
}

impl Drop for Trickle<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// Reads and throws away what the client still sends after its answer was decided, in
/// the background and bounded in bytes and time, so its stream (HTTP/2) or connection
/// (HTTP/1.1) ends normally and the client reads the answer. Not worth it for a body
/// declared larger than the bound (the client sees a reset), after a 408 (the sender is
/// too slow: reading on would hold its connection for it), when the HTTP/1.1 answer
/// closes the connection anyway, or over HTTP/2 after a shed answer or a body in tiny
/// pieces: the stream ends with RST_STREAM(NO_ERROR) after the answer (RFC 9113, 8.1)
/// rather than asking the sender for the rest of a body that will not be kept, because
/// under overload those bytes, decrypted and framed, cost as much as the work admitted.
fn discard_rest(mut body: RequestBody, version: http::Version, answer: &Response<ResponseBody>) {
    let unwanted_h2 =
        version == http::Version::HTTP_2 && answer.extensions().get::<RestUnwanted>().is_some();
    let closing = version != http::Version::HTTP_2
        && answer
            .headers()
            .get(header::CONNECTION)
            .is_some_and(|v| v == "close");
    if body.is_end_stream()
        || unwanted_h2
        || body.size_hint().lower() > DISCARD_BYTES
        || answer.status() == StatusCode::REQUEST_TIMEOUT
        || closing
    {
        return;
    }
    tokio::spawn(async move {
        let mut discarded = 0u64;
        let discard = async {
            while let Some(Ok(frame)) = body.frame().await {
                discarded += frame.data_ref().map_or(0, |d| d.len() as u64);
                if discarded > DISCARD_BYTES {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(DISCARD_TIME, discard).await;
    });
}

fn ack(status: StatusCode, seq: u64, duplicate: bool) -> Response<ResponseBody> {
    json(
        status,
        format!(r#"{{"status":"stored","seq":{seq},"duplicate":{duplicate}}}"#),
    )
}

fn too_large(limit: u64) -> Response<ResponseBody> {
    json(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(r#"{{"error":"body larger than {limit} bytes"}}"#),
    )
}

/// `response` with `Connection: close`: the connection ends after it.
fn closing(mut response: Response<ResponseBody>) -> Response<ResponseBody> {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A JSON answer. `body` is taken as it is (a static text or a formatted string), not
/// copied.
pub(crate) fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// 5–14 s, spread by the receive time so refused senders do not all return at once.
fn retry_after(received_ms: u64) -> HeaderValue {
    HeaderValue::from(5 + received_ms % 10)
}

const POP_HEADER: &str = "edge-pop";
/// RFC 8470 section 5.1.
const EARLY_DATA_HEADER: &str = "early-data";
/// The most of an unwanted body read and thrown away after an early answer.
const DISCARD_BYTES: u64 = 8 << 20;
const DISCARD_TIME: std::time::Duration = std::time::Duration::from_secs(5);
/// Body pieces a request may send in any size; past them, pieces must average
/// [`MIN_MEAN_PIECE`] bytes (the h2 crate's own threshold for a DATA frame's overhead).
const FREE_PIECES: u64 = 64;
const MIN_MEAN_PIECE: u64 = 256;
