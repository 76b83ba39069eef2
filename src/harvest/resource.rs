//! Fetching one listed bitstream into the store, verified while it streams.
//!
//! The content goes straight from the response into a [`BlobWriter`], which hashes every
//! chunk and checks the declared length and digests at commit; a mismatch leaves nothing in
//! the store. A mismatch or a body cut short is retried once on the same URL (a Source may be
//! mid-update), then the mirrors (`duplicate` links, lower `pri` first) are tried; the content
//! must match the declared digests whichever URL served it.
//!
//! Depends on the fetcher and the store; never on the publisher.

use bytes::Bytes;
use url::Url;

use crate::config::Settings;
use crate::fetch::{FetchError, Fetched, Fetcher};
use crate::store::{BlobInfo, BlobWriter, Expected, INLINE_MAX, Store, StoreError};

/// Attempts per URL when the content does not verify (the fetcher retries transport errors
/// on its own).
const VERIFY_ATTEMPTS: usize = 2;

/// Bytes gathered before a write is handed to a blocking thread (larger bitstreams spill to a
/// file; one thread hop per chunk would cost more than the write).
const SPILL_CHUNK: usize = 256 * 1024;

/// A verified, stored bitstream.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) info: BlobInfo,
    /// The URL that served it (the `<loc>` or a mirror).
    pub(crate) from: Url,
    /// Bytes received.
    pub(crate) bytes: u64,
}

/// Why a bitstream could not be stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResourceError {
    /// The last URL tried could not be fetched (the error names it).
    #[error(transparent)]
    Fetch(FetchError),
    /// The last URL tried delivered content that does not match the list.
    #[error("{url}: content does not match the list")]
    Mismatch {
        /// The URL that served it.
        url: String,
        /// What differed.
        #[source]
        source: StoreError,
    },
    /// The entry named no URL at all.
    #[error("no URL to fetch")]
    NoUrl,
    /// The verified content could not be put in the object storage holding the bitstreams
    /// (after the client's own retries): recorded as the resource's failure and retried at the
    /// next pass, like an upstream failure, and never recorded as held. The storage being back
    /// is all the next attempt needs.
    #[error(transparent)]
    Blobs(StoreError),
    /// The store itself failed (disk, database): the source's pass must stop.
    #[error(transparent)]
    Store(StoreError),
}

impl ResourceError {
    /// True when the upstream is to blame (recorded as the resource's failure and retried
    /// later), false when the store failed (the pass stops).
    pub(crate) fn is_upstream(&self) -> bool {
        !matches!(self, ResourceError::Store(_))
    }
}

enum Attempt {
    Blobs(StoreError),
    Fetch(FetchError),
    Mismatch(StoreError),
    Store(StoreError),
}

/// Fetches the first of `urls` that delivers content matching `expected`.
pub(crate) async fn fetch_verified(
    fetcher: &Fetcher,
    store: &Store,
    urls: &[Url],
    expected: &Expected,
    settings: &Settings,
) -> Result<Stored, ResourceError> {
    // A store whose bitstreams are in a bucket shared with other instances (the shards a
    // top-level instance harvests) may hold the declared content already: then nothing is
    // fetched. `bytes: 0`, so the report counts what was transferred.
    let declared = expected.hashes.get(&crate::model::HashAlgorithm::Sha256).is_some();
    if let Some(url) = urls.first().filter(|_| declared && store.remote_blobs().is_some()) {
        let (s, e) = (store.clone(), expected.clone());
        match tokio::task::spawn_blocking(move || s.adopt(&e)).await {
            Ok(Ok(Some(info))) => return Ok(Stored { info, from: url.clone(), bytes: 0 }),
            Ok(Ok(None)) => {}
            Ok(Err(e)) if e.is_object_store() => return Err(ResourceError::Blobs(e)),
            Ok(Err(e)) => return Err(ResourceError::Store(e)),
            Err(e) => {
                return Err(ResourceError::Store(StoreError::Io {
                    path: "adopt".into(),
                    source: std::io::Error::other(e),
                }));
            }
        }
    }
    let mut last = ResourceError::NoUrl;
    for url in urls {
        for _ in 0..VERIFY_ATTEMPTS {
            match attempt(fetcher, store, url, expected, settings).await {
                Ok(s) => return Ok(s),
                Err(Attempt::Store(e)) => return Err(ResourceError::Store(e)),
                Err(Attempt::Blobs(e)) => return Err(ResourceError::Blobs(e)),
                Err(Attempt::Mismatch(source)) => last = ResourceError::Mismatch { url: url.to_string(), source },
                // Retryable transport errors were already retried by the fetcher; a cut-off
                // body was not (the response had started), so it gets the second attempt.
                Err(Attempt::Fetch(e @ FetchError::Truncated { .. })) => last = ResourceError::Fetch(e),
                Err(Attempt::Fetch(e)) => {
                    last = ResourceError::Fetch(e);
                    break;
                }
            }
        }
    }
    Err(last)
}

async fn attempt(
    fetcher: &Fetcher,
    store: &Store,
    url: &Url,
    expected: &Expected,
    settings: &Settings,
) -> Result<Stored, Attempt> {
    let mut resp = match fetcher.get_stream(url, settings, None).await.map_err(Attempt::Fetch)? {
        Fetched::Modified(r) => r,
        Fetched::NotModified => {
            return Err(Attempt::Fetch(FetchError::Status { url: url.to_string(), status: 304 }));
        }
    };
    let mut writer = Some(store.blob_writer(expected.clone()));
    let mut pending: Vec<Bytes> = Vec::new();
    let mut pending_len = 0;
    let mut bytes = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(Attempt::Fetch)? {
        bytes += chunk.len() as u64;
        let w = writer.as_mut().expect("writer is put back after every blocking write");
        // Small content is only hashed and buffered in memory: cheap enough for this thread.
        if pending.is_empty() && w.written() + chunk.len() as u64 <= INLINE_MAX as u64 {
            w.write(&chunk).map_err(classify)?;
            continue;
        }
        pending_len += chunk.len();
        pending.push(chunk);
        if pending_len >= SPILL_CHUNK {
            writer = Some(write_blocking(writer.take(), std::mem::take(&mut pending)).await?);
            pending_len = 0;
        }
    }
    let w = write_blocking(writer.take(), pending).await?;
    // Small content is appended to a pack's buffer in a few microseconds: a blocking-thread hop per
    // resource (two context switches) cost more than the commit. A spilled file's commit
    // fsyncs, so it still goes to a blocking thread.
    let info = if w.written() <= INLINE_MAX as u64 {
        w.commit().map_err(classify)?
    } else {
        tokio::task::spawn_blocking(move || w.commit()).await.map_err(join_error)?.map_err(classify)?
    };
    Ok(Stored { info, from: resp.url, bytes })
}

async fn write_blocking(writer: Option<BlobWriter>, chunks: Vec<Bytes>) -> Result<BlobWriter, Attempt> {
    let mut w = writer.expect("writer is present between writes");
    if chunks.is_empty() {
        return Ok(w);
    }
    tokio::task::spawn_blocking(move || chunks.iter().try_for_each(|c| w.write(c)).map(|()| w))
        .await
        .map_err(join_error)?
        .map_err(classify)
}

fn classify(e: StoreError) -> Attempt {
    match e {
        StoreError::LengthMismatch { .. } | StoreError::TooLong { .. } | StoreError::HashMismatch { .. } => {
            Attempt::Mismatch(e)
        }
        e if e.is_object_store() => Attempt::Blobs(e),
        e => Attempt::Store(e),
    }
}

fn join_error(e: tokio::task::JoinError) -> Attempt {
    Attempt::Store(StoreError::Io { path: "tmp".into(), source: std::io::Error::other(e) })
}
