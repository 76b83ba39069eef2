//! Streaming response bodies produced by blocking code.
//!
//! Documents are written by the publisher to an `io::Write` on the blocking pool; a
//! [`ChannelWriter`] cuts that output into 64 KiB chunks and hands them to the response body
//! through a bounded channel. The bound is what keeps memory flat however long the document:
//! the writer blocks while the client is slow, and stops with an error as soon as the client
//! has gone (the receiver is dropped) or has taken no chunk for `stream_stall` (`[server]`).
//! Each stream holds a blocking-pool thread, so at most `max_streams` run at once; further
//! requests wait for a slot without holding a thread, and a stalled client cannot keep one
//! for longer than the stall. A failure after the first byte cannot change the status
//! any more: a stream whose producer did not finish ends with an error, which makes hyper abort
//! the response instead of ending it cleanly: a Destination sees a failed transfer, never a
//! short document that looks complete. A chunk is never larger than 64 KiB, however large the
//! producer's writes (a feed entry is written whole), so the bound holds for any document.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, mpsc};

/// Bytes per chunk sent to the client.
const CHUNK: usize = 64 * 1024;
/// Chunks in flight per response: with [`CHUNK`], at most 512 KiB buffered per stream.
const DEPTH: usize = 8;

type Chunk = Result<Bytes, io::Error>;

/// An `io::Write` feeding a response body.
pub(crate) struct ChannelWriter {
    tx: mpsc::Sender<Chunk>,
    buf: Vec<u8>,
    rt: Handle,
    /// How long a client may take no data before the stream is abandoned.
    stall: Duration,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        // On the blocking pool, so waiting on the runtime here is allowed.
        match self.rt.block_on(tokio::time::timeout(self.stall, self.tx.send(Ok(chunk)))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(io::Error::new(io::ErrorKind::BrokenPipe, "client went away")),
            Err(_) => {
                let ms = self.stall.as_millis();
                Err(io::Error::new(io::ErrorKind::TimedOut, format!("client took no data for {ms} ms")))
            }
        }
    }
}

impl Write for ChannelWriter {
    /// Takes at most what fills the current chunk (`write_all` comes back for the rest), so
    /// that no chunk, and no buffered stream, outgrows the bound.
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// The receiving end, as a body stream; `done` is set by the producer once it has sent its
/// last chunk.
struct ChunkStream {
    rx: mpsc::Receiver<Chunk>,
    done: Arc<AtomicBool>,
}

impl futures_core::Stream for ChunkStream {
    type Item = Chunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        match self.rx.poll_recv(cx) {
            // The producer stopped early (an error, or a client that took nothing for the
            // stall): end with an error, once, so that the response is aborted.
            Poll::Ready(None) if !self.done.swap(true, Ordering::AcqRel) => {
                Poll::Ready(Some(Err(io::Error::other("the response stream stopped before its end"))))
            }
            other => other,
        }
    }
}

/// A body whose bytes `produce` writes on the blocking pool, once one of `slots` is free; the
/// client may take no data for at most `stall`.
/// `what` names the document in the log line of a failure.
pub(crate) async fn blocking_body<E: std::fmt::Display>(
    slots: (&Arc<Semaphore>, Duration),
    what: String,
    produce: impl FnOnce(&mut ChannelWriter) -> Result<(), E> + Send + 'static,
) -> Body {
    blocking_body_then(slots, what, produce, drop).await
}

/// As [`blocking_body`], then `then` with what `produce` returned, once the body has ended
/// (the client has its last byte) and still holding the slot: work the response leads to
/// that the client must not wait for.
pub(crate) async fn blocking_body_then<R: Send + 'static, E: std::fmt::Display>(
    (slots, stall): (&Arc<Semaphore>, Duration),
    what: String,
    produce: impl FnOnce(&mut ChannelWriter) -> Result<R, E> + Send + 'static,
    then: impl FnOnce(R) + Send + 'static,
) -> Body {
    let permit = slots.clone().acquire_owned().await;
    let (tx, rx) = mpsc::channel(DEPTH);
    let done = Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    let rt = Handle::current();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut w = ChannelWriter { tx, buf: Vec::with_capacity(CHUNK), rt, stall };
        let result =
            produce(&mut w).map_err(|e| e.to_string()).and_then(|r| w.send().map(|()| r).map_err(|e| e.to_string()));
        let result = match result {
            Ok(r) => {
                finished.store(true, Ordering::Release);
                Some(r)
            }
            Err(e) => {
                tracing::warn!(document = %what, error = %e, "response stream stopped");
                None
            }
        };
        // The sender is dropped here, after `done`: the stream then ends, cleanly or not.
        drop(w);
        if let Some(r) = result {
            then(r);
        }
    });
    Body::from_stream(ChunkStream { rx, done })
}
