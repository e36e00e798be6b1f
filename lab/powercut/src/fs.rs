//! The FUSE side: each kernel request, guarded (counted, refused once the power is out),
//! then answered from the model.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};

use crate::model::{Attr, Errno, Kind, Model, Op};

pub(crate) struct PowerCutFs {
    state: Arc<Mutex<Model>>,
    backing_stats: std::path::PathBuf,
}

impl PowerCutFs {
    pub(crate) fn new(state: Arc<Mutex<Model>>, backing: &std::path::Path) -> Self {
        Self {
            state,
            backing_stats: backing.to_owned(),
        }
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Filesystem for PowerCutFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match self.model().lookup(parent, name) {
            Ok(attr) => reply.entry(&TTL, &file_attr(attr), 0),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.model().attr(ino) {
            Ok(attr) => reply.attr(&TTL, &file_attr(attr)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut model = self.model();
        let result = match size {
            Some(len) => {
                let name = model.name_of(ino);
                model
                    .guard(Op::Truncate, &name)
                    .and_then(|()| model.truncate(ino, len))
            }
            None => Ok(()),
        };
        match result.and_then(|()| model.attr(ino)) {
            Ok(attr) => reply.attr(&TTL, &file_attr(attr)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut model = self.model();
        let made = model
            .guard(Op::Mkdir, name)
            .and_then(|()| model.create(parent, name, permissions(mode), Kind::Dir));
        match made {
            Ok(attr) => reply.entry(&TTL, &file_attr(attr), 0),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut model = self.model();
        answer(
            reply,
            model
                .guard(Op::Unlink, name)
                .and_then(|()| model.unlink(parent, name, Kind::File)),
        );
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut model = self.model();
        answer(
            reply,
            model
                .guard(Op::Unlink, name)
                .and_then(|()| model.unlink(parent, name, Kind::Dir)),
        );
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        _flags: u32,
        reply: ReplyEmpty,
    ) {
        let mut model = self.model();
        answer(
            reply,
            model
                .guard(Op::Rename, name)
                .and_then(|()| model.rename(parent, name, new_parent, new_name)),
        );
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.model().attr(ino) {
            Ok(_) => reply.opened(ino, fuser::consts::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut model = self.model();
        let made = model
            .guard(Op::Create, name)
            .and_then(|()| model.create(parent, name, permissions(mode), Kind::File));
        match made {
            Ok(attr) => reply.created(
                &TTL,
                &file_attr(attr),
                0,
                attr.ino,
                fuser::consts::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let model = self.model();
        if model.read_fails(ino) {
            return reply.error(libc::EIO);
        }
        match model.read(ino, offset.max(0) as u64, size) {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut model = self.model();
        let name = model.name_of(ino);
        let written = model
            .guard(Op::Write, &name)
            .and_then(|()| model.write(ino, offset.max(0) as u64, data));
        match written {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _owner: u64, reply: ReplyEmpty) {
        // Closing a file syncs nothing.
        reply.ok();
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _flags: i32,
        _owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut model = self.model();
        let name = model.name_of(ino);
        answer(
            reply,
            model
                .guard(Op::Fsync, &name)
                .and_then(|()| model.fsync(ino)),
        );
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.model().attr(ino) {
            Ok(_) => reply.opened(ino, 0),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.model().entries(ino) {
            Ok(entries) => entries,
            Err(e) => return reply.error(e),
        };
        let dots = [(".".into(), ino, Kind::Dir), ("..".into(), ino, Kind::Dir)];
        let listed = dots.into_iter().chain(
            entries
                .into_iter()
                .map(|(name, attr)| (name, attr.ino, attr.kind)),
        );
        for (index, (name, child, kind)) in listed.enumerate().skip(offset.max(0) as usize) {
            let full = reply.add(child, (index + 1) as i64, file_type(kind), &name);
            if full {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut model = self.model();
        answer(
            reply,
            model
                .guard(Op::FsyncDir, OsStr::new(""))
                .and_then(|()| model.fsync_dir(ino)),
        );
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        match nix::sys::statvfs::statvfs(&self.backing_stats) {
            Ok(fs) => reply.statfs(
                fs.blocks(),
                fs.blocks_free(),
                fs.blocks_available(),
                fs.files(),
                fs.files_free(),
                fs.block_size() as u32,
                255,
                fs.fragment_size() as u32,
            ),
            Err(e) => reply.error(e as i32),
        }
    }
}

fn answer(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn file_attr(attr: Attr) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: attr.ino,
        size: attr.size,
        blocks: attr.size.div_ceil(512),
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind: file_type(attr.kind),
        perm: attr.mode,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
    }
}

fn permissions(mode: u32) -> u16 {
    (mode & 0o7777) as u16
}

/// Nothing the kernel learns is cached: after a cut it must ask again.
const TTL: Duration = Duration::ZERO;
