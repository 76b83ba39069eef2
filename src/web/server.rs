//! The accept loop: hyper's connection builder with a timer, so that one client cannot hold a
//! connection, or all of them, for as long as it likes.
//!
//! `axum::serve` runs hyper without a timer, which turns its header-read timeout off: a client
//! that sends half a request, or keeps an idle keep-alive socket, held it for ever. Here:
//! - hyper's HTTP/1 header-read timeout ([`ServerSettings::header_timeout`]) runs whenever the
//!   connection waits for a request head — a fresh connection, a trickled head, and an idle
//!   keep-alive connection waiting for its next request alike — and closes the connection
//!   when it ends;
//! - HTTP/2 (prior knowledge) pings an idle connection every `header_timeout` and closes it
//!   when the ping is not answered within `header_timeout`;
//! - at most [`ServerSettings::max_connections`] connections are open at once; one more is
//!   answered `503` with `Connection: close` and closed, so a flood gets a clear answer and
//!   the server's memory stays bounded;
//! - at shutdown, idle connections close at once and in-flight responses get
//!   [`ServerSettings::shutdown_grace`].
//!
//! Streamed bodies have their own bound (a client that takes no data for `stream_stall`;
//! see `body`). Every connection's request carries the peer address as axum's
//! [`ConnectInfo`], for the hub's per-client rate limit.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

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

/// What a connection beyond the cap is told before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
retry-after: 1\r\nconnection: close\r\ncontent-length: 37\r\n\r\ntoo many connections open; try again\n";

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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics::counter!("tributary_http_connections_refused_total").increment(1);
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(req)
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _slot = slot;
            // A client that went away or timed out: nothing to do but close.
            if let Err(e) = conn.await {
                tracing::debug!(peer = %peer, error = %e, "connection closed with an error");
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

/// Tells a connection beyond the cap why, and closes it; bounded, so a client that does not
/// read cannot keep this task either.
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        stream.write_all(BUSY).await?;
        stream.shutdown().await
    })
    .await;
}

/// The peer of a request served by [`run`] (`None` in tests that call the router directly).
pub(crate) fn peer(parts: &axum::http::Extensions) -> Option<SocketAddr> {
    parts.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use super::BUSY;

    #[test]
    fn the_busy_answer_declares_its_length() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
    }
}
