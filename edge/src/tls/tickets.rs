//! Fleet-shared session tickets: every PoP holds the same key file, so a session started
//! at one PoP resumes (1-RTT) at any other. The first key encrypts, every key decrypts,
//! so rotation is: prepend a new key, reload everywhere, later drop the old one. rustls
//! gives no 0-RTT on tickets like these (only stateful, single-use sessions allow it).
//!
//! Key file: one base64 key of 32 bytes per line (`openssl rand -base64 32`), `#`
//! comments. A ticket is `key id (4) || nonce (12) || AES-256-GCM(session)`, the key id
//! being the first four bytes of SHA-256(key).
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};

use super::metrics::TlsMetrics;

pub(crate) struct SharedTickets {
    path: PathBuf,
    lifetime_secs: u32,
    keys: RwLock<Vec<TicketKey>>,
    loaded_mtime: Mutex<Option<SystemTime>>,
    random: SystemRandom,
    metrics: TlsMetrics,
}

struct TicketKey {
    id: [u8; 4],
    key: LessSafeKey,
}

impl SharedTickets {
    /// Loads the key file; `metrics` learn when it last changed, at each load.
    pub(crate) fn load(
        path: &Path,
        lifetime_secs: u32,
        metrics: TlsMetrics,
    ) -> anyhow::Result<SharedTickets> {
        let tickets = SharedTickets {
            path: path.to_owned(),
            lifetime_secs,
            keys: RwLock::new(Vec::new()),
            loaded_mtime: Mutex::new(None),
            random: SystemRandom::new(),
            metrics,
        };
        tickets.reload()?;
        Ok(tickets)
    }

    /// Re-reads the key file; on any error the keys in use stay as they were.
    pub(crate) fn reload(&self) -> anyhow::Result<usize> {
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let text = std::fs::read_to_string(&self.path)
            .with_context(|| format!("tls.session_tickets.key_file {}", self.path.display()))?;
        let raw =
            parse_key_file(&text).map_err(|e| anyhow::anyhow!("{}: {e}", self.path.display()))?;
        let keys = raw
            .iter()
            .map(|bytes| {
                #[expect(clippy::expect_used, reason = "parse_key_file yields 32-byte keys")]
                let key = LessSafeKey::new(
                    UnboundKey::new(&AES_256_GCM, bytes).expect("32-byte AES-256 key"),
                );
                TicketKey {
                    id: key_id(bytes),
                    key,
                }
            })
            .collect::<Vec<_>>();
        let count = keys.len();
        *self.keys.write() = keys;
        *self.loaded_mtime.lock() = mtime;
        // Every rotation step rewrites the file: its mtime is when the newest key came.
        if let Some(changed) = mtime.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
            self.metrics.ticket_keys_changed(changed.as_secs() as i64);
        }
        Ok(count)
    }

    /// Reloads when the file's modification time changed since the last load.
    pub(crate) fn reload_if_changed(&self) -> anyhow::Result<Option<usize>> {
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        if mtime == *self.loaded_mtime.lock() {
            return Ok(None);
        }
        self.reload().map(Some)
    }
}

impl std::fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTickets")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl rustls::server::ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.lifetime_secs
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.keys.read();
        let current = keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.random.fill(&mut nonce).ok()?;
        let mut sealed = plain.to_vec();
        current
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(current.id),
                &mut sealed,
            )
            .ok()?;
        let mut ticket = Vec::with_capacity(4 + NONCE_LEN + sealed.len());
        ticket.extend_from_slice(&current.id);
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let (id, rest) = cipher.split_at_checked(4)?;
        let (nonce, sealed) = rest.split_at_checked(NONCE_LEN)?;
        let keys = self.keys.read();
        let key = keys.iter().find(|k| k.id == id)?;
        let mut buffer = sealed.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let plain = key
            .key
            .open_in_place(nonce, Aad::from(key.id), &mut buffer)
            .ok()?;
        Some(plain.to_vec())
    }
}

/// The keys of a key file, first (the encrypting one) first.
pub(crate) fn parse_key_file(text: &str) -> Result<Vec<[u8; 32]>, String> {
    let mut keys = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bytes = BASE64
            .decode(line)
            .map_err(|_| format!("line {}: not base64", number + 1))?;
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| format!("line {}: a key must be 32 bytes", number + 1))?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err("no keys".into());
    }
    Ok(keys)
}

fn key_id(key: &[u8; 32]) -> [u8; 4] {
    let digest = Sha256::digest(key);
    [digest[0], digest[1], digest[2], digest[3]]
}

#[cfg(test)]
mod tests {
    use rustls::server::ProducesTickets;

    use super::*;

    fn key_line(byte: u8) -> String {
        BASE64.encode([byte; 32])
    }

    fn tickets(lines: &[String]) -> (tempfile::NamedTempFile, SharedTickets) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), lines.join("\n")).unwrap();
        let t = SharedTickets::load(file.path(), 3600, TlsMetrics::default()).unwrap();
        (file, t)
    }

    #[test]
    fn key_file_errors_name_the_line() {
        assert_eq!(parse_key_file("# only a comment\n"), Err("no keys".into()));
        assert_eq!(
            parse_key_file(&format!("{}\n***", key_line(1))),
            Err("line 2: not base64".into())
        );
        assert_eq!(
            parse_key_file(&BASE64.encode([0u8; 16])),
            Err("line 1: a key must be 32 bytes".into())
        );
        assert_eq!(
            parse_key_file(&format!(
                "# rotated daily\n{}\n{}\n",
                key_line(1),
                key_line(2)
            ))
            .unwrap()
            .len(),
            2
        );
    }

    #[test]
    fn another_pop_with_the_same_file_decrypts() {
        let (_f1, a) = tickets(&[key_line(7)]);
        let (_f2, b) = tickets(&[key_line(7)]);
        let ticket = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&ticket).as_deref(), Some(&b"session state"[..]));
        let mut tampered = ticket.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(b.decrypt(&tampered), None);
        assert_eq!(b.decrypt(&ticket[..10]), None);
        let (_f3, other) = tickets(&[key_line(8)]);
        assert_eq!(
            other.decrypt(&ticket),
            None,
            "another fleet's key cannot read it"
        );
    }

    #[test]
    fn rotation_first_encrypts_all_decrypt_and_reload_swaps() {
        let (file, t) = tickets(&[key_line(1)]);
        let old = t.encrypt(b"old").unwrap();
        std::fs::write(file.path(), format!("{}\n{}\n", key_line(2), key_line(1))).unwrap();
        assert_eq!(t.reload().unwrap(), 2);
        let new = t.encrypt(b"new").unwrap();
        assert_ne!(old[..4], new[..4], "new tickets use the new key");
        assert_eq!(t.decrypt(&old).as_deref(), Some(&b"old"[..]));
        std::fs::write(file.path(), key_line(2)).unwrap();
        t.reload().unwrap();
        assert_eq!(t.decrypt(&old), None, "the retired key no longer decrypts");
        assert_eq!(t.decrypt(&new).as_deref(), Some(&b"new"[..]));
        std::fs::write(file.path(), "garbage").unwrap();
        assert!(t.reload().is_err());
        assert_eq!(
            t.decrypt(&new).as_deref(),
            Some(&b"new"[..]),
            "a bad file leaves the keys in use"
        );
    }
}
