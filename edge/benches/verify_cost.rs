//! What one verification costs per scheme family, on the same 1 KiB body: HMAC-SHA256
//! (GitHub), Ed25519 (Discord) and ECDSA P-256 (SendGrid), each a route with one key and
//! a request with one valid signature. Prints the median of alternating rounds in µs per
//! request and each against HMAC's.
//!
//!     cargo bench -p edge --bench verify_cost   (ROUNDS=5, ITERATIONS=4000)
#![allow(
    clippy::expect_used,
    reason = "bench code: a failed step stops the run where it says"
)]

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use edge::verify::{Provider, Scheme, Verifier, preset};
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::Sha256;

fn main() {
    let rounds = env_usize("ROUNDS", 5);
    let iterations = env_usize("ITERATIONS", 4000);
    let body = vec![b'x'; 1024];
    let now = SystemTime::now();
    let cases = [
        hmac_case(&body),
        ed25519_case(&body, now),
        ecdsa_case(&body, now),
    ];
    let mut samples = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        for (case, samples) in cases.iter().zip(&mut samples) {
            samples.push(time(case, &body, now, iterations));
        }
    }
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    println!("verification of a 1 KiB body, one key, median of {rounds} rounds x {iterations}");
    for (case, median) in cases.iter().zip(&medians) {
        println!(
            "{:<26} {:>7.2} µs/request  {:>5.1}x HMAC",
            case.name,
            median,
            median / medians[0]
        );
    }
}

struct Case {
    name: &'static str,
    verifier: Verifier,
    headers: HeaderMap,
}

fn hmac_case(body: &[u8]) -> Case {
    let mut mac = Hmac::<Sha256>::new_from_slice(b"bench-secret").expect("any key length");
    mac.update(body);
    let signature = format!("sha256={}", const_hex::encode(mac.finalize().into_bytes()));
    Case {
        name: "HMAC-SHA256 (github)",
        verifier: Verifier::new(
            Scheme::Hmac(preset(Provider::Github, TOLERANCE).expect("github is a preset")),
            vec![b"bench-secret".to_vec()],
        ),
        headers: headers(&[("x-hub-signature-256", &signature)]),
    }
}

fn ed25519_case(body: &[u8], now: SystemTime) -> Case {
    let pair = Ed25519KeyPair::from_seed_unchecked(&[7; 32]).expect("a 32-byte seed");
    let timestamp = unix(now).to_string();
    let signature = pair.sign(&[timestamp.as_bytes(), body].concat());
    Case {
        name: "Ed25519 (discord)",
        verifier: Verifier::new(
            Scheme::Discord {
                tolerance: TOLERANCE,
            },
            vec![pair.public_key().as_ref().to_vec()],
        ),
        headers: headers(&[
            (
                "x-signature-ed25519",
                &const_hex::encode(signature.as_ref()),
            ),
            ("x-signature-timestamp", &timestamp),
        ]),
    }
}

fn ecdsa_case(body: &[u8], now: SystemTime) -> Case {
    let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING).expect("a key pair");
    let timestamp = unix(now).to_string();
    let signature = pair
        .sign(&SystemRandom::new(), &[timestamp.as_bytes(), body].concat())
        .expect("signing");
    let public = pair.public_key().as_der().expect("DER public key");
    Case {
        name: "ECDSA P-256 (sendgrid)",
        verifier: Verifier::new(
            Scheme::Sendgrid {
                tolerance: TOLERANCE,
            },
            vec![public.as_ref().to_vec()],
        ),
        headers: headers(&[
            (
                "x-twilio-email-event-webhook-signature",
                &STANDARD.encode(signature.as_ref()),
            ),
            ("x-twilio-email-event-webhook-timestamp", &timestamp),
        ]),
    }
}

/// µs per verification over `iterations`; each must succeed.
fn time(case: &Case, body: &[u8], now: SystemTime, iterations: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..iterations {
        let verified = case
            .verifier
            .verify(black_box(&case.headers), black_box(body), now);
        assert!(verified.is_ok(), "{}: {verified:?}", case.name);
    }
    started.elapsed().as_secs_f64() * 1e6 / iterations as f64
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(name, value)| {
            (
                HeaderName::from_static(name),
                HeaderValue::from_str(value).expect("a header value"),
            )
        })
        .collect()
}

fn unix(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const TOLERANCE: Duration = Duration::from_secs(300);
