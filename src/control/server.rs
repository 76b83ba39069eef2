//! The service's end of the control channel: a Unix socket in the data directory, readable
//! and writable by its owner only, where each connection carries one command.
//!
//! The socket is made in a private directory (mode 0700), given mode 0600 and only then renamed
//! to `control.sock`, so there is never a moment when another user could connect; a peer of
//! another uid (root aside) is refused all the same. The service holds the store's lock before
//! it binds, so a `control.sock` already there can only be a crash's leftover and is replaced.
//! Each command runs on a thread of its own: commands block on the store, stream for minutes
//! (an export) or wait on passes (a poll), and must not take the runtime's blocking threads
//! from the harvester's store writes.

use std::future::Future;
use std::io::{self, BufReader, BufWriter, Write};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::UnixListener;

use super::ControlError;
use super::wire::{self, Command, Frame, Progress};

/// Commands running at once; one more is refused with a message, not queued.
const MAX_COMMANDS: usize = 16;

/// How long a client may take to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Stdout bytes per frame when a command streams (an export).
const STREAM_CHUNK: usize = 64 * 1024;

/// What runs the commands: the service implements it over its store and harvester.
pub trait Handler: Send + Sync + 'static {
    /// Carries out `command`, answering through `reply`, which it must end with
    /// [`Reply::exit`] or [`Reply::error`]. Runs on a thread of its own and may block.
    fn handle(&self, command: Command, reply: &mut Reply);
}

/// The bound socket, until [`ControlSocket::serve`] runs it.
#[derive(Debug)]
pub struct ControlSocket {
    path: PathBuf,
    listener: UnixListener,
}

impl ControlSocket {
    /// Binds `control.sock` in `data_dir`, replacing a stale one. Call it with the store open
    /// (its lock held) and inside a tokio runtime.
    ///
    /// # Errors
    /// [`ControlError::Bind`] when the socket cannot be made (a path too long for a Unix socket,
    /// a read-only directory).
    pub fn bind(data_dir: &Path) -> Result<ControlSocket, ControlError> {
        let path = data_dir.join(wire::SOCKET_NAME);
        let bind_err = |e: io::Error| ControlError::Bind { path: path.clone(), source: e };
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed a control socket left by a process that did not stop cleanly")
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(bind_err(e)),
        }
        // Unix socket paths are short (108 bytes on Linux): say so rather than fail obscurely.
        if path.as_os_str().len() > 100 {
            return Err(bind_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path is too long for a Unix socket (at most 100 bytes): use a shorter data_dir",
            )));
        }
        let private = tempfile::Builder::new().prefix(".control-").tempdir_in(data_dir).map_err(bind_err)?;
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).map_err(bind_err)?;
        let staged = private.path().join(wire::SOCKET_NAME);
        let listener = UnixListener::bind(&staged).map_err(bind_err)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
        std::fs::rename(&staged, &path).map_err(bind_err)?;
        Ok(ControlSocket { path, listener })
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts commands for `handler` until `shutdown` completes, then removes the socket.
    /// Commands still running go on until they end or the process exits.
    pub async fn serve(self, handler: Arc<dyn Handler>, shutdown: impl Future<Output = ()> + Send) {
        let running = Arc::new(AtomicUsize::new(0));
        let owner = std::fs::metadata(&self.path).map(|m| m.uid()).ok();
        tokio::pin!(shutdown);
        // Ends at shutdown; each turn takes one connection.
        loop {
            let stream = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a control connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let peer = stream.peer_cred().ok().map(|c| c.uid());
            if peer.is_none() || (peer != owner && peer != Some(0)) {
                tracing::warn!(uid = ?peer, "refused a control connection from another user");
                continue;
            }
            match stream.into_std() {
                Ok(stream) => start(stream, handler.clone(), running.clone()),
                Err(e) => tracing::warn!(error = %e, "a control connection could not be taken over"),
            }
        }
        drop(self);
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs one connection's command on a thread of its own, unless [`MAX_COMMANDS`] are running.
fn start(stream: std::os::unix::net::UnixStream, handler: Arc<dyn Handler>, running: Arc<AtomicUsize>) {
    let _ = stream.set_nonblocking(false);
    if running.fetch_add(1, Ordering::AcqRel) >= MAX_COMMANDS {
        running.fetch_sub(1, Ordering::AcqRel);
        let mut reply = Reply::new(stream);
        reply.fail(&format!("{MAX_COMMANDS} control commands are running already; try again when one ends"));
        return;
    }
    let spawned = std::thread::Builder::new().name("control".into()).spawn({
        let running = running.clone();
        move || {
            serve_one(stream, handler.as_ref());
            running.fetch_sub(1, Ordering::AcqRel);
        }
    });
    if let Err(e) = spawned {
        running.fetch_sub(1, Ordering::AcqRel);
        tracing::warn!(error = %e, "no thread for a control command");
    }
}

fn serve_one(stream: std::os::unix::net::UnixStream, handler: &dyn Handler) {
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let request = match stream.try_clone().and_then(|s| wire::read_request(&mut BufReader::new(s))) {
        Ok(r) => r,
        Err(e) => {
            Reply::new(stream).fail(&format!("a bad control request: {e}"));
            return;
        }
    };
    let _ = stream.set_read_timeout(None);
    tracing::debug!(command = ?request.command, "control command");
    let mut reply = Reply::new(stream);
    handler.handle(request.command, &mut reply);
    if !reply.ended {
        reply.fail("the command ended without an answer");
    }
}

/// A command's answer to its client. Writes that fail (the client went away) are dropped and
/// remembered: [`Reply::gone`] lets a long command stop early.
#[derive(Debug)]
pub struct Reply {
    out: BufWriter<std::os::unix::net::UnixStream>,
    gone: bool,
    ended: bool,
}

impl Reply {
    fn new(stream: std::os::unix::net::UnixStream) -> Reply {
        Reply { out: BufWriter::with_capacity(STREAM_CHUNK + 16, stream), gone: false, ended: false }
    }

    fn send(&mut self, frame: &Frame) {
        if !self.gone && frame.write_to(&mut self.out).is_err() {
            self.gone = true;
        }
    }

    fn flush(&mut self) {
        if !self.gone && self.out.flush().is_err() {
            self.gone = true;
        }
    }

    /// Whether the client has gone away.
    pub fn gone(&self) -> bool {
        self.gone
    }

    /// Text for the client's standard output.
    pub fn stdout(&mut self, text: &str) {
        for chunk in text.as_bytes().chunks(STREAM_CHUNK) {
            self.send(&Frame::Stdout(chunk.to_vec()));
        }
    }

    /// Text for the client's standard error.
    pub fn stderr(&mut self, text: &str) {
        for chunk in text.as_bytes().chunks(STREAM_CHUNK) {
            self.send(&Frame::Stderr(chunk.to_vec()));
        }
        self.flush();
    }

    /// Progress so far (sent at once).
    pub fn progress(&mut self, p: Progress) {
        self.send(&Frame::Progress(p));
        self.flush();
    }

    /// A structured result for the client to format.
    pub fn value(&mut self, v: serde_json::Value) {
        self.send(&Frame::Value(v));
    }

    /// A writer of the client's standard output, in frames, for a command that streams.
    pub fn stream(&mut self) -> StdoutFrames<'_> {
        StdoutFrames { reply: self }
    }

    /// Ends the answer with this exit status.
    pub fn exit(&mut self, code: u8) {
        self.send(&Frame::Exit(code));
        self.flush();
        self.ended = true;
    }

    /// Ends the answer as a command-line error (exit 2), with `e`'s chain.
    pub fn error(&mut self, e: &(dyn std::error::Error + 'static)) {
        self.fail(&crate::error::chain(e).to_string());
    }

    /// Ends the answer as a command-line error (exit 2) saying `text`.
    pub fn fail(&mut self, text: &str) {
        self.send(&Frame::Error(text.to_owned()));
        self.flush();
        self.ended = true;
    }
}

/// See [`Reply::stream`].
#[derive(Debug)]
pub struct StdoutFrames<'a> {
    reply: &'a mut Reply,
}

impl Write for StdoutFrames<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(STREAM_CHUNK);
        self.reply.send(&Frame::Stdout(buf[..n].to_vec()));
        if self.reply.gone {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"));
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.reply.flush();
        if self.reply.gone { Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client went away")) } else { Ok(()) }
    }
}
