//! TLS server configuration: rustls with TLS 1.3 and 1.2 (by `min_version`), ALPN h2 and
//! http/1.1, a PEM identity or a generated self-signed one, optional per-SNI
//! certificates, stateful or fleet-shared session tickets (`tickets`), guarded 0-RTT,
//! and the connection stream that lets early data through (`stream`).

mod metrics;
pub(crate) mod stream;
pub(crate) mod tickets;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, SupportedProtocolVersion};

use crate::config::{Identity, SessionTickets, TlsSettings, TlsVersion};
pub(crate) use metrics::TlsMetrics;
use tickets::SharedTickets;

/// The rustls config, and the shared ticket keys when they are in use (to reload them).
/// `metrics` get the served certificates' expiry.
pub(crate) fn server_config(
    settings: &TlsSettings,
    metrics: &TlsMetrics,
) -> anyhow::Result<(Arc<ServerConfig>, Option<Arc<SharedTickets>>)> {
    let mut config = identity_and_policy(settings, metrics)?;
    // Stateful sessions are taken out of the cache on use: every ticket resumes (and
    // carries early data) once, which is rustls' anti-replay for 0-RTT.
    config.session_storage = ServerSessionMemoryCache::new(settings.session_cache);
    let shared = match &settings.session_tickets {
        SessionTickets::Stateful => None,
        SessionTickets::Shared { key_file, lifetime } => {
            let lifetime = u32::try_from(lifetime.as_secs()).unwrap_or(u32::MAX);
            let tickets = Arc::new(SharedTickets::load(key_file, lifetime, metrics.clone())?);
            config.ticketer = Arc::clone(&tickets) as Arc<dyn rustls::server::ProducesTickets>;
            Some(tickets)
        }
    };
    Ok((Arc::new(config), shared))
}

/// A new config from reloaded settings (certificates re-read from disk, SNI names,
/// versions, 0-RTT) that keeps the running one's session cache and ticket keys, so
/// sessions made before the reload still resume.
pub(crate) fn reloaded_config(
    settings: &TlsSettings,
    running: &ServerConfig,
    metrics: &TlsMetrics,
) -> anyhow::Result<Arc<ServerConfig>> {
    let mut config = identity_and_policy(settings, metrics)?;
    config.session_storage = Arc::clone(&running.session_storage);
    config.ticketer = Arc::clone(&running.ticketer);
    Ok(Arc::new(config))
}

/// Certificates, versions, ALPN and the 0-RTT policy: everything but session resumption.
/// The certificates' expiry goes to `metrics` once all of it loaded.
fn identity_and_policy(
    settings: &TlsSettings,
    metrics: &TlsMetrics,
) -> anyhow::Result<ServerConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let default = match &settings.identity {
        Identity::Files { cert, key } => {
            load_identity(&provider, cert, key).context("tls.cert/tls.key")?
        }
        Identity::SelfSigned => self_signed(&provider)?,
    };
    let mut by_name = HashMap::new();
    for (i, sni) in settings.sni.iter().enumerate() {
        let key = load_identity(&provider, &sni.cert, &sni.key)
            .with_context(|| format!("tls.sni[{i}]"))?;
        by_name.insert(sni.server_name.clone(), key);
    }
    let expiry: Vec<(String, i64)> = std::iter::once((DEFAULT_CERTIFICATE, &default))
        .chain(by_name.iter().map(|(name, key)| (name.as_str(), key)))
        .filter_map(|(name, key)| Some((name.to_owned(), not_after(name, key)?)))
        .collect();
    let versions: &[&SupportedProtocolVersion] = match settings.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .context("tls protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver { default, by_name }));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if let Some(max_bytes) = settings.early_data {
        config.max_early_data_size = max_bytes;
        // The answer to an early request leaves before the client's Finished: the point
        // of 0-RTT for a sender waiting on its ack.
        config.send_half_rtt_data = true;
    }
    metrics.served_certificates(&expiry);
    Ok(config)
}

/// The end-entity certificate's notAfter as a Unix time. rustls never parses it, so a
/// certificate our parser finds odd is served anyway, without an expiry metric.
fn not_after(name: &str, key: &CertifiedKey) -> Option<i64> {
    use x509_cert::der::Decode;
    let parsed = key
        .cert
        .first()
        .map(|der| x509_cert::Certificate::from_der(der.as_ref()));
    match parsed {
        Some(Ok(cert)) => {
            let not_after = cert.tbs_certificate.validity.not_after.to_unix_duration();
            Some(i64::try_from(not_after.as_secs()).unwrap_or(i64::MAX))
        }
        Some(Err(e)) => {
            tracing::warn!(certificate = name, error = %e, "cannot read the certificate's notAfter: no expiry metric for it");
            None
        }
        None => None,
    }
}

/// Picks the certificate for the client's SNI name, else the default identity.
#[derive(Debug)]
struct SniResolver {
    default: Arc<CertifiedKey>,
    by_name: HashMap<String, Arc<CertifiedKey>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let named = hello
            .server_name()
            .and_then(|name| self.by_name.get(&name.to_ascii_lowercase()));
        Some(Arc::clone(named.unwrap_or(&self.default)))
    }
}

fn load_identity(
    provider: &rustls::crypto::CryptoProvider,
    cert_path: &Path,
    key_path: &Path,
) -> anyhow::Result<Arc<CertifiedKey>> {
    let cert_pem =
        std::fs::read(cert_path).with_context(|| format!("reading {}", cert_path.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing certificates in {}", cert_path.display()))?;
    if chain.is_empty() {
        bail!("{}: no certificates found", cert_path.display());
    }
    let key_pem =
        std::fs::read(key_path).with_context(|| format!("reading {}", key_path.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .with_context(|| format!("{}: no private key found", key_path.display()))?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .with_context(|| format!("{}: unsupported private key", key_path.display()))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing_key)))
}

fn self_signed(provider: &rustls::crypto::CryptoProvider) -> anyhow::Result<Arc<CertifiedKey>> {
    let names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let generated = rcgen::generate_simple_self_signed(names)
        .context("generating a self-signed certificate")?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(generated.key_pair.serialize_der().into());
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .context("loading the generated key")?;
    tracing::warn!(
        "serving a generated self-signed certificate (tls.self_signed): for a dev box only"
    );
    Ok(Arc::new(CertifiedKey::new(
        vec![generated.cert.der().clone()],
        signing_key,
    )))
}

/// The `certificate` label of the identity served when no SNI name matches.
const DEFAULT_CERTIFICATE: &str = "default";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_after_is_the_certificates_own() {
        let mut params = rcgen::CertificateParams::new(vec!["hooks.example.net".into()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2031, 5, 17);
        let key_pair = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key_pair).unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key_pair.serialize_der().into());
        let certified = CertifiedKey::new(
            vec![cert.der().clone()],
            provider.key_provider.load_private_key(key).unwrap(),
        );
        // 2031-05-17T00:00:00Z
        assert_eq!(not_after("default", &certified), Some(1_936_742_400));
    }

    #[test]
    fn a_certificate_that_does_not_parse_has_no_expiry() {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let key_pair = rcgen::KeyPair::generate().unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key_pair.serialize_der().into());
        let certified = CertifiedKey::new(
            vec![rustls::pki_types::CertificateDer::from(vec![
                0x30, 0x03, 0x02, 0x01, 0x01,
            ])],
            provider.key_provider.load_private_key(key).unwrap(),
        );
        assert_eq!(not_after("default", &certified), None);
    }
}
