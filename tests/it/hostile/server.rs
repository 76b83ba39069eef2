//! Defect 2: clients that hold the web server's connections and streams.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;

use super::{LIMIT, config, start};
use crate::support::net::{free_port, listen};
use crate::support::service::{Service, parse_metrics, value};

/// What an HTTP/2 client with prior knowledge sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads from `sock` until EOF or error; true if the server closed it within `limit`.
fn closed_within(sock: &mut TcpStream, limit: Duration) -> bool {
    sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match sock.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

/// A connection to `server` from `client` (any 127.x address: Linux routes 127/8 to `lo`), with
/// `first` sent on it.
async fn connect_from(client: &str, server: SocketAddr, first: &[u8]) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(client.parse().unwrap(), 0)).unwrap();
    let mut c = socket.connect(server).await.unwrap().into_std().unwrap();
    c.set_nonblocking(false).unwrap();
    c.write_all(first).unwrap();
    c
}

/// Sends one byte of a request head that never ends every 3 s, at most 10 times; true if the
/// server closed the connection meanwhile.
fn trickle_closed(sock: &mut TcpStream) -> bool {
    let head = b"GET /api/status HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaa";
    head.iter().take(10).any(|b| sock.write_all(&[*b]).is_err() || closed_within(sock, Duration::from_secs(3)))
}

/// Defect 2 and issue 51: a connection is closed once it has waited `header_timeout` for a
/// request head, the first one included, whatever the client sends meanwhile — nothing, a byte
/// that picks HTTP/1, half a head, a head trickled a byte at a time, part of the HTTP/2
/// preface, the whole preface and no frame — and a keep-alive connection left idle after a
/// request.
#[tokio::test]
async fn silent_slow_and_idle_connections_are_closed() {
    let (_dir, s) = start("[server]\nheader_timeout = \"2s\"\n").await;
    let addr: SocketAddr = s.base.trim_start_matches("http://").trim_end_matches('/').parse().unwrap();
    let firsts: [(&str, &[u8]); 7] = [
        ("a silent connection", b""),
        ("a connection that sent one byte", b"G"),
        ("half a head", b"GET /api/status HTTP/1.1\r\nHost: x\r\nX-Slow: "),
        ("a trickled head", b""),
        ("part of the HTTP/2 preface", &H2_PREFACE[..16]),
        ("the HTTP/2 preface and no frame", H2_PREFACE),
        ("a keep-alive connection idle after a request", b"GET /robots.txt HTTP/1.1\r\nHost: x\r\n\r\n"),
    ];
    let mut trials = Vec::new();
    for (what, first) in firsts {
        let mut sock = connect_from("127.0.0.1", addr, first).await;
        trials.push(tokio::task::spawn_blocking(move || {
            let closed = if what == "a trickled head" {
                trickle_closed(&mut sock)
            } else {
                closed_within(&mut sock, Duration::from_secs(30))
            };
            (what, closed)
        }));
    }
    let mut open = Vec::new();
    for trial in trials {
        let (what, closed) = trial.await.unwrap();
        if !closed {
            open.push(what);
        }
    }
    assert!(open.is_empty(), "not closed within 30 s (header_timeout 2 s): {open:?}");
    assert_eq!(s.get("api/status").await.0, 200);
}

/// Reads what the server says first on `sock`, waiting at most `wait`.
fn first_answer(sock: &mut TcpStream, wait: Duration) -> String {
    sock.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 512];
    let n = sock.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Issue 51 and defect 2: one address opening as many silent connections as the whole server
/// allows, over HTTP/1 or HTTP/2, holds only its share (`max_connections_per_client`); the rest
/// are refused at once, and another client is still answered, over either protocol. A flood
/// from many addresses fills `max_connections` and is refused past it, and the server answers
/// again once it is gone.
#[tokio::test]
async fn floods_are_refused_and_one_address_locks_no_one_else_out() {
    // A long header_timeout, so that every held connection is still held when the others ask.
    let server = "[server]\nheader_timeout = \"10m\"\nmax_connections = 12\nmax_connections_per_client = 3\n";
    let (_dir, s) = start(server).await;
    let addr: SocketAddr = s.base.trim_start_matches("http://").trim_end_matches('/').parse().unwrap();
    let mut held = Vec::new();
    // 127.0.0.3 over HTTP/1 (sending nothing), 127.0.0.4 over HTTP/2 (the preface and no frame,
    // or part of it).
    for (client, firsts) in [("127.0.0.3", [&b""[..]; 3]), ("127.0.0.4", [H2_PREFACE, H2_PREFACE, &H2_PREFACE[..10]])] {
        for first in firsts {
            held.push(connect_from(client, addr, first).await);
        }
        let mut flood = Vec::new();
        for _ in 0..12 {
            flood.push(connect_from(client, addr, b"").await);
        }
        let answers =
            tokio::task::spawn_blocking(move || flood.iter_mut().map(|c| first_answer(c, LIMIT)).collect::<Vec<_>>());
        for answer in answers.await.unwrap() {
            assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("from your address"), "{client}: {answer}");
        }
    }
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    for h2 in [false, true] {
        let client = reqwest::Client::builder().local_address(other).timeout(LIMIT);
        let client = if h2 { client.http2_prior_knowledge() } else { client.http1_only() };
        let r = client.build().unwrap().get(format!("{}api/status", s.base)).send().await.unwrap();
        assert_eq!(r.status(), 200, "HTTP/2: {h2}");
    }
    let metrics = s.get("metrics").await.2;
    let refused =
        value(&parse_metrics(&metrics), "tributary_http_connections_refused_total", &[("reason", "client_full")]);
    assert_eq!(refused, Some(24.0), "{metrics}");

    // A flood from one address per connection: held until one is refused.
    let mut refused = None;
    for i in 1..=20 {
        let mut c = connect_from(&format!("127.0.1.{i}"), addr, b"").await;
        let (answer, c) =
            tokio::task::spawn_blocking(move || (first_answer(&mut c, Duration::from_millis(500)), c)).await.unwrap();
        if !answer.is_empty() {
            refused = Some(answer);
            break;
        }
        held.push(c);
    }
    let refused = refused.expect("past max_connections a connection is answered");
    assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("too many connections open; try"), "{refused}");
    drop(held);
    s.wait_until("the server answers again", LIMIT, |s| async move { s.get("api/status").await.0 == 200 }).await;
}

/// A feed of four entries of 3.5 MB each: its republished `feed.atom` (14 MB) is streamed, and
/// far larger than what the sockets between a client and the server buffer.
async fn serve_big_feed() -> String {
    let text = "x".repeat(3_500_000);
    let entries: String = (0..4)
        .map(|i| {
            format!(
                "<entry><id>urn:big:{i}</id><title>{i}</title><updated>2024-01-01T00:00:00Z</updated>\
                 <content type=\"text\">{text}</content></entry>"
            )
        })
        .collect();
    let feed = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\"><title>big</title>\
         <id>urn:big</id><updated>2024-01-01T00:00:00Z</updated>{entries}</feed>"
    );
    let app = Router::new().route(
        "/feed.atom",
        get(move || {
            let feed = feed.clone();
            async move { ([("content-type", "application/atom+xml")], feed) }
        }),
    );
    format!("http://127.0.0.1:{}/feed.atom", listen(app).await)
}

/// Defect 2, streamed bodies: with one stream slot, a client that asks for a streamed
/// document and reads none of it holds the slot for `stream_stall` only; the next client then
/// gets the whole document, and the stalled one never does.
#[tokio::test]
async fn a_reader_that_stalls_a_streamed_body_loses_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let feed = serve_big_feed().await;
    let server = "[server]\nmax_streams = 1\nstream_stall = \"2s\"\nheader_timeout = \"2s\"\n";
    let s = Service::start(dir.path(), &config(free_port(), &feed, server), &[], &[]).await;
    let whole = |body: &str| body.contains("urn:big:3") && body.trim_end().ends_with("</feed>");
    s.wait_until("the big feed is republished", LIMIT, |s| async move { whole(&s.get("sets/news/feed.atom").await.2) })
        .await;
    let full = s.get("sets/news/feed.atom").await.2.len();

    let addr = s.base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    // A small receive buffer, so that the kernel does not grow it to hold the whole feed.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(addr.parse().unwrap()).await.unwrap().into_std().unwrap();
    stalled.set_nonblocking(false).unwrap();
    stalled.write_all(b"GET /sets/news/feed.atom HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // Its answer has begun, so it holds the slot (the head is sent once a slot is taken);
    // then it reads nothing more.
    let (head, stalled) = tokio::task::spawn_blocking(move || {
        stalled.set_read_timeout(Some(LIMIT)).unwrap();
        let mut head = vec![0u8; 1024];
        let n = stalled.read(&mut head).unwrap();
        (String::from_utf8_lossy(&head[..n]).into_owned(), stalled)
    })
    .await
    .unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let next = tokio::time::timeout(LIMIT, s.get("sets/news/feed.atom")).await;
    let (status, _, body) = next.expect("the next client was kept waiting past the stall bound");
    assert_eq!(status, 200);
    assert!(whole(&body), "the next client got the whole feed");

    // The stalled client reads now: what was buffered, then the connection ends without the
    // rest of the document.
    let got = tokio::task::spawn_blocking(move || {
        let mut stalled = stalled;
        stalled.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let deadline = Instant::now() + LIMIT;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while Instant::now() < deadline {
            match stalled.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
        got
    })
    .await
    .unwrap();
    assert!(got.len() + head.len() < full, "the stalled client got the whole feed ({} of {full} bytes)", got.len());
    assert!(!String::from_utf8_lossy(&got).contains("</feed>"), "the stalled stream was not cut off");
}
