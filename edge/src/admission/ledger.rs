//! The shed ledger: every request refused by admission control that claims a provider
//! delivery id (GitHub `X-GitHub-Delivery`, Shopify `X-Shopify-Webhook-Id`, Standard
//! Webhooks `webhook-id`, a generic route's `id_header`; Stripe and Slack carry theirs
//! only in the body, which a refused request never had read) is written down, marked
//! unverified, so a job at the origin can ask the provider to redeliver — GitHub does not
//! redeliver by itself.
//!
//! One task owns the file (`shed-ledger.jsonl` in the spool directory, one JSON object a
//! line): it appends what the request path hands it (never waiting on it: a full hand-off
//! drops the entry and counts it), and ships new lines to the origin through the backhaul
//! from an offset kept in `shed-ledger.offset`. The file is bounded: once everything in
//! it has been shipped and it is over its size, it starts afresh; while unshipped lines
//! fill it, new entries are dropped and counted. Best effort by design: no fsync, since
//! these are hints for reconciliation, not events.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// Where the ledger's lines go: the backhaul's sink to the origin.
pub trait ShedShipper: Send + Sync + 'static {
    /// Ships one entry (a JSON line without its newline); `id` de-duplicates a resend.
    /// False: not shipped now, tried again later.
    fn ship(&self, entry: &[u8], id: &str) -> impl Future<Output = bool> + Send;
}

/// One refused request, as the ledger keeps it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShedEntry {
    pub time_ms: u64,
    pub pop: String,
    pub route: String,
    pub provider: String,
    pub claimed_id: String,
    pub reason: String,
    pub status: u16,
    /// Always false: the request was refused before its signature was checked.
    pub verified: bool,
}

/// The request path's handle: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Ledger {
    entries: mpsc::Sender<ShedEntry>,
    dropped: Counter,
}

impl Ledger {
    /// Starts the ledger task over `dir`; `shipper` ships entries to the origin.
    pub fn start<S: ShedShipper>(
        dir: &Path,
        max_bytes: u64,
        shipper: Option<Arc<S>>,
        dropped: Counter,
    ) -> Ledger {
        let (entries, incoming) = mpsc::channel(HAND_OFF);
        let task = Keeper {
            file: dir.join(FILE_NAME),
            offset_file: dir.join(OFFSET_NAME),
            max_bytes,
            shipper,
            dropped: dropped.clone(),
        };
        tokio::spawn(task.run(incoming));
        Ledger { entries, dropped }
    }

    pub fn record(&self, entry: ShedEntry) {
        if self.entries.try_send(entry).is_err() {
            self.dropped.inc();
        }
    }
}

/// Every entry in the ledger of the spool directory `dir` (for `edge shed-ledger`).
pub fn read(dir: &Path) -> std::io::Result<Vec<ShedEntry>> {
    let text = match std::fs::read_to_string(dir.join(FILE_NAME)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}

struct Keeper<S> {
    file: PathBuf,
    offset_file: PathBuf,
    max_bytes: u64,
    shipper: Option<Arc<S>>,
    dropped: Counter,
}

impl<S: ShedShipper> Keeper<S> {
    async fn run(self, mut incoming: mpsc::Receiver<ShedEntry>) {
        let mut retry = tokio::time::interval(SHIP_RETRY);
        loop {
            tokio::select! {
                entry = incoming.recv() => match entry {
                    Some(entry) => self.append(&entry).await,
                    None => return,
                },
                _ = retry.tick() => {}
            }
            self.ship().await;
        }
    }

    async fn append(&self, entry: &ShedEntry) {
        let len = tokio::fs::metadata(&self.file).await.map_or(0, |m| m.len());
        if len >= self.max_bytes {
            self.dropped.inc();
            return;
        }
        let mut line = serde_json::to_vec(entry).expect("a ledger entry serializes");
        line.push(b'\n');
        let written = async {
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.file)
                .await?;
            file.write_all(&line).await
        };
        if written.await.is_err() {
            self.dropped.inc();
        }
    }

    /// Publishes every line past the shipped offset; starts the file afresh once all is
    /// shipped and it is over its size.
    async fn ship(&self) {
        let Some(shipper) = &self.shipper else {
            return;
        };
        let Ok(text) = tokio::fs::read(&self.file).await else {
            return;
        };
        let mut offset = read_offset(&self.offset_file).await.min(text.len() as u64);
        for line in text[offset as usize..].split_inclusive(|&b| b == b'\n') {
            if !line.ends_with(b"\n") {
                break;
            }
            let id = format!("shed-{offset}-{}", crc32c::crc32c(line));
            if !shipper.ship(line.trim_ascii_end(), &id).await {
                break;
            }
            offset += line.len() as u64;
            let _ = tokio::fs::write(&self.offset_file, offset.to_string()).await;
        }
        if offset == text.len() as u64 && offset >= self.max_bytes {
            let _ = tokio::fs::write(&self.file, b"").await;
            let _ = tokio::fs::write(&self.offset_file, b"0").await;
        }
    }
}

async fn read_offset(path: &Path) -> u64 {
    tokio::fs::read_to_string(path)
        .await
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

const FILE_NAME: &str = "shed-ledger.jsonl";
const OFFSET_NAME: &str = "shed-ledger.offset";
/// Entries in flight from the request path to the task.
const HAND_OFF: usize = 4096;
/// How often unshipped lines are tried again while the origin is away.
const SHIP_RETRY: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str) -> ShedEntry {
        ShedEntry {
            time_ms: 1,
            pop: "p".into(),
            route: "r".into(),
            provider: "github".into(),
            claimed_id: id.into(),
            reason: "overloaded".into(),
            status: 503,
            verified: false,
        }
    }

    struct Offline;

    impl ShedShipper for Offline {
        async fn ship(&self, _entry: &[u8], _id: &str) -> bool {
            false
        }
    }

    #[tokio::test]
    async fn entries_are_kept_in_order_up_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let dropped = Counter::default();
        let ledger = Ledger::start(dir.path(), 600, None::<Arc<Offline>>, dropped.clone());
        for i in 0..10 {
            ledger.record(entry(&format!("d-{i}")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let kept = read(dir.path()).unwrap();
        assert!(!kept.is_empty() && kept.len() < 10, "{}", kept.len());
        assert_eq!(kept[0], entry("d-0"));
        assert_eq!(kept.len() as u64 + dropped.get(), 10);
    }
}
