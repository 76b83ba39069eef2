//! What travels on the control socket: one request, then frames until the command's exit.
//!
//! The request is one line of JSON ([`Request`]), so a person can speak it with `socat`. The
//! answer is binary frames — a tag byte, a big-endian `u32` length, the payload — because an
//! export streams hundreds of megabytes of JSON Lines that would otherwise need escaping.
//! A command's answer always ends with [`Frame::Exit`] or [`Frame::Error`]; a connection that
//! closes before either means the service stopped mid-command.

use std::io::{self, BufRead, Read, Write};

use serde::{Deserialize, Serialize};

/// The file name of the socket in the data directory.
pub const SOCKET_NAME: &str = "control.sock";

/// The protocol version a request carries; a service refuses other versions by name, so a
/// client of another release gets a clear error rather than a misread command.
pub const PROTOCOL: u32 = 1;

/// The longest request line accepted (a provenance query is the longest field).
pub(crate) const MAX_REQUEST: u64 = 64 * 1024;

/// The largest frame either side writes or accepts.
pub(crate) const MAX_FRAME: usize = 1 << 20;

/// A command for the running service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// [`PROTOCOL`].
    pub protocol: u32,
    /// What to do.
    pub command: Command,
}

impl Request {
    /// A request of this protocol version.
    pub fn new(command: Command) -> Request {
        Request { protocol: PROTOCOL, command }
    }
}

/// The commands the service takes: those of the command line that work on a running store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Command {
    /// `tributary failures`.
    Failures {
        /// `--source` ids; empty for every source.
        sources: Vec<String>,
        /// `--limit`.
        limit: usize,
        /// `--json`.
        json: bool,
    },
    /// `tributary provenance`.
    Provenance {
        /// The URI or `sha-256:` digest asked about.
        query: String,
        /// `--verify`.
        verify: bool,
        /// `--json`.
        json: bool,
    },
    /// `tributary audit`.
    Audit {
        /// `--source` ids.
        sources: Vec<String>,
        /// `--fetch`.
        fetch: bool,
        /// `--json`.
        json: bool,
    },
    /// `tributary store stats`.
    Stats,
    /// `tributary verify`.
    Verify,
    /// `tributary store export`: the file's bytes come back as [`Frame::Stdout`], then the
    /// counts as [`Frame::Value`].
    Export,
    /// `tributary poll`: poll these sources now (all when empty) and report their passes.
    Poll {
        /// `--source` ids.
        sources: Vec<String>,
    },
    /// `tributary pause`.
    Pause {
        /// The source id.
        source: String,
    },
    /// `tributary resume`.
    Resume {
        /// The source id.
        source: String,
    },
    /// `tributary reload` (and SIGHUP): read the configuration file again.
    Reload,
    /// `tributary source forget`.
    Forget {
        /// The source id.
        source: String,
    },
    /// `tributary deletions`: list what is held, or release it.
    Deletions {
        /// `--source` ids; empty for every source.
        sources: Vec<String>,
        /// What to do with them.
        action: DeletionAction,
        /// `--json` (when listing).
        json: bool,
    },
    /// `tributary takedown`.
    Takedown {
        /// What to do.
        action: TakedownAction,
    },
}

/// What `tributary deletions` does with held deletions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletionAction {
    /// List them.
    List,
    /// Apply and publish them.
    Apply,
    /// Drop them, keeping the resources.
    Keep,
}

/// What `tributary takedown` does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum TakedownAction {
    /// Take these resources down.
    Add {
        /// Upstream URIs, Tributary URIs or `sha-256:` digests.
        targets: Vec<String>,
        /// Why (kept for operators, never served).
        reason: String,
    },
    /// List the takedowns.
    List {
        /// As JSON.
        json: bool,
    },
    /// Lift the takedown of these.
    Lift {
        /// As given to `add`.
        targets: Vec<String>,
    },
}

/// Live progress of a long command, as counts so far (a frame per change would flood a slow
/// terminal; the service sends the totals a few times a second).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Resources listed so far.
    pub listed: u64,
    /// Resources dealt with so far.
    pub done: u64,
    /// The last thing worth a word (a source done).
    pub message: Option<String>,
}

/// One frame of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Bytes for the command's standard output.
    Stdout(Vec<u8>),
    /// Bytes for its standard error.
    Stderr(Vec<u8>),
    /// Progress so far.
    Progress(Progress),
    /// A structured result the client formats itself (export's counts), as JSON.
    Value(serde_json::Value),
    /// The command ended with this exit status.
    Exit(u8),
    /// The command failed as a command-line error would (exit 2); the text is the error's
    /// chain, printed after `error: `.
    Error(String),
}

impl Frame {
    fn tag(&self) -> u8 {
        match self {
            Frame::Stdout(_) => b'o',
            Frame::Stderr(_) => b'e',
            Frame::Progress(_) => b'p',
            Frame::Value(_) => b'v',
            Frame::Exit(_) => b'x',
            Frame::Error(_) => b'!',
        }
    }

    /// Writes the frame (not flushed).
    ///
    /// # Errors
    /// When writing fails (the client went away).
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        let json;
        let payload: &[u8] = match self {
            Frame::Stdout(b) | Frame::Stderr(b) => b,
            Frame::Progress(p) => {
                json = serde_json::to_vec(p).map_err(io::Error::other)?;
                &json
            }
            Frame::Value(v) => {
                json = serde_json::to_vec(v).map_err(io::Error::other)?;
                &json
            }
            Frame::Exit(code) => std::slice::from_ref(code),
            Frame::Error(text) => text.as_bytes(),
        };
        if payload.len() > MAX_FRAME {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "control frame too large"));
        }
        let len = u32::try_from(payload.len()).map_err(io::Error::other)?;
        out.write_all(&[self.tag()])?;
        out.write_all(&len.to_be_bytes())?;
        out.write_all(payload)
    }

    /// Reads one frame; `None` at a clean end of stream before a frame began.
    ///
    /// # Errors
    /// When reading fails, the stream ends inside a frame, or the frame is malformed.
    pub fn read_from(input: &mut impl Read) -> io::Result<Option<Frame>> {
        let mut head = [0u8; 5];
        match input.read(&mut head[..1])? {
            0 => return Ok(None),
            _ => input.read_exact(&mut head[1..])?,
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_FRAME {
            return Err(bad(format!("a control frame of {len} bytes")));
        }
        let mut payload = vec![0u8; len];
        input.read_exact(&mut payload)?;
        let frame = match head[0] {
            b'o' => Frame::Stdout(payload),
            b'e' => Frame::Stderr(payload),
            b'p' => Frame::Progress(serde_json::from_slice(&payload).map_err(|e| bad(e.to_string()))?),
            b'v' => Frame::Value(serde_json::from_slice(&payload).map_err(|e| bad(e.to_string()))?),
            b'x' if len == 1 => Frame::Exit(payload[0]),
            b'!' => Frame::Error(String::from_utf8_lossy(&payload).into_owned()),
            t => return Err(bad(format!("an unknown control frame {t:#04x} of {len} bytes"))),
        };
        Ok(Some(frame))
    }
}

/// Reads the request line, at most [`MAX_REQUEST`] bytes.
///
/// # Errors
/// When reading fails, or the line is too long, not JSON, or of another protocol version.
pub fn read_request(input: &mut impl BufRead) -> io::Result<Request> {
    let mut line = Vec::new();
    input.take(MAX_REQUEST).read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(bad("the request must be one line of JSON, at most 64 KiB".into()));
    }
    let value: serde_json::Value = serde_json::from_slice(&line).map_err(|e| bad(format!("the request: {e}")))?;
    let protocol = value.get("protocol").and_then(serde_json::Value::as_u64);
    if protocol != Some(u64::from(PROTOCOL)) {
        return Err(bad(format!(
            "control protocol {} is not this service's ({PROTOCOL}): use the `tributary` of the running release",
            protocol.map_or_else(|| "missing".into(), |p| p.to_string())
        )));
    }
    serde_json::from_value(value).map_err(|e| bad(format!("the request: {e}")))
}

/// Writes `request` as its line.
///
/// # Errors
/// When writing fails.
pub fn write_request(out: &mut impl Write, request: &Request) -> io::Result<()> {
    let mut line = serde_json::to_vec(request).map_err(io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let frames = [
            Frame::Stdout(b"line\n".to_vec()),
            Frame::Stderr(Vec::new()),
            Frame::Progress(Progress { listed: 3, done: 2, message: Some("a done".into()) }),
            Frame::Value(serde_json::json!({"records": 1})),
            Frame::Error("no such source".into()),
            Frame::Exit(1),
        ];
        let mut buf = Vec::new();
        for f in &frames {
            f.write_to(&mut buf).unwrap();
        }
        let mut input = &buf[..];
        for f in &frames {
            assert_eq!(Frame::read_from(&mut input).unwrap().as_ref(), Some(f));
        }
        assert_eq!(Frame::read_from(&mut input).unwrap(), None, "a clean end");
    }

    #[test]
    fn a_cut_or_oversized_frame_is_an_error_not_a_shorter_answer() {
        let mut buf = Vec::new();
        Frame::Stdout(b"0123456789".to_vec()).write_to(&mut buf).unwrap();
        assert!(Frame::read_from(&mut &buf[..buf.len() - 1]).is_err());
        let huge = [b'o', 0xff, 0xff, 0xff, 0xff];
        assert!(Frame::read_from(&mut &huge[..]).is_err());
        assert!(Frame::read_from(&mut &[b'?', 0, 0, 0, 0][..]).is_err());
    }

    #[test]
    fn requests_are_one_line_of_this_protocol() {
        let req = Request::new(Command::Failures { sources: vec!["a".into()], limit: 5, json: true });
        let mut line = Vec::new();
        write_request(&mut line, &req).unwrap();
        assert_eq!(read_request(&mut &line[..]).unwrap(), req);

        let other = br#"{"protocol":2,"command":{"name":"stats"}}"#.to_vec();
        let err = read_request(&mut &[other, b"\n".to_vec()].concat()[..]).unwrap_err();
        assert!(err.to_string().contains("control protocol 2"), "{err}");
        assert!(read_request(&mut &b"{\"protocol\":1}"[..]).is_err(), "no newline");
        let long = vec![b' '; 70 * 1024];
        assert!(read_request(&mut &long[..]).is_err());
    }
}
