//! The shed ledger: every request refused by admission control that claims a provider
//! delivery id (GitHub `X-GitHub-Delivery`, Shopify `X-Shopify-Webhook-Id`, Standard
//! Webhooks `webhook-id`, a generic route's `id_header`; Stripe and Slack carry theirs
//! only in the body, which a refused request never had read) is written down, marked
//! unverified, so a job at the origin can ask the provider to redeliver — GitHub does not
//! redeliver by itself.
//!
//! One task owns the file (the spool names it and its offset file: see
//! `spool::shed_ledger_files`; one JSON object a line): it appends what the request path hands it (never waiting on it: a full hand-off
//! drops the entry and counts it), as one write for all that has arrived, since a flood
//! of refusals is when entries come fastest; and ships new lines to the origin through
//! the backhaul, many in flight at once, from an offset kept in `shed-ledger.offset`.
//! The file is bounded: once everything in it has been shipped and it is over its size,
//! it starts afresh; while unshipped lines fill it, new entries are dropped and counted. Best effort by design: no fsync, since
//! these are hints for reconciliation, not events.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// Where the ledger's lines go: the backhaul's sink to the origin.
pub trait ShedShipper: Send + Sync + 'static {
    /// Ships one entry (a JSON line without its newline); `id` de-duplicates a resend.
    /// False: not shipped now, tried again later.
    fn ship(&self, entry: &[u8], id: &str) -> impl Future<Output = bool> + Send;
}

/// One refused request, as the ledger keeps it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShedEntry {
    /// Unix time of the refusal, in milliseconds.
    pub time_ms: u64,
    /// The PoP that refused it.
    pub pop: String,
    /// The route's name.
    pub route: String,
    /// The route's provider.
    pub provider: String,
    /// The delivery id the request claimed (unverified).
    pub claimed_id: String,
    /// Why it was refused (the `reason` label of the shed metric).
    pub reason: String,
    /// The status answered (429 or 503).
    pub status: u16,
    /// Always false: the request was refused before its signature was checked.
    pub verified: bool,
}

/// The ledger's two files: its lines, and how far they have been shipped.
#[derive(Clone, Debug)]
pub struct LedgerFiles {
    /// The entries, one JSON object a line.
    pub lines: PathBuf,
    /// The byte offset in `lines` up to which the origin has them.
    pub shipped_offset: PathBuf,
}

/// The request path's handle: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Ledger {
    entries: mpsc::Sender<ShedEntry>,
    dropped: Counter,
    task: AbortHandle,
}

impl Ledger {
    /// Starts the ledger task over `files`; `shipper` ships entries to the origin.
    pub fn start<S: ShedShipper>(
        files: LedgerFiles,
        max_bytes: u64,
        shipper: Option<Arc<S>>,
        dropped: Counter,
    ) -> Ledger {
        let (entries, incoming) = mpsc::channel(HAND_OFF);
        let task = Keeper {
            file: files.lines,
            offset_file: files.shipped_offset,
            max_bytes,
            shipper,
            dropped: dropped.clone(),
            shipped: None,
        };
        let task = tokio::spawn(task.run(incoming)).abort_handle();
        Ledger {
            entries,
            dropped,
            task,
        }
    }

    /// The task that keeps and ships the entries, which runs for the life of the process.
    pub fn task(&self) -> AbortHandle {
        self.task.clone()
    }

    /// Keeps `entry`; when the writer is behind, counts it dropped instead of waiting.
    pub fn record(&self, entry: ShedEntry) {
        if self.entries.try_send(entry).is_err() {
            self.dropped.inc();
        }
    }
}

/// Every entry in the ledger's `lines` file (for `edge shed-ledger`).
pub fn read(lines: &Path) -> std::io::Result<Vec<ShedEntry>> {
    let bytes = match std::fs::read(lines) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    // Unsynced by design: after a power cut a line may be torn or garbage; it is skipped.
    Ok(String::from_utf8_lossy(&bytes)
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
    /// How far the file has been shipped; read from `offset_file` on first use.
    shipped: Option<u64>,
}

impl<S: ShedShipper> Keeper<S> {
    /// Appends whatever has arrived in one write, then ships a chunk. While the origin
    /// takes the backlog, ships on at once instead of waiting for the retry tick.
    async fn run(mut self, mut incoming: mpsc::Receiver<ShedEntry>) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut retry = tokio::time::interval(SHIP_RETRY);
        let mut backlog = false;
        loop {
            tokio::select! {
                biased;
                received = incoming.recv_many(&mut batch, BATCH) => {
                    if received == 0 {
                        return;
                    }
                    self.append(&mut batch).await;
                }
                _ = retry.tick() => {}
                () = std::future::ready(()), if backlog => {}
            }
            backlog = self.ship().await;
        }
    }

    /// Writes the entries that find the file under its bound in one write; counts the rest
    /// dropped.
    async fn append(&self, batch: &mut Vec<ShedEntry>) {
        let mut lines = Vec::new();
        let mut ends = Vec::with_capacity(batch.len());
        for entry in batch.drain(..) {
            #[expect(
                clippy::expect_used,
                reason = "an entry is strings and numbers, written to a Vec"
            )]
            serde_json::to_writer(&mut lines, &entry).expect("a ledger entry serializes");
            lines.push(b'\n');
            ends.push(lines.len() as u64);
        }
        let entries = ends.len() as u64;
        let (file, max_bytes) = (self.file.clone(), self.max_bytes);
        let kept = tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(file)?;
            // Entries are kept while the file is under its bound, so the last may cross
            // it: a full file is what starts it afresh once shipped.
            let room = max_bytes.saturating_sub(file.metadata()?.len());
            let kept = match room {
                0 => 0,
                _ => (ends.partition_point(|&end| end < room) + 1).min(ends.len()),
            };
            let bytes = kept.checked_sub(1).map_or(0, |last| ends[last]);
            file.write_all(&lines[..bytes as usize])?;
            Ok(kept as u64)
        })
        .await;
        self.dropped
            .inc_by(entries - kept.ok().and_then(Result::ok).unwrap_or(0));
    }

    /// Ships the next chunk of lines past the shipped offset, several in flight at once,
    /// and moves the offset past those the origin took; starts the file afresh once all
    /// is shipped and it is over its size. True: lines are left, and the origin is up.
    async fn ship(&mut self) -> bool {
        use futures::StreamExt;
        let Some(shipper) = &self.shipper else {
            return false;
        };
        let from = match self.shipped {
            Some(offset) => offset,
            None => read_offset(&self.offset_file).await,
        };
        let file = self.file.clone();
        let read = tokio::task::spawn_blocking(move || -> std::io::Result<(Vec<u8>, u64)> {
            use std::os::unix::fs::FileExt;
            let file = std::fs::File::open(file)?;
            let len = file.metadata()?.len();
            let from = from.min(len);
            let mut chunk = vec![0; (len - from).min(SHIP_CHUNK) as usize];
            file.read_exact_at(&mut chunk, from)?;
            Ok((chunk, len))
        })
        .await;
        let Ok(Ok((chunk, len))) = read else {
            return false;
        };
        let mut offset = from.min(len);
        let complete = chunk.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let chunk = bytes::Bytes::from(chunk).slice(..complete);
        let mut start = offset;
        let lines: Vec<(u64, bytes::Bytes)> = chunk
            .split_inclusive(|&b| b == b'\n')
            .map(|line| {
                let at = start;
                start += line.len() as u64;
                (at, chunk.slice_ref(line))
            })
            .collect();
        let sizes: Vec<u64> = lines.iter().map(|(_, line)| line.len() as u64).collect();
        let shipper = Arc::clone(shipper);
        let mut shipped = futures::stream::iter(lines)
            .map(move |(at, line)| {
                let shipper = Arc::clone(&shipper);
                async move {
                    let entry = line.trim_ascii_end();
                    // A line a power cut tore is no entry: passed over, not shipped.
                    if serde_json::from_slice::<ShedEntry>(entry).is_err() {
                        return true;
                    }
                    let id = format!("shed-{at}-{}", crc32c::crc32c(&line));
                    shipper.ship(entry, &id).await
                }
            })
            .buffered(SHIP_IN_FLIGHT);
        let mut origin_up = true;
        for size in sizes {
            if shipped.next().await != Some(true) {
                origin_up = false;
                break;
            }
            offset += size;
        }
        drop(shipped);
        if Some(offset) != self.shipped {
            let _ = tokio::fs::write(&self.offset_file, offset.to_string()).await;
        }
        self.shipped = Some(offset);
        if offset == len && offset >= self.max_bytes {
            let _ = tokio::fs::write(&self.file, b"").await;
            let _ = tokio::fs::write(&self.offset_file, b"0").await;
            self.shipped = Some(0);
        }
        origin_up && offset < len
    }
}

async fn read_offset(path: &Path) -> u64 {
    tokio::fs::read_to_string(path)
        .await
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// Entries in flight from the request path to the task.
const HAND_OFF: usize = 4096;
/// Entries the task appends in one write, at most.
const BATCH: usize = 1024;
/// Bytes of the file read for one round of shipping, at most.
const SHIP_CHUNK: u64 = 256 << 10;
/// Lines published at once, each awaiting the origin's acknowledgement.
const SHIP_IN_FLIGHT: usize = 64;
/// How often unshipped lines are tried again while the origin is away.
const SHIP_RETRY: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    /// The ledger's files in `dir`, as a test names them.
    fn files(dir: &Path) -> LedgerFiles {
        LedgerFiles {
            lines: dir.join("ledger.jsonl"),
            shipped_offset: dir.join("ledger.offset"),
        }
    }

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

    /// An origin that takes a line after a millisecond while `up`, and keeps what it took.
    #[derive(Default)]
    struct Origin {
        up: std::sync::atomic::AtomicBool,
        taken: parking_lot::Mutex<Vec<(String, ShedEntry)>>,
        in_flight: std::sync::atomic::AtomicUsize,
        most_in_flight: std::sync::atomic::AtomicUsize,
    }

    impl Origin {
        fn up() -> Arc<Origin> {
            let origin = Arc::new(Origin::default());
            origin.up.store(true, SeqCst);
            origin
        }

        fn claimed_ids(&self) -> Vec<String> {
            let taken = self.taken.lock();
            taken.iter().map(|(_, e)| e.claimed_id.clone()).collect()
        }

        async fn wait_for(&self, lines: usize) {
            for _ in 0..500 {
                if self.taken.lock().len() >= lines {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    impl ShedShipper for Origin {
        async fn ship(&self, entry: &[u8], id: &str) -> bool {
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most_in_flight.fetch_max(now, SeqCst);
            tokio::time::sleep(Duration::from_millis(1)).await;
            self.in_flight.fetch_sub(1, SeqCst);
            if !self.up.load(SeqCst) {
                return false;
            }
            let entry = serde_json::from_slice(entry).expect("a shipped line is one entry");
            self.taken.lock().push((id.to_owned(), entry));
            true
        }
    }

    use std::sync::atomic::Ordering::SeqCst;

    fn ids(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("d-{i}")).collect()
    }

    /// A ledger over `dir` shipping to `origin`, handed the entries `d-N` of `range`.
    fn record_into(dir: &Path, origin: &Arc<Origin>, range: std::ops::Range<usize>) -> Ledger {
        let ledger = Ledger::start(
            files(dir),
            16 << 20,
            Some(origin.clone()),
            Counter::default(),
        );
        for id in ids(range) {
            ledger.record(entry(&id));
        }
        ledger
    }

    #[tokio::test]
    async fn a_flood_is_kept_and_shipped_once_in_order_with_many_lines_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let (origin, dropped) = (Origin::up(), Counter::default());
        let ledger = Ledger::start(
            files(dir.path()),
            16 << 20,
            Some(origin.clone()),
            dropped.clone(),
        );
        for i in 0..3000 {
            ledger.record(entry(&format!("d-{i}")));
        }
        origin.wait_for(3000).await;
        assert_eq!(dropped.get(), 0);
        assert_eq!(origin.claimed_ids(), ids(0..3000));
        let shipped_ids: std::collections::HashSet<String> = origin
            .taken
            .lock()
            .iter()
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(shipped_ids.len(), 3000, "a message id repeats");
        assert!(origin.most_in_flight.load(SeqCst) > 1, "one line at a time");
        assert_eq!(read(&files(dir.path()).lines).unwrap().len(), 3000);
        let file_len = std::fs::metadata(files(dir.path()).lines).unwrap().len();
        let offset = std::fs::read_to_string(files(dir.path()).shipped_offset).unwrap();
        assert_eq!(offset, file_len.to_string());
    }

    #[tokio::test]
    async fn what_the_origin_refused_is_shipped_when_it_is_back_and_not_again_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let origin = Arc::new(Origin::default());
        let ledger = record_into(dir.path(), &origin, 0..100);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(origin.claimed_ids().is_empty());
        assert_eq!(read(&files(dir.path()).lines).unwrap().len(), 100);
        origin.up.store(true, SeqCst);
        origin.wait_for(100).await;
        assert_eq!(origin.claimed_ids(), ids(0..100));
        drop(ledger);
        tokio::time::sleep(Duration::from_millis(100)).await;

        let after_restart = Origin::up();
        let _ledger = record_into(dir.path(), &after_restart, 100..110);
        after_restart.wait_for(10).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(after_restart.claimed_ids(), ids(100..110));
    }

    /// The ledger is not synced: after a power cut its end may be zeros (the size made it
    /// to disk, the data did not) or half a line. Those are passed over, not shipped, and
    /// entries written after the restart are shipped as usual.
    #[tokio::test]
    async fn lines_a_power_cut_tore_are_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut damaged = serde_json::to_vec(&entry("d-0")).unwrap();
        damaged.push(b'\n');
        damaged.extend_from_slice(&[0; 300]);
        damaged.push(b'\n');
        damaged.extend_from_slice(&[0xff, 0xfe, b'\n']);
        let torn = serde_json::to_vec(&entry("d-torn")).unwrap();
        damaged.extend_from_slice(&torn[..torn.len() / 2]);
        damaged.push(b'\n');
        std::fs::write(files(dir.path()).lines, &damaged).unwrap();
        assert_eq!(read(&files(dir.path()).lines).unwrap(), vec![entry("d-0")]);

        let origin = Origin::up();
        let _ledger = record_into(dir.path(), &origin, 1..2);
        origin.wait_for(2).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(origin.claimed_ids(), ids(0..2));
    }

    #[tokio::test]
    async fn a_shipped_file_over_its_bound_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let (origin, dropped) = (Origin::up(), Counter::default());
        let ledger = Ledger::start(
            files(dir.path()),
            1000,
            Some(origin.clone()),
            dropped.clone(),
        );
        for i in 0..40 {
            ledger.record(entry(&format!("d-{i}")));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        origin.wait_for(40 - dropped.get() as usize).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let taken = origin.claimed_ids();
        assert!(
            taken.len() > 10,
            "the file was not started afresh: {taken:?}"
        );
        assert_eq!(taken.len() as u64 + dropped.get(), 40);
        let mut in_order = taken.clone();
        in_order.sort_by_key(|id| id[2..].parse::<u32>().unwrap());
        in_order.dedup();
        assert_eq!(taken, in_order, "out of order or twice");
        let one_entry = serde_json::to_vec(&entry("d-40")).unwrap().len() as u64 + 1;
        let file_len = std::fs::metadata(files(dir.path()).lines).unwrap().len();
        assert!(file_len < 1000 + one_entry, "{file_len} bytes");
    }

    #[tokio::test]
    async fn entries_are_kept_in_order_up_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let dropped = Counter::default();
        let ledger = Ledger::start(
            files(dir.path()),
            600,
            None::<Arc<Offline>>,
            dropped.clone(),
        );
        for i in 0..10 {
            ledger.record(entry(&format!("d-{i}")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let kept = read(&files(dir.path()).lines).unwrap();
        assert!(!kept.is_empty() && kept.len() < 10, "{}", kept.len());
        assert_eq!(kept[0], entry("d-0"));
        assert_eq!(kept.len() as u64 + dropped.get(), 10);
    }
}
