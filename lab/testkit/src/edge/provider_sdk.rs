//! Webhooks signed by the providers' own libraries (PyPI `standardwebhooks`, `slack_sdk`,
//! `stripe`, `twilio`, PyNaCl for Discord's Ed25519, `sendgrid`'s, `paddle-python-sdk`'s
//! and `mailgun`'s verifiers, pinned in `lab/setup.sh`'s venv), so that the edge's
//! schemes are tested against the providers' code, not only against our reading of
//! their docs.

use std::io::Write;
use std::process::{Command, Stdio};

/// The headers `provider`'s library sends with `body` signed by `secret` at `timestamp`
/// (Unix seconds), under delivery id `id` where the scheme has one. `provider` is
/// `standard`, `slack`, `stripe`, `discord` (PyNaCl; `secret` is the Ed25519 seed in
/// hex, and `discord-key` gives its public key as the header `public-key`) or `sendgrid`
/// (`secret` is the P-256 private scalar in hex; `sendgrid-key` gives the verification
/// key), `paddle`, or `mailgun` (its signature goes in the body: the one header printed,
/// `signed-body`, is the body to send; `id` is the delivery's token).
pub fn signed_headers(
    provider: &str,
    secret: &str,
    body: &str,
    timestamp: u64,
    id: &str,
) -> Vec<(String, String)> {
    sign(serde_json::json!({
        "provider": provider,
        "secret": secret,
        "body": body,
        "timestamp": timestamp,
        "id": id,
    }))
}

/// Twilio's `RequestValidator` (PyPI `twilio`) signing a POST of `body` to `url` with the
/// auth token `secret`: a form is signed with its parameters; a JSON body (starting
/// with `{`) through `bodySHA256` in the URL's query, so the URL to post to comes back
/// with the `X-Twilio-Signature` value, as `(url, signature)`.
pub fn twilio_signed(secret: &str, url: &str, body: &str) -> (String, String) {
    let printed = sign(serde_json::json!({
        "provider": "twilio",
        "secret": secret,
        "body": body,
        "url": url,
    }));
    let value = |name: &str| {
        printed
            .iter()
            .find(|(printed, _)| printed == name)
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("{SIGNER} printed no {name} for twilio"))
    };
    (value("url"), value("x-twilio-signature"))
}

/// The public key a route holds for `provider`'s signing key `secret` (`discord` or
/// `sendgrid`), as the provider's portal shows it.
pub fn public_key(provider: &str, secret: &str) -> String {
    signed_headers(&format!("{provider}-key"), secret, "", 0, "")
        .into_iter()
        .find(|(name, _)| name == "public-key")
        .map(|(_, key)| key)
        .unwrap_or_else(|| panic!("{SIGNER} gave no public key for {provider}"))
}

/// Runs the signer on `request`; the headers (and other values) it prints.
fn sign(request: serde_json::Value) -> Vec<(String, String)> {
    let provider = request["provider"].as_str().unwrap_or_default().to_owned();
    let mut child = Command::new(PYTHON)
        .arg(SIGNER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{PYTHON}: {e} (lab/setup.sh installs the providers' SDKs)"));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(request.to_string().as_bytes())
        .expect("writing to the signer");
    let output = child.wait_with_output().expect("the signer runs");
    assert!(output.status.success(), "{SIGNER} failed for {provider}");
    let headers: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&output.stdout).expect("the signer prints a JSON object");
    headers
        .into_iter()
        .map(|(name, value)| (name, value.as_str().unwrap_or_default().to_owned()))
        .collect()
}

const PYTHON: &str = "/var/cache/webhook-edge-lab/provider-sdks/bin/python";
const SIGNER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sign_with_sdk.py");
