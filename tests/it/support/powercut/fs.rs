//! The FUSE side of the power-cut file system: each kernel request becomes one call on the
//! shared [`Tree`], under its lock, and its answer. One instance serves one mount; the tree
//! outlives it, so a cut can unmount, change the tree and mount a new instance on it.
//!
//! Nothing is cached on this side, and the kernel's caches are made harmless: without
//! `FUSE_WRITEBACK_CACHE` (fuser does not ask for it) every write reaches the tree before
//! `write(2)` returns, and a cut unmounts, which drops the kernel's pages, attributes and
//! names of the old mount. Locks (`flock`, `fcntl`) are not asked for either
//! (`FUSE_POSIX_LOCKS`, `FUSE_FLOCK_LOCKS`), so the kernel keeps them itself, per mount.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    IoctlFlags, LockOwner, OpenFlags, PollEvents, PollFlags, PollNotifier, RenameFlags, ReplyAttr, ReplyBmap,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock,
    ReplyLseek, ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::tree::{NewKind, SetAttr, Tree};

/// How long the kernel may keep names and attributes. Only this mount changes the tree, and
/// a cut unmounts before it changes anything, so any length is right; a long one saves
/// lookups.
const TTL: Duration = Duration::from_secs(60);

/// `ENODATA`: "no such attribute", from `getxattr` and `removexattr`.
const NO_ATTRIBUTE: Errno = Errno::ENODATA;

/// One mount's server. `mount` is the number of the mount it serves: once a cut has begun
/// (which bumps the tree's count), a request still reaching an old mount (lazily detached
/// because something held it) fails with `EIO` and changes nothing.
pub(super) struct Fs {
    pub(super) tree: Arc<Mutex<Tree>>,
    pub(super) mount: u64,
}

impl Fs {
    fn tree(&self) -> Result<MutexGuard<'_, Tree>, Errno> {
        let tree = self.tree.lock().unwrap_or_else(PoisonError::into_inner);
        if tree.mounts != self.mount {
            return Err(Errno::EIO);
        }
        Ok(tree)
    }

    /// Runs `op` on the tree; an error if this mount is stale.
    fn with<T>(&self, op: impl FnOnce(&mut Tree) -> Result<T, Errno>) -> Result<T, Errno> {
        op(&mut *self.tree()?)
    }

    fn unsupported(&self, op: &'static str) -> Errno {
        if let Ok(mut tree) = self.tree() {
            tree.unsupported(op);
        }
        Errno::ENOSYS
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

fn entry(reply: ReplyEntry, result: Result<fuser::FileAttr, Errno>) {
    match result {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(reply, self.with(|t| t.lookup(parent.0, name)));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|t| t.attr(ino.0)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = SetAttr { mode, uid, gid, size, atime: atime.map(time), mtime: mtime.map(time) };
        match self.with(|t| t.setattr(ino.0, change)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.with(|t| t.readlink(ino.0)) {
            Ok(target) => reply.data(std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str())),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files only: nothing under test makes devices, fifos or sockets here.
        if mode & 0o170000 != 0o100000 {
            return reply.error(self.unsupported("mknod of a special file"));
        }
        entry(reply, self.with(|t| t.make(parent.0, name, NewKind::File(mode & !umask), (req.uid(), req.gid()))));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        entry(reply, self.with(|t| t.make(parent.0, name, NewKind::Dir(mode & !umask), (req.uid(), req.gid()))));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.with(|t| t.unlink(parent.0, name)));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.with(|t| t.rmdir(parent.0, name)));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let kind = NewKind::Symlink(target.as_os_str().to_owned());
        entry(reply, self.with(|t| t.make(parent.0, link_name, kind, (req.uid(), req.gid()))));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.with(|t| t.rename((parent.0, name), (newparent.0, newname), flags)));
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        entry(reply, self.with(|t| t.link(ino.0, newparent.0, newname)));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|t| t.open(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.with(|t| t.read(ino.0, offset, size)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = self.with(|t| {
            let n = t.write(ino.0, offset, data)?;
            // The power goes off right after this write: it is in the page cache, not on the
            // disk, and every later request fails as the stale mount's do, so nothing the
            // program does from now on (the fsync that would follow, above all) lands.
            if let Some(off) = t.off_at_write.take() {
                t.mounts += 1;
                let _ = off.send(());
            }
            Ok(n)
        });
        match written {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    /// `close(2)`: nothing to do; closing makes nothing durable.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        empty(reply, self.with(|_| Ok(())));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.with(|t| t.release(fh.0)));
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        empty(reply, self.with(|t| t.fsync(ino.0, datasync)));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|t| t.opendir(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        match self.with(|t| t.readdir(fh.0, offset)) {
            Ok(entries) => {
                for (next, ino, kind, name) in entries {
                    if reply.add(INodeNo(ino), next, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let listed = self.with(|t| {
            let entries = t.readdir(fh.0, offset)?;
            Ok(entries.into_iter().filter_map(|(next, ino, _, name)| Some((next, t.attr(ino).ok()?, name))).collect())
        });
        match listed {
            Ok(entries) => {
                let entries: Vec<(u64, fuser::FileAttr, std::ffi::OsString)> = entries;
                for (next, attr, name) in entries {
                    if reply.add(attr.ino, next, name, &TTL, &attr, Generation(0)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        empty(reply, self.with(|t| t.release(fh.0)));
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        empty(reply, self.with(|t| t.fsyncdir(ino.0)));
    }

    /// Room enough for anything a test writes: the tree lives in memory.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        const BLOCKS: u64 = 1 << 24;
        reply.statfs(BLOCKS, BLOCKS, BLOCKS, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        empty(reply, self.with(|_| Ok(())));
    }

    /// No extended attributes: the kernel asks for `security.capability` before writes.
    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(NO_ATTRIBUTE);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 { reply.size(0) } else { reply.data(&[]) }
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(NO_ATTRIBUTE);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let made = self.with(|t| {
            let attr = t.make(parent.0, name, NewKind::File(mode & !umask), (req.uid(), req.gid()))?;
            Ok((attr, t.open(attr.ino.0)?))
        });
        match made {
            Ok((attr, fh)) => reply.created(&TTL, &attr, Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.with(|t| t.fallocate(ino.0, offset, length, mode)));
    }

    // What follows is not implemented: each says so on stderr the first time it is asked for,
    // and the counters keep the tally, so a program that needs one is noticed.

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        reply.error(self.unsupported("getlk"));
    }

    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        _sleep: bool,
        reply: ReplyEmpty,
    ) {
        reply.error(self.unsupported("setlk"));
    }

    fn bmap(&self, _req: &Request, _ino: INodeNo, _blocksize: u32, _idx: u64, reply: ReplyBmap) {
        reply.error(self.unsupported("bmap"));
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(self.unsupported("ioctl"));
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: PollNotifier,
        _events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        reply.error(self.unsupported("poll"));
    }

    /// `ENOSYS` makes the kernel seek by itself from then on (`SEEK_DATA` and `SEEK_HOLE`
    /// then treat the whole file as data, which is true enough here).
    fn lseek(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _offset: i64, _whence: i32, reply: ReplyLseek) {
        reply.error(self.unsupported("lseek"));
    }

    /// `ENOSYS` makes the kernel copy through reads and writes instead.
    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(self.unsupported("copy_file_range"));
    }
}
