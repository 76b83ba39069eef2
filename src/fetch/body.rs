//! Reading a response body chunk by chunk under every limit at once: size cap (fail, never
//! truncate), gzip decoding with a cap on output and on the expansion ratio (a bomb fails
//! after at most one decoder buffer past the cap), idle, throughput and total deadlines, and
//! truncation detection (hyper reports a short Content-Length or an unfinished chunked body;
//! the gzip trailer catches a cut compressed stream).
//!
//! The host's concurrency permit lives in the body, so a slot stays taken until the body is
//! read or dropped.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::write::MultiGzDecoder;
use tokio::sync::OwnedSemaphorePermit;

use super::error::{FetchError, Phase};
use super::host::{Counters, Host};

/// Gzip may expand past the ratio for the first bytes of any body (headers, dictionaries);
/// only output beyond this floor is held to the ratio.
const RATIO_FLOOR: u64 = 1 << 20;

/// How the body is to be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decoding {
    Identity,
    Gzip,
    /// Gzip when the body starts with the gzip magic bytes (documents served as `.xml.gz`).
    Sniff,
}

#[derive(Debug, Clone)]
pub(crate) struct BodyLimits {
    pub(crate) max_bytes: u64,
    pub(crate) max_ratio: u32,
    pub(crate) idle: Duration,
    pub(crate) deadline: Instant,
    pub(crate) min_throughput: u64,
    pub(crate) window: Duration,
}

/// Collects decoder output and refuses to grow past `limit`.
struct Sink {
    buf: Vec<u8>,
    written: u64,
    limit: u64,
    tripped: bool,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.written + data.len() as u64 > self.limit {
            self.tripped = true;
            return Err(io::Error::other("decompressed size limit"));
        }
        self.written += data.len() as u64;
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A response body being read. See the module docs.
pub(crate) struct Body {
    resp: reqwest::Response,
    url: String,
    status: u16,
    limits: BodyLimits,
    decoding: Decoding,
    sniffed: Vec<u8>,
    gz: Option<MultiGzDecoder<Sink>>,
    raw: u64,
    window_start: Instant,
    window_bytes: u64,
    started: Instant,
    finished: bool,
    host: Arc<Host>,
    _permit: OwnedSemaphorePermit,
}

impl Body {
    pub(crate) fn new(
        resp: reqwest::Response,
        decoding: Decoding,
        limits: BodyLimits,
        host: Arc<Host>,
        permit: OwnedSemaphorePermit,
    ) -> Body {
        let now = Instant::now();
        Body {
            url: resp.url().to_string(),
            status: resp.status().as_u16(),
            resp,
            limits,
            decoding,
            sniffed: Vec::new(),
            gz: None,
            raw: 0,
            window_start: now,
            window_bytes: 0,
            started: now,
            finished: false,
            host,
            _permit: permit,
        }
    }

    /// The next decoded chunk, `None` at a complete end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, FetchError> {
        // Bounded by the body itself: each turn consumes a raw chunk or ends.
        loop {
            if self.finished {
                return Ok(None);
            }
            let out = match self.next_raw().await? {
                Some(raw) => self.decode(raw)?,
                None => self.finish()?,
            };
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
    }

    /// Reads the rest of the body into memory (documents only; bounded by the size cap).
    pub(crate) async fn collect(&mut self) -> Result<Bytes, FetchError> {
        let mut all = Vec::new();
        while let Some(c) = self.chunk().await? {
            all.extend_from_slice(&c);
        }
        Ok(Bytes::from(all))
    }

    /// Body bytes received so far, as transferred.
    pub(crate) fn raw_bytes(&self) -> u64 {
        self.raw
    }

    async fn next_raw(&mut self) -> Result<Option<Bytes>, FetchError> {
        let now = Instant::now();
        let idle_end = now + self.limits.idle;
        let (until, phase) = if idle_end < self.limits.deadline {
            (idle_end, Phase::Idle)
        } else {
            (self.limits.deadline, Phase::Total)
        };
        let read = tokio::time::timeout_at(tokio::time::Instant::from_std(until), self.resp.chunk()).await;
        let chunk = match read {
            Err(_) => return Err(self.fail(FetchError::Timeout { url: self.url.clone(), phase })),
            Ok(Err(e)) => {
                let detail = crate::error::chain(&e).to_string();
                return Err(self.fail(FetchError::Truncated { url: self.url.clone(), detail }));
            }
            Ok(Ok(c)) => c,
        };
        if let Some(c) = &chunk {
            self.account(c.len() as u64)?;
        }
        Ok(chunk)
    }

    fn account(&mut self, n: u64) -> Result<(), FetchError> {
        self.raw += n;
        Counters::add(&self.host.counters.bytes, n);
        if self.raw > self.limits.max_bytes {
            let limit = self.limits.max_bytes;
            return Err(self.fail(FetchError::TooLarge { url: self.url.clone(), limit }));
        }
        self.window_bytes += n;
        let elapsed = self.window_start.elapsed();
        if self.limits.min_throughput > 0 && elapsed >= self.limits.window {
            if (self.window_bytes as f64) < self.limits.min_throughput as f64 * elapsed.as_secs_f64() {
                return Err(self.fail(FetchError::Timeout { url: self.url.clone(), phase: Phase::Throughput }));
            }
            self.window_start = Instant::now();
            self.window_bytes = 0;
        }
        Ok(())
    }

    fn decode(&mut self, raw: Bytes) -> Result<Bytes, FetchError> {
        if self.decoding == Decoding::Sniff {
            self.sniffed.extend_from_slice(&raw);
            if self.sniffed.len() < 2 {
                return Ok(Bytes::new());
            }
            self.decoding = if self.sniffed.starts_with(&[0x1f, 0x8b]) { Decoding::Gzip } else { Decoding::Identity };
            let first = Bytes::from(std::mem::take(&mut self.sniffed));
            return self.decode(first);
        }
        if self.decoding == Decoding::Identity {
            return Ok(raw);
        }
        self.gunzip(&raw)
    }

    fn gunzip(&mut self, raw: &[u8]) -> Result<Bytes, FetchError> {
        let limit = self.output_limit();
        let gz = self
            .gz
            .get_or_insert_with(|| MultiGzDecoder::new(Sink { buf: Vec::new(), written: 0, limit: 0, tripped: false }));
        gz.get_mut().limit = limit;
        // Fed in slices so one network chunk cannot expand into one huge write.
        let result = raw.chunks(8192).try_for_each(|part| gz.write_all(part));
        let sink = gz.get_mut();
        let out = Bytes::from(std::mem::take(&mut sink.buf));
        match result {
            Ok(()) => Ok(out),
            Err(_) if sink.tripped => {
                let limit = sink.limit;
                Err(self.fail(FetchError::DecompressionBomb { url: self.url.clone(), limit }))
            }
            Err(e) => Err(self.fail(FetchError::Decode { url: self.url.clone(), detail: e.to_string() })),
        }
    }

    /// The output cap: the size limit, and no more than `max_ratio` times the input so far
    /// (beyond a small floor).
    fn output_limit(&self) -> u64 {
        let by_ratio = self.raw.saturating_mul(u64::from(self.limits.max_ratio)).max(RATIO_FLOOR);
        self.limits.max_bytes.min(by_ratio)
    }

    fn finish(&mut self) -> Result<Bytes, FetchError> {
        self.finished = true;
        let mut out = Bytes::new();
        if self.decoding == Decoding::Sniff && !self.sniffed.is_empty() {
            out = Bytes::from(std::mem::take(&mut self.sniffed));
        }
        if let Some(gz) = self.gz.as_mut() {
            if gz.try_finish().is_err() {
                let detail = "gzip stream ended before its trailer (or is corrupt)".to_owned();
                return Err(self.fail(FetchError::Truncated { url: self.url.clone(), detail }));
            }
            out = Bytes::from(std::mem::take(&mut gz.get_mut().buf));
        }
        tracing::debug!(
            host = %self.host.origin,
            url = %self.url,
            status = self.status,
            duration_ms = self.started.elapsed().as_millis() as u64,
            size_bytes = self.raw,
            "body received"
        );
        Ok(out)
    }

    fn fail(&mut self, e: FetchError) -> FetchError {
        self.finished = true;
        Counters::add(&self.host.counters.failures, 1);
        e
    }
}
