//! When a request leaves. The rate limiter spaces the turns it gives out, but a request can
//! reach the wire well after its turn: behind a new connection's TCP and TLS handshakes, or a
//! busy scheduler. The next request, on a connection already open, would then reach the server
//! less than an interval after it — the first two of every pass (robots.txt on a new
//! connection, then the first document on it) most of all, and a server limiting requests per
//! second answers that one `429` or `503`. So a host's rate is kept from when its requests
//! leave: a turn waits until the budget's previous request has left and an interval has passed
//! since ([`Budget::turn_to_leave`](super::host)).
//!
//! A request has left once its first poll found a pooled connection to write on. One that
//! needed a new connection has left only once its answer began (or the send failed): hyper
//! writes it from the connection's own task, spawned when the connection is built, and under
//! load that task ran up to 22 ms later — with 1,000 sources starting, the packets showed
//! robots.txt and the next request reaching a server 178 ms apart at 5/s. Its answer is the
//! first sign from outside that it was written; the next request waited for that answer
//! anyway when it is robots.txt. [`StampConnections`] wraps reqwest's connector and learns
//! which request is connecting from a task-local that [`sending`] sets around each send.
//! hyper-util calls the connector inside the request's own poll; were that to change, a new
//! connection would go unseen and a request would count as leaving at its first poll, the
//! spacing of turns alone.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use super::host::Budget;

tokio::task_local! {
    /// The request the current task is sending, for the connector to stamp.
    static LAUNCH: Arc<Launch>;
}

/// One request between its turn and the wire. Leaving (or being dropped unsent) lets the
/// budget's next request have its turn an interval later.
pub(crate) struct Launch {
    budget: Arc<Budget>,
    connecting: AtomicBool,
    left: AtomicBool,
}

impl Launch {
    pub(super) fn new(budget: Arc<Budget>) -> Launch {
        Launch { budget, connecting: AtomicBool::new(false), left: AtomicBool::new(false) }
    }

    /// The request is on the wire (or will never be): the first call counts.
    fn leave(&self) {
        if !self.left.swap(true, Ordering::AcqRel) {
            self.budget.landed(Instant::now());
        }
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        self.leave();
    }
}

/// Runs `send` (reqwest's send future) as `launch`'s request, marking when it leaves. Without
/// a launch (a host without a rate limit) it is `send` itself.
pub(crate) async fn sending<F: Future>(launch: Option<Arc<Launch>>, send: F) -> F::Output {
    let Some(launch) = launch else { return send.await };
    // Cancelled (a header timeout) before it left, it never will: dropping this future drops
    // both handles on the launch, and `Launch`'s drop lets the budget move on.
    let mut send = std::pin::pin!(LAUNCH.scope(launch.clone(), send));
    std::future::poll_fn(|cx| {
        let polled = send.as_mut().poll(cx);
        // No connection being built after a poll: hyper found a pooled one and wrote to it.
        if polled.is_ready() || !launch.connecting.load(Ordering::Acquire) {
            launch.leave();
        }
        polled
    })
    .await
}

/// A connector layer that marks the request being sent as connecting: it leaves when its
/// send completes, not at a poll that finds it waiting.
#[derive(Clone, Copy)]
pub(crate) struct StampConnections;

impl<S> tower::Layer<S> for StampConnections {
    type Service = Stamped<S>;

    fn layer(&self, inner: S) -> Stamped<S> {
        Stamped(inner)
    }
}

/// See [`StampConnections`].
#[derive(Clone)]
pub(crate) struct Stamped<S>(S);

impl<S, R> tower::Service<R> for Stamped<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, dst: R) -> Self::Future {
        // Outside a send (no launch): a connection nothing waits on, such as a pool's spare.
        let _ = LAUNCH.try_with(|l| l.connecting.store(true, Ordering::Release));
        self.0.call(dst)
    }
}
