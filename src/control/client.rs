//! The command line's end of the control channel: finds the running service of a data
//! directory, sends it one command and hands each frame of the answer to a [`Sink`].
//!
//! No socket, or one nobody listens on (a crash's leftover), means no service is running: the
//! caller then works on the store itself, as before the channel existed.

use std::io::{self, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use super::ControlError;
use super::wire::{self, Command, Frame, Progress, Request};

/// Where the answer's frames go.
pub trait Sink {
    /// Bytes of the command's standard output.
    ///
    /// # Errors
    /// When they cannot be written (the command then fails).
    fn stdout(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Bytes of its standard error.
    fn stderr(&mut self, bytes: &[u8]);
    /// Progress so far.
    fn progress(&mut self, _progress: &Progress) {}
    /// A structured result.
    fn value(&mut self, _value: serde_json::Value) {}
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// With this exit status.
    Exit(u8),
    /// As a command-line error (exit 2), saying this.
    Error(String),
}

/// A connection to the running service of a data directory.
#[derive(Debug)]
pub struct Connection {
    stream: UnixStream,
    path: PathBuf,
}

/// Connects to the service running on `data_dir`; `None` when none is.
///
/// # Errors
/// [`ControlError::Connect`] when a socket is there and refuses for another reason than
/// nobody listening (its permissions, say).
pub fn connect(data_dir: &Path) -> Result<Option<Connection>, ControlError> {
    let path = data_dir.join(wire::SOCKET_NAME);
    match UnixStream::connect(&path) {
        Ok(stream) => Ok(Some(Connection { stream, path })),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => Ok(None),
        Err(e) => Err(ControlError::Connect { path, source: e }),
    }
}

impl Connection {
    /// Sends `command` and passes the answer to `sink` until the command ends.
    ///
    /// # Errors
    /// [`ControlError::Connect`] when the request cannot be sent or the answer read, and
    /// [`ControlError::Cut`] when the service closes the connection before the command ends
    /// (it was stopped).
    pub fn call(self, command: Command, sink: &mut dyn Sink) -> Result<Outcome, ControlError> {
        let Connection { stream, path } = self;
        let io_err = |e: io::Error| ControlError::Connect { path: path.clone(), source: e };
        wire::write_request(&mut &stream, &Request::new(command)).map_err(io_err)?;
        let mut input = BufReader::with_capacity(wire::MAX_FRAME.min(256 * 1024), &stream);
        // Ends with the command's last frame, or the stream's end.
        loop {
            match Frame::read_from(&mut input).map_err(io_err)? {
                Some(Frame::Stdout(b)) => sink.stdout(&b).map_err(|e| ControlError::Output(e.to_string()))?,
                Some(Frame::Stderr(b)) => sink.stderr(&b),
                Some(Frame::Progress(p)) => sink.progress(&p),
                Some(Frame::Value(v)) => sink.value(v),
                Some(Frame::Exit(code)) => return Ok(Outcome::Exit(code)),
                Some(Frame::Error(text)) => return Ok(Outcome::Error(text)),
                None => return Err(ControlError::Cut { path }),
            }
        }
    }
}
