//! A file system that behaves like a disk at a power cut, in the spirit of LazyFS: what a
//! program made durable (`fsync`/`fdatasync` of a file; `fsync` of a directory for the
//! creates, renames and unlinks in it) survives a cut, everything else is dropped at the moment
//! the test chooses, and the last unsynced write of a file may be torn (a prefix kept). Tests
//! put a store on it, kill the process using it, cut, and look at what is left.
//!
//! It is an in-memory FUSE file system (`fuser`, no libfuse) served by the test process on
//! threads of its own and mounted at a temporary directory: `tree` is the state and its
//! durability rules, `content` a file's bytes, `fs` the FUSE requests. [`PowerCutFs`] is the
//! handle: [`PowerCutFs::mount`], [`PowerCutFs::path`], [`PowerCutFs::cut`],
//! [`PowerCutFs::counters`]. A cut unmounts (the kernel then drops every page, attribute and
//! name it cached from the mount), reverts the tree and mounts it again at the same path, so
//! what a program reads afterwards comes from the reverted state alone. Dropping the handle
//! unmounts, lazily with `fusermount3 -u -z` if a plain unmount does not work; every mount and
//! unmount is bounded in time. [`PowerCutFs::mount_with`] can relax the rule for directories
//! ([`Metadata::Journaled`], a diagnostic), [`PowerCutFs::cut_with`] choose how often writes
//! tear ([`Tear`]).
//!
//! Needs `/dev/fuse` and `fusermount3` (Debian's `fuse3`, which `.ci/setup` installs), and the
//! right to mount (root, as CI runs). Without them a test fails under `CI=true` and skips
//! loudly elsewhere, as with the other outside tools (`support::tools`).

mod content;
mod fs;
mod tree;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fuser::{BackgroundSession, Config, MountOption};

pub(crate) use tree::{Counters, CutReport, Metadata, Tear};

use crate::support::rng::Rng;
use crate::support::tools;
use fs::Fs;
use tree::Tree;

/// Longest wait for a mount to answer, or for an unmount to finish.
const MOUNT_LIMIT: Duration = Duration::from_secs(20);

/// A mounted power-cut file system; see the module docs.
pub(crate) struct PowerCutFs {
    tree: Arc<Mutex<Tree>>,
    session: Option<BackgroundSession>,
    path: PathBuf,
    fusermount: PathBuf,
    /// Holds the mount point; removed after the unmount (fields drop after `drop`).
    _dir: tempfile::TempDir,
}

impl PowerCutFs {
    /// An empty file system mounted at a new temporary directory, for `test`; `None` when
    /// FUSE cannot be used here (a failure under `CI=true`, see `support::tools`).
    pub(crate) fn mount(test: &str) -> Option<PowerCutFs> {
        PowerCutFs::mount_with(test, Metadata::Strict)
    }

    /// [`mount`](Self::mount), with directory entries made durable as `metadata` says.
    pub(crate) fn mount_with(test: &str, metadata: Metadata) -> Option<PowerCutFs> {
        if !Path::new("/dev/fuse").exists() {
            tools::missing("/dev/fuse does not exist (no FUSE in this kernel or container)", test);
            return None;
        }
        let fusermount = tools::require("fusermount3", test)?.path().to_owned();
        let dir = tempfile::tempdir().expect("tempdir for the mount point");
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).expect("mount point");
        let tree = Arc::new(Mutex::new(Tree::new(metadata)));
        let mut fs = PowerCutFs { tree, session: None, path, fusermount, _dir: dir };
        if let Err(e) = fs.mount_session() {
            tools::missing(&format!("cannot mount a FUSE file system at {}: {e}", fs.path.display()), test);
            return None;
        }
        Some(fs)
    }

    /// Where it is mounted.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What was done to it so far.
    pub(crate) fn counters(&self) -> Counters {
        self.tree.lock().unwrap_or_else(PoisonError::into_inner).counters.clone()
    }

    /// Turns the power off just after the next write lands, before the program can sync it:
    /// from then on every request fails with `EIO` and changes nothing. The receiver hears
    /// when that happened; the caller then kills the program and [`cut`](Self::cut)s, which
    /// drops (or tears) that write. Random moments in time seldom find a program with
    /// unsynced data when it syncs promptly; this finds it in the middle of a write.
    pub(crate) fn power_off_at_next_write(&self) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        self.tree.lock().unwrap_or_else(PoisonError::into_inner).off_at_write = Some(tx);
        rx
    }

    /// The power cut. The caller has already killed (and reaped) every process using the
    /// file system: this unmounts, drops what was not durable (keeping, at `rng`'s choice, a
    /// torn prefix of some files' last unsynced write) and mounts again at the same path.
    ///
    /// # Panics
    /// When the file system cannot be mounted again.
    pub(crate) fn cut(&mut self, rng: &mut Rng) -> CutReport {
        self.cut_with(rng, Tear::OneIn(3))
    }

    /// [`cut`](Self::cut), choosing how often a dirty file keeps a torn prefix of its last
    /// unsynced write.
    pub(crate) fn cut_with(&mut self, rng: &mut Rng, tear: Tear) -> CutReport {
        self.unmount();
        self.tree.lock().unwrap_or_else(PoisonError::into_inner).off_at_write = None;
        let report = self.tree.lock().unwrap_or_else(PoisonError::into_inner).cut(rng, tear);
        self.mount_session().unwrap_or_else(|e| panic!("cannot mount {} again after a cut: {e}", self.path.display()));
        report
    }

    /// Mounts the tree at `path`, as the tree's next mount. Bounded: the kernel's first
    /// request must arrive within [`MOUNT_LIMIT`].
    fn mount_session(&mut self) -> Result<(), String> {
        let mount = {
            let mut tree = self.tree.lock().unwrap_or_else(PoisonError::into_inner);
            tree.mounts += 1;
            tree.mounts
        };
        let fs = Fs { tree: self.tree.clone(), mount };
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("powercut".into()), MountOption::NoAtime];
        let path = self.path.clone();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(fuser::spawn_mount(fs, &path, &config));
        });
        match rx.recv_timeout(MOUNT_LIMIT) {
            Ok(Ok(session)) => {
                self.session = Some(session);
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => {
                self.lazy_unmount();
                Err(format!("the mount did not complete within {MOUNT_LIMIT:?}"))
            }
        }
    }

    /// Unmounts, bounded in time. The tree's mount count moves on first, so the old mount's
    /// server refuses anything still in flight; if the plain unmount fails or hangs (something
    /// still holds the mount), a lazy one detaches it.
    fn unmount(&mut self) {
        let Some(session) = self.session.take() else { return };
        self.tree.lock().unwrap_or_else(PoisonError::into_inner).mounts += 1;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(session.umount_and_join());
        });
        match rx.recv_timeout(MOUNT_LIMIT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("powercut fs: unmounting {} failed ({e}); detaching it lazily", self.path.display());
                self.lazy_unmount();
            }
            Err(_) => {
                eprintln!("powercut fs: unmounting {} hangs; detaching it lazily", self.path.display());
                self.lazy_unmount();
            }
        }
    }

    fn lazy_unmount(&self) {
        let status = std::process::Command::new(&self.fusermount).arg("-u").arg("-z").arg(&self.path).status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("powercut fs: `fusermount3 -u -z {}`: {status:?}", self.path.display());
        }
    }
}

impl Drop for PowerCutFs {
    fn drop(&mut self) {
        self.unmount();
    }
}
