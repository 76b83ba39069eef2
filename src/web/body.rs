//! Streaming response bodies produced by blocking code.
//!
//! Documents are written by the publisher to an `io::Write` on the blocking pool; a
//! [`ChannelWriter`] cuts that output into 64 KiB chunks and hands them to the response body
//! through a bounded channel. The bound is what keeps memory flat however long the document:
//! the writer blocks while the client is slow, and stops with an error as soon as the client
//! has gone (the receiver is dropped). A failure after the first byte cannot change the status
//! any more, so it is sent down the channel as an error, which makes hyper abort the response
//! instead of ending it cleanly: a Destination sees a failed transfer, never a short document
//! that looks complete.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use tokio::sync::mpsc;

/// Bytes per chunk sent to the client.
const CHUNK: usize = 64 * 1024;
/// Chunks in flight per response: with [`CHUNK`], at most 512 KiB buffered per stream.
const DEPTH: usize = 8;

type Chunk = Result<Bytes, io::Error>;

/// An `io::Write` feeding a response body.
pub(crate) struct ChannelWriter {
    tx: mpsc::Sender<Chunk>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// The receiving end, as a body stream.
struct ChunkStream(mpsc::Receiver<Chunk>);

impl futures_core::Stream for ChunkStream {
    type Item = Chunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        self.0.poll_recv(cx)
    }
}

/// A body whose bytes `produce` writes on the blocking pool. `what` names the document in the
/// log line of a failure.
pub(crate) fn blocking_body<E: std::fmt::Display>(
    what: String,
    produce: impl FnOnce(&mut ChannelWriter) -> Result<(), E> + Send + 'static,
) -> Body {
    let (tx, rx) = mpsc::channel(DEPTH);
    let err_tx = tx.clone();
    tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter { tx, buf: Vec::with_capacity(CHUNK) };
        let result = produce(&mut w).map_err(|e| e.to_string()).and_then(|()| w.send().map_err(|e| e.to_string()));
        if let Err(e) = result {
            tracing::warn!(document = %what, error = %e, "response stream stopped");
            let _ = err_tx.blocking_send(Err(io::Error::other(e)));
        }
    });
    Body::from_stream(ChunkStream(rx))
}
