//! The accept loop: hyper's connection builder with a timer, so that one client cannot hold a
//! connection, or all of them, for as long as it likes.
//!
//! `axum::serve` runs hyper without a timer, which turns its header-read timeout off: a client
//! that sends half a request, or keeps an idle keep-alive socket, held it for ever. Here:
//! - a connection whose first request head has not arrived within
//!   [`ServerSettings::header_timeout`] of its accept is closed. hyper's timers cannot do this:
//!   hyper-util's HTTP/1-or-HTTP/2 detection reads the first bytes (up to the 24 of the HTTP/2
//!   preface) before hyper sees the connection, with no timer, so a client that sent nothing
//!   or part of the preface was held for ever;
//! - after that, hyper's HTTP/1 header-read timeout (the same length) runs whenever the
//!   connection waits for a request head — a trickled head, and an idle keep-alive connection
//!   waiting for its next request alike — and closes the connection when it ends;
//! - HTTP/2 (prior knowledge) pings an idle connection every `header_timeout` and closes it
//!   when the ping is not answered within `header_timeout`;
//! - at most [`ServerSettings::max_connections`] connections are open at once, and at most
//!   [`ServerSettings::max_connections_per_client`] from one client address; one more is
//!   answered `503` with `Connection: close` and closed, so a flood gets a clear answer, the
//!   server's memory stays bounded and one address cannot take every connection;
//! - at shutdown, idle connections close at once and in-flight responses get
//!   [`ServerSettings::shutdown_grace`].
//!
//! Streamed bodies have their own bound (a client that takes no data for `stream_stall`;
//! see `body`). Every connection's request carries the peer address as axum's
//! [`ConnectInfo`], for the hub's per-client rate limit.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

use crate::config::ServerSettings;

/// Why a connection is closed unserved.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// `max_connections` are open.
    ServerFull,
    /// Its address holds `max_connections_per_client`.
    ClientFull,
}

impl Refusal {
    /// The `reason` label of `tributary_http_connections_refused_total`.
    fn reason(self) -> &'static str {
        match self {
            Refusal::ServerFull => "server_full",
            Refusal::ClientFull => "client_full",
        }
    }

    /// What the client is told before the connection closes.
    fn answer(self) -> String {
        let body = match self {
            Refusal::ServerFull => "too many connections open; try again\n",
            Refusal::ClientFull => "too many connections open from your address; close some and try again\n",
        };
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: 1\r\n\
             connection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes.
///
/// # Errors
/// Never at present: a failed accept is logged and retried after a pause.
pub(super) async fn run(
    listener: TcpListener,
    app: Router,
    limits: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let builder = Arc::new(builder(&limits));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let clients = Arc::new(Clients::new(limits.max_connections_per_client));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    // Ends at shutdown; each turn accepts one connection.
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, usually: wait for some to close.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(client) = clients.admit(peer.ip()) else {
            tokio::spawn(refuse(stream, Refusal::ClientFull));
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, Refusal::ServerFull));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let asked = Arc::new(AtomicBool::new(false));
        let service = hyper::service::service_fn({
            let asked = asked.clone();
            move |mut req: hyper::Request<Incoming>| {
                asked.store(true, Ordering::Relaxed);
                req.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(req)
            }
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        let first_head = limits.header_timeout;
        tokio::spawn(async move {
            let _slots = (slot, client);
            // A client that went away or timed out: nothing to do but close.
            match serve(conn, first_head, &asked).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(peer = %peer, error = %e, "connection closed with an error"),
                Err(NoRequest) => tracing::debug!(peer = %peer, "connection closed: no request head in time"),
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(
            grace_ms = limits.shutdown_grace.as_millis() as u64,
            "responses still in flight at shutdown were cut off"
        );
    }
    Ok(())
}

fn builder(limits: &ServerSettings) -> Builder<TokioExecutor> {
    let mut b = Builder::new(TokioExecutor::new());
    b.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.header_timeout))
        .keep_alive_timeout(limits.header_timeout)
        .max_concurrent_streams(64);
    b
}

/// A connection closed because its first request head had not arrived in time.
struct NoRequest;

/// Drives `conn` to its end, unless no request has reached the service (`asked`) within
/// `first_head` of the start: then drops it, which closes the socket.
async fn serve<F: Future>(conn: F, first_head: Duration, asked: &AtomicBool) -> Result<F::Output, NoRequest> {
    tokio::pin!(conn);
    tokio::select! {
        done = &mut conn => return Ok(done),
        () = tokio::time::sleep(first_head) => {}
    }
    if !asked.load(Ordering::Relaxed) {
        return Err(NoRequest);
    }
    Ok(conn.await)
}

/// Tells a connection beyond a cap why, and closes it; bounded, so a client that does not
/// read cannot keep this task either.
async fn refuse(mut stream: TcpStream, why: Refusal) {
    metrics::counter!("tributary_http_connections_refused_total", "reason" => why.reason()).increment(1);
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        stream.write_all(why.answer().as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// Connections open per client, so that one address cannot take the whole cap. Holds an entry
/// only for a client with a connection open, so it is no bigger than the cap.
struct Clients {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its client; uncounted when dropped.
struct ClientSlot {
    clients: Arc<Clients>,
    key: IpAddr,
}

impl Clients {
    fn new(max: usize) -> Self {
        Clients { max, open: Mutex::new(HashMap::new()) }
    }

    /// A slot for a connection from `ip`, or `None` if its client holds `max` already.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let key = client_key(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(key).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(ClientSlot { clients: self.clone(), key })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The address a client is counted by: an IPv4 address (also mapped into IPv6) as it is, an
/// IPv6 address by its /64, since one host or LAN is given a whole /64 to pick from.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

/// The peer of a request served by [`run`] (`None` in tests that call the router directly).
pub(crate) fn peer(parts: &axum::http::Extensions) -> Option<SocketAddr> {
    parts.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::Arc;

    use super::{Clients, client_key};

    #[test]
    fn a_client_holds_at_most_its_share_and_gets_it_back() {
        let clients = Arc::new(Clients::new(2));
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let first = clients.admit(ip("192.0.2.1")).unwrap();
        let _second = clients.admit(ip("::ffff:192.0.2.1")).unwrap();
        assert!(clients.admit(ip("192.0.2.1")).is_none(), "a third from the same address");
        assert!(clients.admit(ip("192.0.2.2")).is_some(), "another address");
        drop(first);
        assert!(clients.admit(ip("192.0.2.1")).is_some(), "a slot comes back when its connection closes");
        assert_eq!(client_key(ip("2001:db8:1:2:aaaa::1")), client_key(ip("2001:db8:1:2:bbbb::2")));
        assert_ne!(client_key(ip("2001:db8:1:2::1")), client_key(ip("2001:db8:1:3::1")));
        let open = clients.open.lock().unwrap();
        assert_eq!(
            open.keys().collect::<Vec<_>>(),
            [&ip("192.0.2.1")],
            "entries only for clients with connections open"
        );
    }
}
