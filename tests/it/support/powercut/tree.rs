//! The power-cut file system's state, without FUSE: inodes, directory entries, open handles,
//! and for every file and directory both what it holds now and what a power cut would leave.
//!
//! Durability follows POSIX strictly, as a disk with a volatile cache does: `fsync` or
//! `fdatasync` of a file makes its content and size durable, and nothing else; `fsync` of a
//! directory makes its entries durable (the creates, renames and unlinks in it), and nothing
//! else. A new file or directory is reachable after a cut only if every directory on its path
//! was synced after the name was made. [`Tree::cut`] is the cut itself: every file back to its
//! durable content (with, at random, a torn prefix of its last unsynced write), every
//! directory back to its durable entries, unreachable inodes gone. [`Metadata::Journaled`]
//! relaxes the rule for directories (any sync makes every entry durable), as a diagnostic.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

use fuser::{Errno, FileAttr, FileType, INodeNo, RenameFlags};

use super::content::Content;
use crate::support::rng::Rng;

/// The root directory's inode, as FUSE numbers it.
pub(super) const ROOT: u64 = 1;

/// `fallocate` modes (linux/falloc.h).
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// Which dirty files keep a torn prefix of their last unsynced write at a cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tear {
    Never,
    Always,
    /// One in this many, at random.
    OneIn(u64),
}

/// When directory entries become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Metadata {
    /// Strict POSIX: an entry is durable once its own directory is synced.
    #[default]
    Strict,
    /// As ext4 and XFS do in practice: any sync commits the metadata journal, and with it
    /// every entry made so far in every directory. File content is still durable only once
    /// the file itself is synced. Not what POSIX promises; a diagnostic, to tell a missing
    /// directory sync from a missing file sync.
    Journaled,
}

/// What was done to the file system, from its mount on. Tests read it to see that a cut
/// really dropped something, and that the program under test really synced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) writes: u64,
    pub(crate) bytes_written: u64,
    pub(crate) fsyncs: u64,
    pub(crate) fdatasyncs: u64,
    pub(crate) fsyncdirs: u64,
    pub(crate) cuts: u64,
    /// Operations the file system does not implement, by name, with how often each was asked.
    pub(crate) unsupported: BTreeMap<&'static str, u64>,
    /// What the last cut dropped.
    pub(crate) last_cut: CutReport,
}

/// What one cut dropped or kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CutReport {
    /// Files whose content or size was not all durable.
    pub(crate) files_reverted: u64,
    /// Bytes written since each file's last sync and not kept.
    pub(crate) bytes_dropped: u64,
    /// Files that kept a torn prefix of their last unsynced write.
    pub(crate) torn_writes: u64,
    /// Bytes kept in those prefixes.
    pub(crate) torn_bytes_kept: u64,
    /// Directory entries made or changed since their directory's last sync, undone.
    pub(crate) entries_dropped: u64,
    /// Directory entries removed since their directory's last sync, back again.
    pub(crate) entries_restored: u64,
    /// Inodes no durable path reaches any more.
    pub(crate) inodes_dropped: u64,
    /// Paths of the files reverted and of the entries undone or back (at most
    /// [`PATHS_SHOWN`] of each), as they were named before the cut.
    pub(crate) files: Vec<String>,
    pub(crate) entries: Vec<String>,
}

/// Paths a [`CutReport`] names at most, of each kind.
const PATHS_SHOWN: usize = 40;

impl CutReport {
    /// Whether the cut lost or changed anything at all.
    pub(crate) fn dropped_anything(&self) -> bool {
        self.bytes_dropped > 0 || self.files_reverted > 0 || self.entries_dropped > 0 || self.entries_restored > 0
    }
}

impl std::fmt::Display for CutReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} files reverted ({} unsynced bytes dropped, {} torn writes keeping {} bytes), {} directory entries \
             undone, {} removed entries back, {} inodes unreachable",
            self.files_reverted,
            self.bytes_dropped,
            self.torn_writes,
            self.torn_bytes_kept,
            self.entries_dropped,
            self.entries_restored,
            self.inodes_dropped
        )
    }
}

#[derive(Debug)]
struct File {
    now: Content,
    durable: Content,
    /// The last write since the last sync, if nothing else changed the file after it: what
    /// a cut may tear.
    last_write: Option<(u64, Vec<u8>)>,
    /// Bytes written, and whether the size changed, since the last sync.
    unsynced_bytes: u64,
    dirty: bool,
}

#[derive(Debug)]
struct Dir {
    now: BTreeMap<OsString, u64>,
    durable: BTreeMap<OsString, u64>,
    parent: u64,
}

#[derive(Debug)]
enum Kind {
    File(File),
    Dir(Dir),
    /// A symbolic link's target is written with its inode, so it is as durable as its name.
    Symlink(OsString),
}

#[derive(Debug)]
struct Node {
    kind: Kind,
    perm: u16,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    /// Entries naming it now, and in directories' durable entries.
    links: u32,
    durable_links: u32,
    /// Open handles.
    open: u32,
}

impl Node {
    fn new(kind: Kind, perm: u16, uid: u32, gid: u32) -> Node {
        let now = SystemTime::now();
        Node { kind, perm, uid, gid, atime: now, mtime: now, ctime: now, links: 0, durable_links: 0, open: 0 }
    }

    fn file_type(&self) -> FileType {
        match self.kind {
            Kind::File(_) => FileType::RegularFile,
            Kind::Dir(_) => FileType::Directory,
            Kind::Symlink(_) => FileType::Symlink,
        }
    }

    fn size(&self) -> u64 {
        match &self.kind {
            Kind::File(f) => f.now.len(),
            Kind::Dir(d) => d.now.len() as u64,
            Kind::Symlink(t) => t.len() as u64,
        }
    }

    fn touch(&mut self) {
        let now = SystemTime::now();
        self.mtime = now;
        self.ctime = now;
    }
}

/// An open handle: a file, or a directory with the entries it had when it was opened (so a
/// listing interrupted by changes neither skips nor repeats a name).
#[derive(Debug)]
enum Handle {
    File(u64),
    Dir(u64, Vec<(u64, FileType, OsString)>),
}

/// The whole file system. See the module docs.
#[derive(Debug)]
pub(super) struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    pub(super) counters: Counters,
    /// Mounts so far: each mount's server serves only while this is its number (see `fs`).
    pub(super) mounts: u64,
    metadata: Metadata,
    /// Set by [`PowerCutFs::power_off_at_next_write`](super::PowerCutFs::power_off_at_next_write):
    /// told once the next write has landed (unsynced) and the power is off.
    pub(super) off_at_write: Option<std::sync::mpsc::Sender<()>>,
}

type Res<T> = Result<T, Errno>;

impl Tree {
    /// An empty file system: the root directory, durable.
    pub(super) fn new(metadata: Metadata) -> Tree {
        let root = Dir { now: BTreeMap::new(), durable: BTreeMap::new(), parent: ROOT };
        let mut node = Node::new(Kind::Dir(root), 0o755, 0, 0);
        node.links = 1;
        node.durable_links = 1;
        Tree {
            nodes: HashMap::from([(ROOT, node)]),
            next_ino: ROOT + 1,
            handles: HashMap::new(),
            next_fh: 1,
            counters: Counters::default(),
            mounts: 0,
            metadata,
            off_at_write: None,
        }
    }

    fn node(&self, ino: u64) -> Res<&Node> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Res<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn dir(&self, ino: u64) -> Res<&Dir> {
        match &self.node(ino)?.kind {
            Kind::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Res<&mut Dir> {
        match &mut self.node_mut(ino)?.kind {
            Kind::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Res<&mut File> {
        match &mut self.node_mut(ino)?.kind {
            Kind::File(f) => Ok(f),
            Kind::Dir(_) => Err(Errno::EISDIR),
            Kind::Symlink(_) => Err(Errno::EINVAL),
        }
    }

    /// What `stat` shows of `ino`.
    pub(super) fn attr(&self, ino: u64) -> Res<FileAttr> {
        let n = self.node(ino)?;
        let size = n.size();
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: n.atime,
            mtime: n.mtime,
            ctime: n.ctime,
            crtime: n.ctime,
            kind: n.file_type(),
            perm: n.perm,
            nlink: if matches!(n.kind, Kind::Dir(_)) { 2 } else { n.links.max(1) },
            uid: n.uid,
            gid: n.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    pub(super) fn lookup(&self, parent: u64, name: &OsStr) -> Res<FileAttr> {
        let ino = *self.dir(parent)?.now.get(name).ok_or(Errno::ENOENT)?;
        self.attr(ino)
    }

    /// `chmod`, `chown`, `truncate`, `utimes`, in one call as FUSE sends them.
    pub(super) fn setattr(&mut self, ino: u64, change: SetAttr) -> Res<FileAttr> {
        if let Some(size) = change.size {
            let f = self.file_mut(ino)?;
            f.now.set_len(size);
            f.dirty = true;
            f.last_write = None;
        }
        let n = self.node_mut(ino)?;
        if let Some(mode) = change.mode {
            n.perm = (mode & 0o7777) as u16;
        }
        n.uid = change.uid.unwrap_or(n.uid);
        n.gid = change.gid.unwrap_or(n.gid);
        n.atime = change.atime.unwrap_or(n.atime);
        n.mtime = change.mtime.unwrap_or(n.mtime);
        n.ctime = SystemTime::now();
        self.attr(ino)
    }

    /// A new inode named `name` in `parent` (not durable until `parent` is synced).
    pub(super) fn make(&mut self, parent: u64, name: &OsStr, kind: NewKind, who: (u32, u32)) -> Res<FileAttr> {
        if self.dir(parent)?.now.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let (kind, perm) = match kind {
            NewKind::File(mode) => (Kind::File(File::empty()), mode),
            NewKind::Dir(mode) => (Kind::Dir(Dir { now: BTreeMap::new(), durable: BTreeMap::new(), parent }), mode),
            NewKind::Symlink(target) => (Kind::Symlink(target), 0o777),
        };
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, Node::new(kind, (perm & 0o7777) as u16, who.0, who.1));
        self.add_entry(parent, name, ino)?;
        self.attr(ino)
    }

    pub(super) fn link(&mut self, ino: u64, parent: u64, name: &OsStr) -> Res<FileAttr> {
        if matches!(self.node(ino)?.kind, Kind::Dir(_)) {
            return Err(Errno::EPERM);
        }
        if self.dir(parent)?.now.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        self.add_entry(parent, name, ino)?;
        self.attr(ino)
    }

    pub(super) fn readlink(&self, ino: u64) -> Res<OsString> {
        match &self.node(ino)?.kind {
            Kind::Symlink(t) => Ok(t.clone()),
            _ => Err(Errno::EINVAL),
        }
    }

    fn add_entry(&mut self, parent: u64, name: &OsStr, ino: u64) -> Res<()> {
        self.dir_mut(parent)?.now.insert(name.to_owned(), ino);
        self.node_mut(ino)?.links += 1;
        self.node_mut(parent)?.touch();
        Ok(())
    }

    /// Removes the entry `name` from `parent`; the inode stays while a durable entry or an
    /// open handle still needs it.
    fn remove_entry(&mut self, parent: u64, name: &OsStr) -> Res<u64> {
        let ino = self.dir_mut(parent)?.now.remove(name).ok_or(Errno::ENOENT)?;
        self.node_mut(parent)?.touch();
        let n = self.node_mut(ino)?;
        n.links = n.links.saturating_sub(1);
        n.ctime = SystemTime::now();
        self.forget_if_unused(ino);
        Ok(ino)
    }

    /// Frees a file no entry, durable or not, and no handle refers to. Directories stay
    /// until the next cut: they are few, and a cut sorts out which survive.
    fn forget_if_unused(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get(&ino)
            && !matches!(n.kind, Kind::Dir(_))
            && n.links == 0
            && n.durable_links == 0
            && n.open == 0
        {
            self.nodes.remove(&ino);
        }
    }

    pub(super) fn unlink(&mut self, parent: u64, name: &OsStr) -> Res<()> {
        let ino = *self.dir(parent)?.now.get(name).ok_or(Errno::ENOENT)?;
        if matches!(self.node(ino)?.kind, Kind::Dir(_)) {
            return Err(Errno::EISDIR);
        }
        self.remove_entry(parent, name).map(drop)
    }

    pub(super) fn rmdir(&mut self, parent: u64, name: &OsStr) -> Res<()> {
        let ino = *self.dir(parent)?.now.get(name).ok_or(Errno::ENOENT)?;
        if !self.dir(ino)?.now.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.remove_entry(parent, name).map(drop)
    }

    /// `rename(2)` and `renameat2(2)`'s `RENAME_NOREPLACE` and `RENAME_EXCHANGE`. Durable in
    /// each of the two directories once that directory is synced.
    pub(super) fn rename(&mut self, from: (u64, &OsStr), to: (u64, &OsStr), flags: RenameFlags) -> Res<()> {
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        let src = *self.dir(from.0)?.now.get(from.1).ok_or(Errno::ENOENT)?;
        let dst = self.dir(to.0)?.now.get(to.1).copied();
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let dst = dst.ok_or(Errno::ENOENT)?;
            return self.exchange(from, to, src, dst);
        }
        if dst.is_some() && flags.contains(RenameFlags::RENAME_NOREPLACE) {
            return Err(Errno::EEXIST);
        }
        if dst == Some(src) {
            return Ok(());
        }
        let moving_dir = matches!(self.node(src)?.kind, Kind::Dir(_));
        if moving_dir && self.is_within(to.0, src)? {
            return Err(Errno::EINVAL);
        }
        if let Some(dst) = dst {
            match (moving_dir, &self.node(dst)?.kind) {
                (true, Kind::Dir(d)) if !d.now.is_empty() => return Err(Errno::ENOTEMPTY),
                (true, Kind::Dir(_)) | (false, Kind::File(_) | Kind::Symlink(_)) => {}
                (true, _) => return Err(Errno::ENOTDIR),
                (false, Kind::Dir(_)) => return Err(Errno::EISDIR),
            }
            self.remove_entry(to.0, to.1)?;
        }
        // The new name first: with the old one gone first, an unsynced file would have no
        // name at all for a moment, and be freed.
        self.add_entry(to.0, to.1, src)?;
        self.remove_entry(from.0, from.1)?;
        if moving_dir {
            self.dir_mut(src)?.parent = to.0;
        }
        Ok(())
    }

    fn exchange(&mut self, from: (u64, &OsStr), to: (u64, &OsStr), src: u64, dst: u64) -> Res<()> {
        if self.is_within(to.0, src)? || self.is_within(from.0, dst)? {
            return Err(Errno::EINVAL);
        }
        self.dir_mut(from.0)?.now.insert(from.1.to_owned(), dst);
        self.dir_mut(to.0)?.now.insert(to.1.to_owned(), src);
        for (ino, parent) in [(src, to.0), (dst, from.0)] {
            if let Kind::Dir(d) = &mut self.node_mut(ino)?.kind {
                d.parent = parent;
            }
        }
        self.node_mut(from.0)?.touch();
        self.node_mut(to.0)?.touch();
        Ok(())
    }

    /// Whether directory `ino` is `ancestor` or below it.
    fn is_within(&self, mut ino: u64, ancestor: u64) -> Res<bool> {
        for _ in 0..=self.nodes.len() {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == ROOT {
                return Ok(false);
            }
            ino = self.dir(ino)?.parent;
        }
        Ok(false)
    }

    pub(super) fn open(&mut self, ino: u64) -> Res<u64> {
        let n = self.node_mut(ino)?;
        if !matches!(n.kind, Kind::File(_)) {
            return Err(Errno::EISDIR);
        }
        n.open += 1;
        Ok(self.new_handle(Handle::File(ino)))
    }

    pub(super) fn opendir(&mut self, ino: u64) -> Res<u64> {
        let d = self.dir(ino)?;
        let mut entries = vec![(ino, FileType::Directory, ".".into()), (d.parent, FileType::Directory, "..".into())];
        for (name, child) in &d.now {
            entries.push((*child, self.node(*child)?.file_type(), name.clone()));
        }
        self.node_mut(ino)?.open += 1;
        Ok(self.new_handle(Handle::Dir(ino, entries)))
    }

    fn new_handle(&mut self, h: Handle) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, h);
        fh
    }

    /// Closes a file or directory handle (one already gone is no error: a cut closes all).
    pub(super) fn release(&mut self, fh: u64) -> Res<()> {
        let ino = match self.handles.remove(&fh) {
            Some(Handle::File(ino) | Handle::Dir(ino, _)) => ino,
            None => return Ok(()),
        };
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.open = n.open.saturating_sub(1);
        }
        self.forget_if_unused(ino);
        Ok(())
    }

    /// The entries of an open directory from position `offset` on: `(next offset, inode,
    /// type, name)`.
    pub(super) fn readdir(&self, fh: u64, offset: u64) -> Res<Vec<(u64, u64, FileType, OsString)>> {
        let Some(Handle::Dir(_, entries)) = self.handles.get(&fh) else { return Err(Errno::EBADF) };
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        Ok(entries
            .iter()
            .enumerate()
            .skip(from)
            .map(|(i, (ino, t, name))| (i as u64 + 1, *ino, *t, name.clone()))
            .collect())
    }

    pub(super) fn read(&self, ino: u64, offset: u64, size: u32) -> Res<Vec<u8>> {
        match &self.node(ino)?.kind {
            Kind::File(f) => Ok(f.now.read(offset, size as usize)),
            Kind::Dir(_) => Err(Errno::EISDIR),
            Kind::Symlink(_) => Err(Errno::EINVAL),
        }
    }

    pub(super) fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Res<u32> {
        let f = self.file_mut(ino)?;
        f.now.write(offset, data);
        f.dirty = true;
        f.unsynced_bytes += data.len() as u64;
        f.last_write = Some((offset, data.to_vec()));
        self.node_mut(ino)?.touch();
        self.counters.writes += 1;
        self.counters.bytes_written += data.len() as u64;
        Ok(data.len() as u32)
    }

    /// `fallocate(2)`: reserving space (which this file system has no use for) may grow the
    /// file; punching a hole or zeroing a range writes zeros.
    pub(super) fn fallocate(&mut self, ino: u64, offset: u64, len: u64, mode: i32) -> Res<()> {
        let f = self.file_mut(ino)?;
        let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
        let zeroes = match mode & !FALLOC_FL_KEEP_SIZE {
            0 if mode == 0 || mode == FALLOC_FL_KEEP_SIZE => false,
            FALLOC_FL_PUNCH_HOLE if mode & FALLOC_FL_KEEP_SIZE != 0 => true,
            FALLOC_FL_ZERO_RANGE => true,
            _ => return Err(Errno::EOPNOTSUPP),
        };
        if zeroes {
            f.now.zero(offset, len);
        }
        let grows = mode & FALLOC_FL_KEEP_SIZE == 0 && end > f.now.len();
        if grows {
            f.now.set_len(end);
        }
        if zeroes || grows {
            f.dirty = true;
            f.last_write = None;
        }
        Ok(())
    }

    /// `fsync` (`datasync` false) or `fdatasync` of a file: its content and size are durable.
    pub(super) fn fsync(&mut self, ino: u64, datasync: bool) -> Res<()> {
        if datasync {
            self.counters.fdatasyncs += 1;
        } else {
            self.counters.fsyncs += 1;
        }
        match &mut self.node_mut(ino)?.kind {
            Kind::File(f) => f.sync(),
            // An fsync of a directory's descriptor may come as a file fsync on some paths.
            Kind::Dir(_) => return self.fsyncdir(ino),
            Kind::Symlink(_) => {}
        }
        self.commit_journal();
        Ok(())
    }

    /// `fsync` of a directory: its entries as they are now are durable.
    pub(super) fn fsyncdir(&mut self, ino: u64) -> Res<()> {
        self.counters.fsyncdirs += 1;
        self.sync_entries(ino)?;
        self.commit_journal();
        Ok(())
    }

    /// With [`Metadata::Journaled`], every directory's entries become durable.
    fn commit_journal(&mut self) {
        if self.metadata == Metadata::Journaled {
            let dirs: Vec<u64> =
                self.nodes.iter().filter(|(_, n)| matches!(n.kind, Kind::Dir(_))).map(|(ino, _)| *ino).collect();
            for dir in dirs {
                let _ = self.sync_entries(dir);
            }
        }
    }

    /// Makes `ino`'s entries durable as they are now, counting links to match.
    fn sync_entries(&mut self, ino: u64) -> Res<()> {
        let d = self.dir_mut(ino)?;
        if d.durable == d.now {
            return Ok(());
        }
        let before = std::mem::replace(&mut d.durable, d.now.clone());
        let after = d.durable.clone();
        for (name, old) in &before {
            if after.get(name) != Some(old)
                && let Ok(n) = self.node_mut(*old)
            {
                n.durable_links = n.durable_links.saturating_sub(1);
            }
        }
        for (name, new) in &after {
            if before.get(name) != Some(new)
                && let Ok(n) = self.node_mut(*new)
            {
                n.durable_links += 1;
            }
        }
        for old in before.values() {
            self.forget_if_unused(*old);
        }
        Ok(())
    }

    pub(super) fn unsupported(&mut self, op: &'static str) {
        let n = self.counters.unsupported.entry(op).or_default();
        *n += 1;
        if *n == 1 {
            eprintln!("powercut fs: `{op}` is not implemented; answered ENOSYS");
        }
    }

    /// The power cut: see the module docs. The caller has unmounted the file system, so no
    /// handle is open any more.
    pub(super) fn cut(&mut self, rng: &mut Rng, tear: Tear) -> CutReport {
        let mut report = CutReport::default();
        let paths = self.paths();
        let path = |ino: &u64| paths.get(ino).map_or("(unnamed)", String::as_str);
        self.handles.clear();
        let mut inos: Vec<u64> = self.nodes.keys().copied().collect();
        // In path order, so that the report's paths come sorted and the same seed tears the
        // same files.
        inos.sort_by_key(|ino| path(ino).to_owned());
        for ino in inos {
            let n = self.nodes.get_mut(&ino).unwrap();
            n.open = 0;
            match &mut n.kind {
                Kind::File(f) => {
                    let kept_before = report.torn_bytes_kept;
                    if f.revert(rng, tear, &mut report) && report.files.len() < PATHS_SHOWN {
                        let kept = report.torn_bytes_kept - kept_before;
                        let torn = if kept > 0 { format!(" (torn: {kept} bytes kept)") } else { String::new() };
                        report.files.push(format!("{}{torn}", path(&ino)));
                    }
                }
                Kind::Dir(d) => {
                    for name in d.revert(&mut report) {
                        if report.entries.len() < PATHS_SHOWN {
                            report.entries.push(format!("{}/{}", path(&ino), name.to_string_lossy()));
                        }
                    }
                }
                Kind::Symlink(_) => {}
            }
        }
        report.inodes_dropped = self.drop_unreachable();
        self.counters.cuts += 1;
        self.counters.last_cut = report.clone();
        report
    }

    /// Every inode's path (one of them) through the entries as they are now, from the root
    /// (`""`); unnamed inodes have none.
    fn paths(&self) -> HashMap<u64, String> {
        let mut paths = HashMap::from([(ROOT, String::new())]);
        let mut queue = VecDeque::from([ROOT]);
        while let Some(dir) = queue.pop_front() {
            let Some(Node { kind: Kind::Dir(d), .. }) = self.nodes.get(&dir) else { continue };
            let base = paths[&dir].clone();
            for (name, ino) in &d.now {
                if !paths.contains_key(ino) {
                    paths.insert(*ino, format!("{base}/{}", name.to_string_lossy()));
                    queue.push_back(*ino);
                }
            }
        }
        paths
    }

    /// Keeps what a walk from the root through the (now durable) entries reaches, and counts
    /// every node's links again. A directory reached twice (renamed from one synced directory
    /// into another and both synced, but not atomically) keeps its first name, as a file
    /// system checker would leave it; returns how many inodes were dropped.
    fn drop_unreachable(&mut self) -> u64 {
        let mut seen = HashSet::from([ROOT]);
        let mut queue = VecDeque::from([ROOT]);
        let mut links: HashMap<u64, u32> = HashMap::from([(ROOT, 1)]);
        while let Some(dir) = queue.pop_front() {
            let entries: Vec<(OsString, u64)> = match &self.nodes[&dir].kind {
                Kind::Dir(d) => d.now.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                _ => continue,
            };
            for (name, ino) in entries {
                let is_dir = matches!(self.nodes.get(&ino).map(|n| &n.kind), Some(Kind::Dir(_)));
                if is_dir && seen.contains(&ino) {
                    let Kind::Dir(d) = &mut self.nodes.get_mut(&dir).unwrap().kind else { unreachable!() };
                    d.now.remove(&name);
                    d.durable.remove(&name);
                    continue;
                }
                *links.entry(ino).or_default() += 1;
                if seen.insert(ino) && is_dir {
                    if let Some(Node { kind: Kind::Dir(d), .. }) = self.nodes.get_mut(&ino) {
                        d.parent = dir;
                    }
                    queue.push_back(ino);
                }
            }
        }
        let before = self.nodes.len();
        self.nodes.retain(|ino, _| seen.contains(ino));
        for (ino, n) in &mut self.nodes {
            n.links = links[ino];
            n.durable_links = links[ino];
        }
        (before - self.nodes.len()) as u64
    }
}

impl File {
    fn empty() -> File {
        File { now: Content::default(), durable: Content::default(), last_write: None, unsynced_bytes: 0, dirty: false }
    }

    fn sync(&mut self) {
        self.durable = self.now.clone();
        self.last_write = None;
        self.unsynced_bytes = 0;
        self.dirty = false;
    }

    /// Back to the durable content; as `tear` says, with a prefix of its last unsynced write
    /// (1 byte to all of it), as a sector-by-sector write cut off midway leaves.
    fn revert(&mut self, rng: &mut Rng, tear: Tear, report: &mut CutReport) -> bool {
        if !self.dirty {
            return false;
        }
        report.files_reverted += 1;
        let mut content = self.durable.clone();
        let mut kept = 0;
        if let Some((offset, data)) = &self.last_write
            && !data.is_empty()
            && match tear {
                Tear::Never => false,
                Tear::Always => true,
                Tear::OneIn(n) => rng.below(n.max(1)) == 0,
            }
        {
            kept = 1 + rng.below(data.len() as u64);
            content.write(*offset, &data[..kept as usize]);
            report.torn_writes += 1;
            report.torn_bytes_kept += kept;
        }
        report.bytes_dropped += self.unsynced_bytes.saturating_sub(kept);
        self.now = content;
        self.sync();
        true
    }
}

impl Dir {
    /// Back to the durable entries; returns the names that changed.
    fn revert(&mut self, report: &mut CutReport) -> Vec<OsString> {
        let mut changed = Vec::new();
        for (name, ino) in &self.now {
            if self.durable.get(name) != Some(ino) {
                report.entries_dropped += 1;
                changed.push(name.clone());
            }
        }
        for name in self.durable.keys().filter(|name| !self.now.contains_key(*name)) {
            report.entries_restored += 1;
            changed.push(name.clone());
        }
        self.now = self.durable.clone();
        changed
    }
}

/// What [`Tree::make`] makes.
pub(super) enum NewKind {
    File(u32),
    Dir(u32),
    Symlink(OsString),
}

/// The changes of one `setattr`; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub(super) struct SetAttr {
    pub(super) mode: Option<u32>,
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) size: Option<u64>,
    pub(super) atime: Option<SystemTime>,
    pub(super) mtime: Option<SystemTime>,
}
