//! Public keys as operators paste them: a PEM block (`-----BEGIN PUBLIC KEY-----`, an
//! X.509 SubjectPublicKeyInfo) beside each provider's own spelling (Discord's hex,
//! Standard Webhooks' `whpk_`, SendGrid's bare base64).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

/// The DER inside a `PUBLIC KEY` PEM block; `None` when `key` is not one.
pub(super) fn pem_der(key: &str) -> Option<Vec<u8>> {
    let key = key.trim();
    let body = key
        .strip_prefix(PEM_BEGIN)?
        .strip_suffix(PEM_END)?
        .split_whitespace()
        .collect::<String>();
    BASE64.decode(body).ok()
}

/// The raw 32-byte Ed25519 key of a PEM `PUBLIC KEY` (RFC 8410's SPKI).
pub(super) fn ed25519_from_pem(key: &str) -> Option<Vec<u8>> {
    pem_der(key)?
        .strip_prefix(ED25519_SPKI_PREFIX.as_slice())
        .filter(|raw| raw.len() == 32)
        .map(<[u8]>::to_vec)
}

const PEM_BEGIN: &str = "-----BEGIN PUBLIC KEY-----";
const PEM_END: &str = "-----END PUBLIC KEY-----";
/// `SEQUENCE { SEQUENCE { OID 1.3.101.112 } BIT STRING (32 bytes) }` up to the key.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8410, section 10.1.
    const RFC_8410: &str = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";

    #[test]
    fn rfc_8410s_example_key_reads_as_its_raw_bytes() {
        assert_eq!(
            ed25519_from_pem(RFC_8410).map(const_hex::encode).as_deref(),
            Some("19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1")
        );
    }

    #[test]
    fn other_text_is_not_a_pem_key() {
        assert_eq!(pem_der("MCowBQYDK2VwAyEA"), None);
        assert_eq!(
            pem_der("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"),
            None
        );
        let p256 = RFC_8410.replace("MCowBQYDK2Vw", "MCowBQYDK2Vx");
        assert_eq!(ed25519_from_pem(&p256), None, "another algorithm's OID");
    }
}
