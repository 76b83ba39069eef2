//! Defect 2: clients that hold the web server's connections and streams.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;

use super::{LIMIT, config, start};
use crate::support::net::{free_port, listen};
use crate::support::service::Service;

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

#[tokio::test]
async fn slowloris_idle_and_flooding_connections_are_cut_off() {
    let (_dir, s) = start("[server]\nheader_timeout = \"2s\"\nmax_connections = 6\n").await;
    let addr = s.base.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let result = tokio::task::spawn_blocking(move || {
        // Half a request head, never finished.
        let mut half = TcpStream::connect(&addr).unwrap();
        half.write_all(b"GET /api/status HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
        let half_closed = closed_within(&mut half, Duration::from_secs(30));
        // A keep-alive connection left idle after one request.
        let mut idle = TcpStream::connect(&addr).unwrap();
        idle.write_all(b"GET /robots.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let idle_closed = closed_within(&mut idle, Duration::from_secs(30));
        // A flood: connections held open until one is refused.
        let mut held = Vec::new();
        let mut refused = None;
        for _ in 0..20 {
            let mut c = TcpStream::connect(&addr).unwrap();
            c.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
            let mut buf = [0u8; 256];
            if let Ok(n) = c.read(&mut buf)
                && n > 0
            {
                refused = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
                break;
            }
            held.push(c);
        }
        drop(held);
        (half_closed, idle_closed, refused)
    })
    .await
    .unwrap();
    assert!(result.0, "a half-sent head was not cut off within 30 s (header_timeout 2 s)");
    assert!(result.1, "an idle keep-alive connection was not closed within 30 s");
    let refused = result.2.expect("past max_connections a connection is answered");
    assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("too many connections"), "{refused}");
    // Once the flood is gone the server answers again.
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
