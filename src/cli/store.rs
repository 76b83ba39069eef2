//! `store stats|verify|gc|export|import` and `verify`: maintenance of the data directory, through
//! the running service where a command can run there, refused while it runs where a command
//! would rewrite the store under it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use tributary::control::{self, wire};

use super::common::open_existing;
use super::online::{exit_with, through_service};

#[derive(Debug, Subcommand)]
pub(super) enum StoreCommand {
    /// Counts, bytes and the deduplication ratio.
    Stats,
    /// Re-hash every blob and cross-check every record; exit 1 on any mismatch.
    Verify,
    /// Remove blobs no record refers to.
    Gc,
    /// Write every table to FILE (JSON Lines; gzip when FILE ends in .gz; `-` for stdout), for
    /// backup, moving the store, and upgrading across store formats. Bitstreams stay where they
    /// are: the file names them by sha-256.
    Export {
        /// Where to write the export.
        file: PathBuf,
    },
    /// Rebuild the store's metadata from an export FILE (`.gz` read as gzip; `-` for stdin)
    /// over the bitstreams in the data directory: for restores, moves and upgrades from an
    /// older store format. The data directory may hold bitstreams and an older format's
    /// metadata, never a store of this format; an interrupted import leaves nothing that opens,
    /// and can be run again.
    Import {
        /// The export file.
        file: PathBuf,
    },
}

pub(super) fn run_store(
    cmd: StoreCommand,
    (dir, blobs): (PathBuf, Option<tributary::store::RemoteBlobs>),
) -> anyhow::Result<ExitCode> {
    let online = match &cmd {
        StoreCommand::Stats => Some(wire::Command::Stats),
        StoreCommand::Verify => Some(wire::Command::Verify),
        StoreCommand::Export { file } => return export(&dir, blobs, file),
        StoreCommand::Gc | StoreCommand::Import { .. } => {
            refuse_while_running(&dir, &cmd)?;
            None
        }
    };
    if let Some(code) = online.map(|c| through_service(&dir, c)).transpose()?.flatten() {
        return Ok(code);
    }
    if let StoreCommand::Import { file } = &cmd {
        return import_store(&dir, file);
    }
    // Read-only maintenance never creates a store: a mistyped path is an error, not an empty store.
    let store = open_existing(&dir, blobs)?;
    let out = &mut control::Console;
    let code = match cmd {
        StoreCommand::Stats => control::commands::stats(&store, out)?,
        StoreCommand::Verify => control::commands::verify(&store, out)?,
        StoreCommand::Gc => {
            println!("{}", store.gc()?);
            0
        }
        StoreCommand::Export { .. } | StoreCommand::Import { .. } => unreachable!("handled above"),
    };
    Ok(ExitCode::from(code))
}

/// `store gc` and `store import` rewrite the store under everything that reads it: they need
/// the service stopped, and say so rather than wait for the lock.
fn refuse_while_running(dir: &Path, cmd: &StoreCommand) -> anyhow::Result<()> {
    let Some(connection) = control::client::connect(dir)? else { return Ok(()) };
    drop(connection);
    let (what, why) = match cmd {
        StoreCommand::Gc => {
            ("store gc", "it rewrites packs and deletes blobs while the service may be serving or storing them")
        }
        _ => ("store import", "it replaces the metadata the service has open"),
    };
    anyhow::bail!(
        "a tributary service is running on {}: `tributary {what}` needs it stopped ({why}); stop the service, run the command, start the service again",
        dir.display()
    )
}

/// `store export FILE`: through the running service (one snapshot, while it harvests), or
/// from the stopped store.
fn export(dir: &Path, blobs: Option<tributary::store::RemoteBlobs>, file: &Path) -> anyhow::Result<ExitCode> {
    if let Some(connection) = control::client::connect(dir)? {
        let mut target = ExportFile::create(file)?;
        let mut sink = ExportSink { out: &mut target, value: None };
        let outcome = connection.call(wire::Command::Export, &mut sink);
        let value = sink.value.take();
        match outcome? {
            control::client::Outcome::Exit(0) => {
                let counts: tributary::store::ExportCounts =
                    serde_json::from_value(value.context("the service sent no export counts")?)?;
                target.commit()?;
                eprintln!("exported {} to {}:\n{counts}", dir.display(), file.display());
                return Ok(ExitCode::SUCCESS);
            }
            other => return Ok(exit_with(other)),
        }
    }
    let store = open_existing(dir, blobs)?;
    let mut target = ExportFile::create(file)?;
    let counts = store.export(target.writer(), file)?;
    target.commit()?;
    eprintln!("exported {} to {}:\n{counts}", dir.display(), file.display());
    Ok(ExitCode::SUCCESS)
}

/// The bytes of an export through the service, into its file.
struct ExportSink<'a> {
    out: &'a mut ExportFile,
    value: Option<serde_json::Value>,
}

impl control::client::Sink for ExportSink<'_> {
    fn stdout(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.writer().write_all(bytes)
    }

    fn stderr(&mut self, bytes: &[u8]) {
        let _ = std::io::stderr().lock().write_all(bytes);
    }

    fn value(&mut self, value: serde_json::Value) {
        self.value = Some(value);
    }
}

/// Where an export is written: stdout for `-`, else a file written beside its final name
/// (gzipped when the name ends in `.gz`) and renamed into place once complete and synced, so an
/// interrupted export never leaves a file that looks whole (the import also checks its `end`
/// line). Dropped without [`ExportFile::commit`], it removes what it wrote.
struct ExportFile {
    target: Target,
    tmp: PathBuf,
    file: PathBuf,
}

enum Target {
    Stdout(std::io::BufWriter<std::io::Stdout>),
    Plain(std::io::BufWriter<std::fs::File>),
    Gzip(flate2::write::GzEncoder<std::io::BufWriter<std::fs::File>>),
    Done,
}

impl ExportFile {
    fn create(file: &Path) -> anyhow::Result<ExportFile> {
        if file == Path::new("-") {
            let target = Target::Stdout(std::io::BufWriter::with_capacity(1 << 20, std::io::stdout()));
            return Ok(ExportFile { target, tmp: PathBuf::new(), file: file.to_path_buf() });
        }
        let name = file.file_name().context("the export file needs a name")?.to_string_lossy().into_owned();
        let tmp = file.with_file_name(format!(".{name}.partial"));
        let created = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let buffered = std::io::BufWriter::with_capacity(1 << 20, created);
        let target = match name.ends_with(".gz") {
            true => Target::Gzip(flate2::write::GzEncoder::new(buffered, flate2::Compression::fast())),
            false => Target::Plain(buffered),
        };
        Ok(ExportFile { target, tmp, file: file.to_path_buf() })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match &mut self.target {
            Target::Stdout(w) => w,
            Target::Plain(w) => w,
            Target::Gzip(w) => w,
            Target::Done => unreachable!("written after commit"),
        }
    }

    /// Flushes, syncs and renames the file into place.
    fn commit(mut self) -> anyhow::Result<()> {
        let cannot = |what: &str| format!("cannot {what} {}", self.tmp.display());
        let buffered = match std::mem::replace(&mut self.target, Target::Done) {
            Target::Stdout(mut w) => return w.flush().context("cannot write the export to stdout"),
            Target::Plain(w) => w,
            Target::Gzip(gz) => gz.finish().with_context(|| cannot("write"))?,
            Target::Done => return Ok(()),
        };
        let written = buffered.into_inner().map_err(|e| e.into_error()).with_context(|| cannot("write"))?;
        written.sync_all().with_context(|| cannot("sync"))?;
        std::fs::rename(&self.tmp, &self.file)
            .with_context(|| format!("cannot rename {} to {}", self.tmp.display(), self.file.display()))
    }
}

impl Drop for ExportFile {
    fn drop(&mut self) {
        if matches!(self.target, Target::Plain(_) | Target::Gzip(_)) {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Rebuilds the store at `dir` from the export `file` (stdin for `-`; gzip when it ends in `.gz`).
fn import_store(dir: &std::path::Path, file: &std::path::Path) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    use std::io::BufReader;
    let options = tributary::store::StoreOptions::default();
    let report = if file == std::path::Path::new("-") {
        tributary::store::import(dir, std::io::stdin().lock(), file, &options)?
    } else {
        let opened = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
        if file.extension().is_some_and(|e| e == "gz") {
            let gz = flate2::read::GzDecoder::new(BufReader::with_capacity(1 << 20, opened));
            tributary::store::import(dir, BufReader::with_capacity(1 << 20, gz), file, &options)?
        } else {
            tributary::store::import(dir, BufReader::with_capacity(1 << 20, opened), file, &options)?
        }
    };
    eprintln!("{report}");
    Ok(ExitCode::SUCCESS)
}
