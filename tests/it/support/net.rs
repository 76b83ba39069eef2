//! Ports and bounded waits for servers that run as processes of their own (`tributary serve`
//! and `run`, chromedriver): a port to give them, a wait until they answer, and a poll until
//! what they show holds. A wait that runs out says so; none waits forever.

use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

/// A free port on 127.0.0.1 (bound, then released: a small race other tests rarely win).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Polls `url` every 100 ms until it answers with a success; an error after `limit`, or as
/// soon as `server` has exited (it will never answer then).
pub(crate) async fn wait_until_ok(
    client: &reqwest::Client,
    url: &str,
    server: &mut Child,
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = server.try_wait().unwrap() {
            return Err(format!("the server exited ({status}) before {url} answered"));
        }
        if client.get(url).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{url} did not answer within {limit:?}"))
}

/// Polls `check` every 250 ms until it holds (true) or `limit` has passed (false).
pub(crate) async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// Serves `router` on a fresh port of 127.0.0.1 for the rest of the test (a server the test
/// plays: an upstream, a hub, a proxy, a page); returns the port.
pub(crate) async fn listen(router: axum::Router) -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(l, router).await.unwrap() });
    port
}
