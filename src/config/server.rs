//! `[server]`: what the web server allows one client before it cuts it off — how long it may
//! take to send a request head or sit idle between requests, how many connections may be open
//! at once (in all and from one address), and how long a streamed response may wait for a
//! client that reads nothing.
//! Defaults suit a public deployment behind a reverse proxy (docs/SECURITY.md gives the reason
//! for each); tests set them small.

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Locator};

type Result<T> = std::result::Result<T, ConfigError>;

/// The validated `[server]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// Longest a client may take to send a request's head, counted from the first moment the
    /// server waits for it — which includes an idle keep-alive connection waiting for its next
    /// request (`header_timeout`, default 20 s).
    pub header_timeout: Duration,
    /// Connections open at once (`max_connections`, 1–100,000, default 1,024); beyond, a new
    /// connection is answered `503` and closed.
    pub max_connections: usize,
    /// Connections one client address may hold at once (`max_connections_per_client`, default a
    /// tenth of `max_connections`, at least 1), so that no one client can take the whole cap;
    /// beyond, a new connection from that address is answered `503` and closed.
    pub max_connections_per_client: usize,
    /// Streamed responses producing at once (`max_streams`, 1–4,096, default 64): each holds a
    /// blocking-pool thread.
    pub max_streams: usize,
    /// How long a streamed response waits for a client that takes no data before it is
    /// abandoned (`stream_stall`, default 30 s).
    pub stream_stall: Duration,
    /// Longest a shutdown waits for in-flight responses (`shutdown_grace`, default 20 s).
    pub shutdown_grace: Duration,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            header_timeout: Duration::from_secs(20),
            max_connections: 1_024,
            max_connections_per_client: per_client_default(1_024),
            max_streams: 64,
            stream_stall: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(20),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    header_timeout: Option<Spanned<String>>,
    max_connections: Option<Spanned<i64>>,
    max_connections_per_client: Option<Spanned<i64>>,
    max_streams: Option<Spanned<i64>>,
    stream_stall: Option<Spanned<String>>,
    shutdown_grace: Option<Spanned<String>>,
}

impl RawServer {
    pub(super) fn validate(&self, at: &Locator<'_>) -> Result<ServerSettings> {
        let mut s = ServerSettings::default();
        let positive = |v: &Spanned<String>, key: &str| -> Result<Duration> {
            let d = at.duration(v, key)?;
            if d.is_zero() { Err(at.error(v.span(), key, "must be longer than 0")) } else { Ok(d) }
        };
        if let Some(v) = &self.header_timeout {
            s.header_timeout = positive(v, "header_timeout")?;
        }
        if let Some(v) = &self.max_connections {
            s.max_connections = at.int(v, "max_connections", 1, 100_000)? as usize;
        }
        s.max_connections_per_client = per_client_default(s.max_connections);
        if let Some(v) = &self.max_connections_per_client {
            let key = "max_connections_per_client";
            s.max_connections_per_client = at.int(v, key, 1, 100_000)? as usize;
            if s.max_connections_per_client > s.max_connections {
                let message = format!("{} is more than max_connections ({})", v.get_ref(), s.max_connections);
                return Err(at.error(v.span(), key, message));
            }
        }
        if let Some(v) = &self.max_streams {
            s.max_streams = at.int(v, "max_streams", 1, 4_096)? as usize;
        }
        if let Some(v) = &self.stream_stall {
            s.stream_stall = positive(v, "stream_stall")?;
        }
        if let Some(v) = &self.shutdown_grace {
            s.shutdown_grace = at.duration(v, "shutdown_grace")?;
        }
        Ok(s)
    }
}

/// A tenth of the cap: room for several Destinations behind one NAT, while filling the cap takes
/// ten addresses.
fn per_client_default(max_connections: usize) -> usize {
    (max_connections / 10).max(1)
}
