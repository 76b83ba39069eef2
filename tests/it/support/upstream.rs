//! An async HTTP/1.1 upstream on 127.0.0.1 for the harvester's tests, written on raw tokio
//! sockets so it can misbehave exactly: hang, trickle, cut a body short (with Content-Length
//! or chunked), delay, or (over HTTPS) stall each handshake. It records every request (path,
//! arrival time, headers) and the most requests ever in flight at once, so tests can prove
//! politeness from the server's side. It also counts the TCP connections it accepted, so tests
//! can tell keep-alive from a new connection per request.
//!
//! Stopped when dropped (every connection task is aborted with it). Every wait is bounded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use url::Url;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    pub(crate) path: String,
    pub(crate) at: Instant,
    /// Header names lower-cased.
    pub(crate) headers: HashMap<String, String>,
}

/// What to answer.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Read the request, never answer (the connection is dropped after 60 s at most).
    Hang,
    /// Declare the full length, then send one byte per `every`.
    Trickle {
        body: Vec<u8>,
        every: Duration,
    },
    /// Declare `declared` bytes, send `body`, close.
    CutShort {
        declared: usize,
        body: Vec<u8>,
    },
    /// Chunked: send `body` as one chunk and close without the last chunk.
    ChunkedCut {
        body: Vec<u8>,
    },
    /// Complete chunked body, in chunks of at most 16 KiB.
    Chunked {
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Wait, then answer.
    Delay(Duration, Box<Reply>),
}

impl Reply {
    pub(crate) fn ok(body: impl Into<Vec<u8>>) -> Reply {
        Reply::Full { status: 200, headers: vec![], body: body.into() }
    }

    pub(crate) fn xml(body: impl Into<Vec<u8>>) -> Reply {
        Reply::ok(body).header("Content-Type", "application/xml")
    }

    pub(crate) fn status(status: u16) -> Reply {
        Reply::Full { status, headers: vec![], body: Vec::new() }
    }

    pub(crate) fn redirect(status: u16, location: &str) -> Reply {
        Reply::status(status).header("Location", location)
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Full { headers, .. } | Reply::Chunked { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }

    pub(crate) fn delayed(self, d: Duration) -> Reply {
        Reply::Delay(d, Box::new(self))
    }
}

type Handler = dyn Fn(&Hit, usize) -> Reply + Send + Sync;

struct State {
    hits: Mutex<Vec<Hit>>,
    per_path: Mutex<HashMap<String, usize>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    connections: AtomicUsize,
    handler: Box<Handler>,
}

/// A running upstream. See the module docs.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    scheme: &'static str,
    state: Arc<State>,
    task: JoinHandle<()>,
}

/// TLS for an upstream: the acceptor, and how long each new connection is stalled before its
/// handshake, as a far or busy server's handshakes take.
pub(crate) struct Tls {
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
    pub(crate) stall: Duration,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    /// A server whose `handler` gets each request and how many times its path was hit before.
    pub(crate) async fn start(handler: impl Fn(&Hit, usize) -> Reply + Send + Sync + 'static) -> Upstream {
        Upstream::start_on("127.0.0.1", handler).await
    }

    /// [`Upstream::start`] on another loopback address (any of 127.0.0.0/8 on Linux), for
    /// tests that need two hosts the SSRF guard tells apart.
    pub(crate) async fn start_on(ip: &str, handler: impl Fn(&Hit, usize) -> Reply + Send + Sync + 'static) -> Upstream {
        Upstream::listen(ip, None, handler).await
    }

    /// [`Upstream::start`] over HTTPS (`tls`; see [`super::tls`] for a certificate).
    pub(crate) async fn start_tls(
        tls: Tls,
        handler: impl Fn(&Hit, usize) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        Upstream::listen("127.0.0.1", Some(Arc::new(tls)), handler).await
    }

    async fn listen(
        ip: &str,
        tls: Option<Arc<Tls>>,
        handler: impl Fn(&Hit, usize) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            hits: Mutex::new(Vec::new()),
            per_path: Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            handler: Box::new(handler),
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = tokio::spawn(accept_loop(listener, state.clone(), tls));
        Upstream { addr, scheme, state, task }
    }

    /// Fixed routes: the nth request to a path gets the nth reply of its list (the last one
    /// repeats). Anything else, robots.txt included, is a 404.
    pub(crate) async fn routes(routes: Vec<(&str, Vec<Reply>)>) -> Upstream {
        Upstream::routes_on("127.0.0.1", routes).await
    }

    /// [`Upstream::routes`] on another loopback address.
    pub(crate) async fn routes_on(ip: &str, routes: Vec<(&str, Vec<Reply>)>) -> Upstream {
        let map: HashMap<String, Vec<Reply>> = routes.into_iter().map(|(p, r)| (p.to_owned(), r)).collect();
        Upstream::start_on(ip, move |hit, n| match map.get(&hit.path) {
            Some(replies) => replies[n.min(replies.len() - 1)].clone(),
            None => Reply::status(404),
        })
        .await
    }

    pub(crate) fn url(&self, path: &str) -> Url {
        Url::parse(&format!("{}://{}{}", self.scheme, self.addr, path)).unwrap()
    }

    pub(crate) fn hits(&self) -> Vec<Hit> {
        self.state.hits.lock().unwrap().clone()
    }

    pub(crate) fn count(&self, path: &str) -> usize {
        self.hits().iter().filter(|h| h.path == path).count()
    }

    pub(crate) fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// TCP connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }
}

/// A runtime of its own for upstreams, so the arrival times they record are not delayed by the
/// client's work on the same threads.
pub(crate) fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().unwrap()
}

/// Scheduling jitter tolerated between a request leaving a client's rate limiter and this
/// server reading it (a stall of the client's threads delays one arrival and shortens the next
/// gap). Below any interval the tests set, so two requests let through together still fail.
pub(crate) const SLACK: Duration = Duration::from_millis(40);

/// Asserts that `arrivals` are spaced by `interval` (a burst of one): any two requests `k`
/// apart arrived at least `k × interval` apart, less [`SLACK`]. Returns the closest gap.
pub(crate) fn assert_spaced(arrivals: &mut [Instant], interval: Duration, who: &str) -> Duration {
    arrivals.sort();
    for i in 0..arrivals.len() {
        for j in i + 1..arrivals.len() {
            let need = (interval * (j - i) as u32).saturating_sub(SLACK);
            let got = arrivals[j] - arrivals[i];
            assert!(got >= need, "{who}: requests {i} and {j} arrived {got:?} apart, need {need:?}");
        }
    }
    arrivals.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(Duration::MAX)
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, tls: Option<Arc<Tls>>) {
    let mut conns = JoinSet::new();
    // Ends when the Upstream is dropped (the task is aborted, and `conns` with it).
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    // The head and body are written separately: without this, Nagle's algorithm
                    // held each response's body back ~40 ms for the client's delayed ACK.
                    let _ = stream.set_nodelay(true);
                    state.connections.fetch_add(1, Ordering::SeqCst);
                    match tls.clone() {
                        None => conns.spawn(connection(stream, state.clone())),
                        Some(tls) => conns.spawn(secure(stream, tls, state.clone())),
                    };
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// A connection over TLS: stalled, then the handshake (within 10 s), then as any other.
async fn secure(stream: TcpStream, tls: Arc<Tls>, state: Arc<State>) {
    tokio::time::sleep(tls.stall).await;
    if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(10), tls.acceptor.accept(stream)).await {
        connection(stream, state).await;
    }
}

async fn connection<S: AsyncRead + AsyncWrite + Unpin>(stream: S, state: Arc<State>) {
    let mut stream = BufReader::new(stream);
    // Bounded: at most 1,000 requests per connection, each head read within 30 s.
    for _ in 0..1000 {
        let Some(hit) = read_head(&mut stream).await else { return };
        let n = {
            let mut per = state.per_path.lock().unwrap();
            let slot = per.entry(hit.path.clone()).or_insert(0);
            *slot += 1;
            *slot - 1
        };
        state.hits.lock().unwrap().push(hit.clone());
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let reply = (state.handler)(&hit, n);
        let keep = write_reply(stream.get_mut(), reply).await;
        state.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !keep {
            return;
        }
    }
}

async fn read_head<S: AsyncRead + Unpin>(stream: &mut BufReader<S>) -> Option<Hit> {
    let mut line = String::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_line(&mut line)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        return None;
    }
    let at = Instant::now();
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut headers = HashMap::new();
    for _ in 0..100 {
        let mut h = String::new();
        stream.read_line(&mut h).await.ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    Some(Hit { path, at, headers })
}

/// Writes the reply; true when the connection may serve another request.
async fn write_reply<S: AsyncWrite + Unpin>(s: &mut S, reply: Reply) -> bool {
    match reply {
        Reply::Full { status, headers, body } => {
            let head = head(status, &headers, &format!("Content-Length: {}", body.len()));
            s.write_all(head.as_bytes()).await.is_ok() && s.write_all(&body).await.is_ok()
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            false
        }
        Reply::Trickle { body, every } => {
            let _ = s.write_all(head(200, &[], &format!("Content-Length: {}", body.len())).as_bytes()).await;
            for b in body {
                if s.write_all(&[b]).await.is_err() {
                    return false;
                }
                tokio::time::sleep(every).await;
            }
            false
        }
        Reply::CutShort { declared, body } => {
            let _ = s.write_all(head(200, &[], &format!("Content-Length: {declared}")).as_bytes()).await;
            let _ = s.write_all(&body).await;
            false
        }
        Reply::ChunkedCut { body } => {
            let _ = s.write_all(head(200, &[], "Transfer-Encoding: chunked").as_bytes()).await;
            let _ = s.write_all(format!("{:x}\r\n", body.len()).as_bytes()).await;
            let _ = s.write_all(&body).await;
            let _ = s.write_all(b"\r\n").await;
            false
        }
        Reply::Chunked { headers, body } => write_chunked(s, &headers, &body).await,
        Reply::Delay(d, inner) => {
            tokio::time::sleep(d).await;
            Box::pin(write_reply(s, *inner)).await
        }
    }
}

async fn write_chunked<S: AsyncWrite + Unpin>(s: &mut S, headers: &[(String, String)], body: &[u8]) -> bool {
    if s.write_all(head(200, headers, "Transfer-Encoding: chunked").as_bytes()).await.is_err() {
        return false;
    }
    for part in body.chunks(16 * 1024) {
        let ok = s.write_all(format!("{:x}\r\n", part.len()).as_bytes()).await.is_ok()
            && s.write_all(part).await.is_ok()
            && s.write_all(b"\r\n").await.is_ok();
        if !ok {
            return false;
        }
    }
    s.write_all(b"0\r\n\r\n").await.is_ok()
}

fn head(status: u16, headers: &[(String, String)], framing: &str) -> String {
    let mut h = format!("HTTP/1.1 {status} Test\r\n{framing}\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h
}
