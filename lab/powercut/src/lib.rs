//! A FUSE file system for durability tests: it passes reads and writes through to a
//! backing directory, but holds every write that no `fsync`/`fdatasync` has covered yet,
//! and every create, rename, unlink or mkdir whose directory no `fsync` has covered, in
//! memory. On command it loses all of that, as a machine does when its power goes
//! ([`PowerCut::cut`]), optionally tearing the last write at a 512-byte boundary; it can
//! make `fsync` fail with EIO and drop what it was to write, as a kernel does after a
//! writeback error ([`PowerCut::fail_fsyncs`]); it can fail every read of chosen files
//! with EIO, as a bad sector does ([`PowerCut::fail_reads`]); and it can cut the power by itself at a
//! chosen operation ([`PowerCut::arm`]): from then on every operation fails, until the
//! test has stopped the program under test and called `cut`.
//!
//! The model follows LazyFS (Ramos et al., "When Amnesia Strikes", VLDB 2024): a page
//! cache of its own that only a sync empties. Files are served with direct I/O, so the
//! kernel keeps no cache of them that would outlive a cut.

mod fs;
mod model;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub use model::{Op, Trigger};

/// A mounted power-cut file system; unmounted when dropped.
pub struct PowerCut {
    state: Arc<Mutex<model::Model>>,
    mountpoint: PathBuf,
    session: Option<fuser::BackgroundSession>,
}

impl PowerCut {
    /// Mounts an empty file system at `mountpoint`, its synced contents kept under
    /// `backing` (both directories must exist; `backing` empty). Needs `/dev/fuse` and
    /// `fusermount3` (Debian's `fuse3`).
    pub fn mount(backing: &Path, mountpoint: &Path) -> std::io::Result<PowerCut> {
        let state = Arc::new(Mutex::new(model::Model::new(backing)));
        let options = [
            fuser::MountOption::FSName("powercut".into()),
            fuser::MountOption::DefaultPermissions,
            fuser::MountOption::AllowOther,
        ];
        let session = fuser::spawn_mount2(
            fs::PowerCutFs::new(Arc::clone(&state), backing),
            mountpoint,
            &options,
        )?;
        Ok(PowerCut {
            state,
            mountpoint: mountpoint.to_owned(),
            session: Some(session),
        })
    }

    /// Where the file system is mounted: what the program under test writes to.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The power goes: every write not synced, every name change whose directory was
    /// not synced, is lost. With `tear`, the newest write not synced reaches the disk
    /// in part: its first bytes up to a 512-byte boundary of the file chosen by `tear`
    /// (a seed). Operations work again afterwards, on what survived.
    pub fn cut(&self, tear: Option<u64>) {
        self.state().cut(tear);
    }

    /// The next `n` fsyncs (of files or directories) fail with EIO; what each was to
    /// write is dropped.
    pub fn fail_fsyncs(&self, n: u32) {
        self.state().fail_fsyncs(n);
    }

    /// Every read of a file whose name contains `name_contains` fails with EIO, as on a
    /// disk with a bad sector under it (`None`: reads work again).
    pub fn fail_reads(&self, name_contains: Option<&str>) {
        self.state().fail_reads(name_contains.map(str::to_owned));
    }

    /// Cuts the power by itself when `trigger` matches an operation: that operation and
    /// every one after it fail with EIO until [`PowerCut::cut`].
    pub fn arm(&self, trigger: Trigger) {
        self.state().arm(trigger);
    }

    /// Whether an armed trigger has fired (the power is out).
    pub fn fired(&self) -> bool {
        self.state().is_frozen()
    }

    /// Operations seen since mount, by kind: what a test picks its cut points from.
    pub fn counts(&self) -> model::Counts {
        self.state().counts()
    }

    fn state(&self) -> MutexGuard<'_, model::Model> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for PowerCut {
    /// Detaches the mount (lazily, so a file still open elsewhere cannot keep it), then
    /// waits for the session to see the end of its device.
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
        if let Some(session) = self.session.take() {
            session.join();
        }
    }
}
