//! The file system's state: what a program sees now, and what a power cut would leave.
//!
//! Each file's synced contents are a file in the backing directory named by its inode;
//! writes and truncations since its last sync are held here, in order, and applied to
//! it by `fsync`. Each directory keeps its entries as they are and as they were at its
//! last `fsync`. A cut replaces the first by the second everywhere and drops every
//! change not synced.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The kinds of operations a [`Trigger`] can match and [`Counts`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A new file.
    Create,
    /// A new directory.
    Mkdir,
    /// Data written into a file.
    Write,
    /// A file's length set.
    Truncate,
    /// `fsync`/`fdatasync` of a file: its data and length become durable.
    Fsync,
    /// `fsync` of a directory: the names in it become durable.
    FsyncDir,
    /// A name moved.
    Rename,
    /// A name removed.
    Unlink,
}

/// Cut the power at the `nth` (1-based) operation of kind `op` whose file name contains
/// `name_contains` (any name when empty); the operation does not happen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    /// The kind of operation counted.
    pub op: Op,
    /// Only operations on a name containing this count (all when empty).
    pub name_contains: String,
    /// The matching operation the power is cut at, counted from 1.
    pub nth: u64,
}

/// Operations seen since mount, by kind.
#[derive(Clone, Debug, Default)]
pub struct Counts(pub HashMap<Op, u64>);

/// An error to answer the kernel with (an errno).
pub(crate) type Errno = i32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
}

/// What `getattr` needs of a node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub mode: u16,
}

pub(crate) struct Model {
    backing: PathBuf,
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Orders changes across files: the newest unsynced write is the one a cut tears.
    next_change: u64,
    fail_fsyncs: u32,
    /// Reads of files whose name contains this fail.
    unreadable: Option<String>,
    trigger: Option<Trigger>,
    seen: HashMap<Op, u64>,
    matched: u64,
    frozen: bool,
}

enum Node {
    File(FileNode),
    Dir(DirNode),
}

struct FileNode {
    mode: u16,
    durable_len: u64,
    len: u64,
    pending: Vec<(u64, Change)>,
}

enum Change {
    Write { offset: u64, data: Vec<u8> },
    Truncate(u64),
}

struct DirNode {
    mode: u16,
    entries: BTreeMap<OsString, u64>,
    durable: BTreeMap<OsString, u64>,
}

pub(crate) const ROOT: u64 = 1;

impl Model {
    pub(crate) fn new(backing: &Path) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node::Dir(DirNode {
                mode: 0o755,
                entries: BTreeMap::new(),
                durable: BTreeMap::new(),
            }),
        );
        Self {
            backing: backing.to_owned(),
            nodes,
            next_ino: ROOT + 1,
            next_change: 0,
            fail_fsyncs: 0,
            unreadable: None,
            trigger: None,
            seen: HashMap::new(),
            matched: 0,
            frozen: false,
        }
    }

    pub(crate) fn arm(&mut self, trigger: Trigger) {
        self.trigger = Some(trigger);
        self.matched = 0;
    }

    pub(crate) fn fail_fsyncs(&mut self, n: u32) {
        self.fail_fsyncs = n;
    }

    pub(crate) fn fail_reads(&mut self, name_contains: Option<String>) {
        self.unreadable = name_contains;
    }

    /// Whether reads of `ino` fail: the power is out, or its name is one made unreadable.
    pub(crate) fn read_fails(&self, ino: u64) -> bool {
        self.frozen
            || self
                .unreadable
                .as_ref()
                .is_some_and(|name| self.name_of(ino).to_string_lossy().contains(name.as_str()))
    }

    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen
    }

    pub(crate) fn counts(&self) -> Counts {
        Counts(self.seen.clone())
    }

    /// Counts an operation and says whether it may happen: not once the power is out,
    /// nor when it is the one an armed trigger waits for.
    pub(crate) fn guard(&mut self, op: Op, name: &OsStr) -> Result<(), Errno> {
        if self.frozen {
            return Err(libc::EIO);
        }
        *self.seen.entry(op).or_default() += 1;
        if let Some(trigger) = &self.trigger
            && trigger.op == op
            && name.to_string_lossy().contains(&trigger.name_contains)
        {
            self.matched += 1;
            if self.matched >= trigger.nth {
                self.frozen = true;
                self.trigger = None;
                return Err(libc::EIO);
            }
        }
        Ok(())
    }

    pub(crate) fn attr(&self, ino: u64) -> Result<Attr, Errno> {
        match self.nodes.get(&ino).ok_or(libc::ENOENT)? {
            Node::File(file) => Ok(Attr {
                ino,
                kind: Kind::File,
                size: file.len,
                mode: file.mode,
            }),
            Node::Dir(dir) => Ok(Attr {
                ino,
                kind: Kind::Dir,
                size: dir.entries.len() as u64,
                mode: dir.mode,
            }),
        }
    }

    pub(crate) fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr, Errno> {
        let ino = *self.dir(parent)?.entries.get(name).ok_or(libc::ENOENT)?;
        self.attr(ino)
    }

    /// The name of a file (for triggers), from any directory that lists it.
    pub(crate) fn name_of(&self, ino: u64) -> OsString {
        self.nodes
            .values()
            .filter_map(|node| match node {
                Node::Dir(dir) => dir.entries.iter().find(|(_, i)| **i == ino),
                Node::File(_) => None,
            })
            .map(|(name, _)| name.clone())
            .next()
            .unwrap_or_default()
    }

    pub(crate) fn create(
        &mut self,
        parent: u64,
        name: &OsStr,
        mode: u16,
        kind: Kind,
    ) -> Result<Attr, Errno> {
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let node = match kind {
            Kind::File => Node::File(FileNode {
                mode,
                durable_len: 0,
                len: 0,
                pending: Vec::new(),
            }),
            Kind::Dir => Node::Dir(DirNode {
                mode,
                entries: BTreeMap::new(),
                durable: BTreeMap::new(),
            }),
        };
        self.nodes.insert(ino, node);
        self.dir_mut(parent)?.entries.insert(name.to_owned(), ino);
        self.attr(ino)
    }

    pub(crate) fn unlink(&mut self, parent: u64, name: &OsStr, kind: Kind) -> Result<(), Errno> {
        let ino = *self.dir(parent)?.entries.get(name).ok_or(libc::ENOENT)?;
        match (self.nodes.get(&ino), kind) {
            (Some(Node::Dir(dir)), Kind::Dir) if !dir.entries.is_empty() => {
                return Err(libc::ENOTEMPTY);
            }
            (Some(Node::Dir(_)), Kind::File) => return Err(libc::EISDIR),
            (Some(Node::File(_)), Kind::Dir) => return Err(libc::ENOTDIR),
            _ => {}
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.collect_garbage();
        Ok(())
    }

    pub(crate) fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
    ) -> Result<(), Errno> {
        let ino = self
            .dir_mut(parent)?
            .entries
            .remove(name)
            .ok_or(libc::ENOENT)?;
        self.dir_mut(new_parent)?
            .entries
            .insert(new_name.to_owned(), ino);
        self.collect_garbage();
        Ok(())
    }

    pub(crate) fn entries(&self, dir: u64) -> Result<Vec<(OsString, Attr)>, Errno> {
        self.dir(dir)?
            .entries
            .iter()
            .map(|(name, ino)| Ok((name.clone(), self.attr(*ino)?)))
            .collect()
    }

    /// What a program reads: the synced bytes with every change since applied.
    pub(crate) fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let file = self.file(ino)?;
        let end = (offset + u64::from(size)).min(file.len);
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let synced_end = end.min(file.durable_len);
        if offset < synced_end {
            let synced = File::open(self.backing_path(ino)).map_err(errno)?;
            synced
                .read_exact_at(&mut out[..(synced_end - offset) as usize], offset)
                .map_err(errno)?;
        }
        for (_, change) in &file.pending {
            match change {
                Change::Write { offset: at, data } => {
                    let from = offset.max(*at);
                    let to = end.min(at + data.len() as u64);
                    if from < to {
                        out[(from - offset) as usize..(to - offset) as usize]
                            .copy_from_slice(&data[(from - at) as usize..(to - at) as usize]);
                    }
                }
                Change::Truncate(len) if *len < end => {
                    out[(len.saturating_sub(offset)) as usize..].fill(0);
                }
                Change::Truncate(_) => {}
            }
        }
        Ok(out)
    }

    pub(crate) fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let change = self.next_change;
        self.next_change += 1;
        let file = self.file_mut(ino)?;
        file.len = file.len.max(offset + data.len() as u64);
        file.pending.push((
            change,
            Change::Write {
                offset,
                data: data.to_vec(),
            },
        ));
        Ok(data.len() as u32)
    }

    pub(crate) fn truncate(&mut self, ino: u64, len: u64) -> Result<(), Errno> {
        let change = self.next_change;
        self.next_change += 1;
        let file = self.file_mut(ino)?;
        file.len = len;
        file.pending.push((change, Change::Truncate(len)));
        Ok(())
    }

    /// `fsync`/`fdatasync` of a file: its changes reach the backing file. Failing on
    /// command, the changes are dropped all the same.
    pub(crate) fn fsync(&mut self, ino: u64) -> Result<(), Errno> {
        let failing = self.take_failure();
        let path = self.backing_path(ino);
        let file = self.file_mut(ino)?;
        let pending = std::mem::take(&mut file.pending);
        if failing {
            file.len = file.durable_len;
            return Err(libc::EIO);
        }
        let synced = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(errno)?;
        for (_, change) in pending {
            match change {
                Change::Write { offset, data } => {
                    synced.write_all_at(&data, offset).map_err(errno)?
                }
                Change::Truncate(len) => synced.set_len(len).map_err(errno)?,
            }
        }
        synced.set_len(file.len).map_err(errno)?;
        file.durable_len = file.len;
        Ok(())
    }

    /// `fsync` of a directory: its entries as they are now survive a cut.
    pub(crate) fn fsync_dir(&mut self, ino: u64) -> Result<(), Errno> {
        if self.take_failure() {
            return Err(libc::EIO);
        }
        let dir = self.dir_mut(ino)?;
        dir.durable = dir.entries.clone();
        self.collect_garbage();
        Ok(())
    }

    /// The power goes (see [`crate::PowerCut::cut`]).
    pub(crate) fn cut(&mut self, tear: Option<u64>) {
        if let Some(seed) = tear {
            self.tear_newest_write(seed);
        }
        for node in self.nodes.values_mut() {
            match node {
                Node::File(file) => {
                    file.pending.clear();
                    file.len = file.durable_len;
                }
                Node::Dir(dir) => dir.entries = dir.durable.clone(),
            }
        }
        self.collect_garbage();
        self.frozen = false;
        self.trigger = None;
    }

    /// The newest unsynced write reaches the disk up to a 512-byte boundary of the file
    /// inside it, chosen by `seed` (nothing, when none falls inside).
    fn tear_newest_write(&mut self, seed: u64) {
        let newest = self
            .nodes
            .iter()
            .filter_map(|(ino, node)| match node {
                Node::File(file) => file
                    .pending
                    .iter()
                    .filter(|(_, change)| matches!(change, Change::Write { .. }))
                    .map(|(order, _)| (*order, *ino))
                    .max(),
                Node::Dir(_) => None,
            })
            .max();
        let Some((order, ino)) = newest else {
            return;
        };
        let path = self.backing_path(ino);
        let Ok(file) = self.file_mut(ino) else {
            return;
        };
        let Some((_, Change::Write { offset, data })) =
            file.pending.iter().find(|(o, _)| *o == order)
        else {
            return;
        };
        let first = offset.div_ceil(SECTOR) * SECTOR;
        let last = offset + data.len() as u64;
        if first >= last {
            return;
        }
        let boundaries = (last - first).div_ceil(SECTOR);
        let boundary = first + (seed % boundaries) * SECTOR;
        let kept = &data[..(boundary - offset) as usize];
        let Ok(synced) = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
        else {
            return;
        };
        if synced.write_all_at(kept, *offset).is_ok() {
            file.durable_len = file.durable_len.max(boundary);
            let _ = synced.set_len(file.durable_len);
        }
    }

    /// Forgets nodes no directory lists any more, now or after a cut, with their bytes.
    fn collect_garbage(&mut self) {
        let mut live = HashSet::from([ROOT]);
        let mut to_visit = vec![ROOT];
        while let Some(ino) = to_visit.pop() {
            if let Some(Node::Dir(dir)) = self.nodes.get(&ino) {
                for child in dir.entries.values().chain(dir.durable.values()) {
                    if live.insert(*child) {
                        to_visit.push(*child);
                    }
                }
            }
        }
        let dead: Vec<u64> = self
            .nodes
            .keys()
            .filter(|ino| !live.contains(ino))
            .copied()
            .collect();
        for ino in dead {
            self.nodes.remove(&ino);
            let _ = std::fs::remove_file(self.backing_path(ino));
        }
    }

    fn take_failure(&mut self) -> bool {
        if self.fail_fsyncs == 0 {
            return false;
        }
        self.fail_fsyncs -= 1;
        true
    }

    fn backing_path(&self, ino: u64) -> PathBuf {
        self.backing.join(format!("ino-{ino}"))
    }

    fn dir(&self, ino: u64) -> Result<&DirNode, Errno> {
        match self.nodes.get(&ino) {
            Some(Node::Dir(dir)) => Ok(dir),
            Some(Node::File(_)) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut DirNode, Errno> {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(dir)) => Ok(dir),
            Some(Node::File(_)) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn file(&self, ino: u64) -> Result<&FileNode, Errno> {
        match self.nodes.get(&ino) {
            Some(Node::File(file)) => Ok(file),
            Some(Node::Dir(_)) => Err(libc::EISDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Result<&mut FileNode, Errno> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(file)) => Ok(file),
            Some(Node::Dir(_)) => Err(libc::EISDIR),
            None => Err(libc::ENOENT),
        }
    }
}

fn errno(error: std::io::Error) -> Errno {
    error.raw_os_error().unwrap_or(libc::EIO)
}

const SECTOR: u64 = 512;

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> (tempfile::TempDir, Model) {
        let backing = tempfile::tempdir().unwrap();
        let model = Model::new(backing.path());
        (backing, model)
    }

    fn name(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn unsynced_writes_are_read_back_and_lost_at_a_cut() {
        let (_backing, mut m) = model();
        let f = m.create(ROOT, name("a"), 0o644, Kind::File).unwrap().ino;
        m.fsync_dir(ROOT).unwrap();
        m.write(f, 0, b"synced").unwrap();
        m.fsync(f).unwrap();
        m.write(f, 6, b" and not").unwrap();
        m.write(f, 0, b"S").unwrap();
        assert_eq!(m.read(f, 0, 100).unwrap(), b"Synced and not");
        m.cut(None);
        assert_eq!(m.read(f, 0, 100).unwrap(), b"synced");
        assert_eq!(m.attr(f).unwrap().size, 6);
    }

    #[test]
    fn names_survive_only_once_their_directory_is_synced() {
        let (_backing, mut m) = model();
        let kept = m.create(ROOT, name("kept"), 0o644, Kind::File).unwrap().ino;
        m.write(kept, 0, b"k").unwrap();
        m.fsync(kept).unwrap();
        m.fsync_dir(ROOT).unwrap();
        let lost = m.create(ROOT, name("lost"), 0o644, Kind::File).unwrap().ino;
        m.write(lost, 0, b"data synced, name not").unwrap();
        m.fsync(lost).unwrap();
        m.rename(ROOT, name("kept"), ROOT, name("renamed")).unwrap();
        m.cut(None);
        let names: Vec<OsString> = m
            .entries(ROOT)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, [OsString::from("kept")]);
        assert_eq!(m.read(kept, 0, 10).unwrap(), b"k");
        assert!(m.attr(lost).is_err(), "an unreachable file is gone");

        m.unlink(ROOT, name("kept"), Kind::File).unwrap();
        m.cut(None);
        assert!(
            m.lookup(ROOT, name("kept")).is_ok(),
            "the unlink was not synced"
        );
        m.unlink(ROOT, name("kept"), Kind::File).unwrap();
        m.fsync_dir(ROOT).unwrap();
        m.cut(None);
        assert!(m.lookup(ROOT, name("kept")).is_err());
    }

    #[test]
    fn a_torn_write_keeps_a_prefix_up_to_a_sector_boundary() {
        let (_backing, mut m) = model();
        let f = m.create(ROOT, name("seg"), 0o644, Kind::File).unwrap().ino;
        m.fsync_dir(ROOT).unwrap();
        m.write(f, 0, &[1; 100]).unwrap();
        m.fsync(f).unwrap();
        m.write(f, 100, &[2; 2000]).unwrap();
        m.cut(Some(1));
        let size = m.attr(f).unwrap().size;
        assert_eq!(size, 1024, "first boundary 512, seed 1: the second");
        let bytes = m.read(f, 0, 2048).unwrap();
        assert!(bytes[..100].iter().all(|&b| b == 1));
        assert!(bytes[100..1024].iter().all(|&b| b == 2));
    }

    #[test]
    fn a_failing_fsync_reports_eio_and_drops_its_writes() {
        let (_backing, mut m) = model();
        let f = m.create(ROOT, name("f"), 0o644, Kind::File).unwrap().ino;
        m.fsync_dir(ROOT).unwrap();
        m.write(f, 0, b"lost").unwrap();
        m.fail_fsyncs(1);
        assert_eq!(m.fsync(f), Err(libc::EIO));
        assert_eq!(
            m.read(f, 0, 10).unwrap(),
            b"",
            "gone at once, as after a writeback error"
        );
        m.write(f, 0, b"kept").unwrap();
        m.fsync(f).unwrap();
        m.cut(None);
        assert_eq!(m.read(f, 0, 10).unwrap(), b"kept");
    }

    #[test]
    fn an_armed_trigger_freezes_everything_until_the_cut() {
        let (_backing, mut m) = model();
        m.arm(Trigger {
            op: Op::Rename,
            name_contains: "checkpoint".into(),
            nth: 2,
        });
        assert!(m.guard(Op::Rename, name("checkpoint.tmp")).is_ok());
        assert!(m.guard(Op::Rename, name("other")).is_ok());
        assert_eq!(m.guard(Op::Rename, name("checkpoint.tmp")), Err(libc::EIO));
        assert!(m.is_frozen());
        assert_eq!(m.guard(Op::Write, name("x")), Err(libc::EIO));
        m.cut(None);
        assert!(m.guard(Op::Write, name("x")).is_ok());
        assert_eq!(m.counts().0[&Op::Rename], 3);
    }
}
