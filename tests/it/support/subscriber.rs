//! A WebSub subscriber for tests: a small axum server on 127.0.0.1 with one callback, which
//! answers intent verifications (echoing the challenge, or not) and records every delivery;
//! how it answers deliveries can be changed while it runs (2xx, an error status, a redirect,
//! hanging). Real sockets: Tributary's hub talks to it as to any subscriber.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use tributary::model::{Document, ReadOptions, read_document};

/// How the callback answers a delivery.
#[derive(Debug, Clone)]
pub(crate) enum OnPost {
    /// 204.
    Accept,
    /// This status, no body.
    Status(u16),
    /// 307 to this URL.
    Redirect(String),
    /// Waits this long, then 204 (the hub has long given up by then).
    Hang(Duration),
    /// Records the delivery, then waits this long before 204: a slow but working subscriber.
    Slow(Duration),
}

/// How the callback answers a verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnVerify {
    /// 200 with the challenge.
    Echo,
    /// 200 with another body.
    Wrong,
}

/// One delivery received.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Delivery {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The payload, parsed by Tributary's own reader.
    pub(crate) fn document(&self) -> Document {
        read_document(&self.body, ReadOptions::named("delivery")).unwrap().0
    }

    /// The root `from` and `until`, as text.
    pub(crate) fn interval(&self) -> (String, String) {
        let md = self.document().header.md.unwrap();
        (md.from.unwrap().to_string(), md.until.unwrap().to_string())
    }
}

#[derive(Debug)]
struct Inner {
    on_post: OnPost,
    on_verify: OnVerify,
    verifications: Vec<HashMap<String, String>>,
    deliveries: Vec<Delivery>,
    /// Every POST, answered or not.
    posts: usize,
}

/// A running subscriber; stops with the test's runtime.
#[derive(Debug, Clone)]
pub(crate) struct Subscriber {
    pub(crate) addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

impl Subscriber {
    pub(crate) async fn start(on_post: OnPost, on_verify: OnVerify) -> Subscriber {
        let inner = Arc::new(Mutex::new(Inner {
            on_post,
            on_verify,
            verifications: Vec::new(),
            deliveries: Vec::new(),
            posts: 0,
        }));
        let app = Router::new().route("/cb", get(verify).post(deliver)).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Subscriber { addr, inner }
    }

    /// The callback URL (with a query of its own, which the hub must keep).
    pub(crate) fn callback(&self) -> String {
        format!("http://{}/cb?who=test", self.addr)
    }

    pub(crate) fn set_on_post(&self, on: OnPost) {
        self.inner.lock().unwrap().on_post = on;
    }

    pub(crate) fn verifications(&self) -> Vec<HashMap<String, String>> {
        self.inner.lock().unwrap().verifications.clone()
    }

    pub(crate) fn deliveries(&self) -> Vec<Delivery> {
        self.inner.lock().unwrap().deliveries.clone()
    }

    pub(crate) fn posts(&self) -> usize {
        self.inner.lock().unwrap().posts
    }
}

async fn verify(State(inner): State<Arc<Mutex<Inner>>>, RawQuery(q): RawQuery) -> Response {
    let params: HashMap<String, String> =
        url::form_urlencoded::parse(q.unwrap_or_default().as_bytes()).into_owned().collect();
    let mut i = inner.lock().unwrap();
    i.verifications.push(params.clone());
    let challenge = params.get("hub.challenge").cloned().unwrap_or_default();
    match i.on_verify {
        OnVerify::Echo => (StatusCode::OK, challenge).into_response(),
        OnVerify::Wrong => (StatusCode::OK, format!("not-{challenge}")).into_response(),
    }
}

async fn deliver(State(inner): State<Arc<Mutex<Inner>>>, headers: HeaderMap, body: Bytes) -> Response {
    let on = {
        let mut i = inner.lock().unwrap();
        i.posts += 1;
        i.on_post.clone()
    };
    match on {
        OnPost::Accept => {
            inner.lock().unwrap().deliveries.push(Delivery { headers, body });
            StatusCode::NO_CONTENT.into_response()
        }
        OnPost::Status(s) => StatusCode::from_u16(s).unwrap().into_response(),
        OnPost::Redirect(to) => (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]).into_response(),
        OnPost::Hang(d) => {
            tokio::time::sleep(d).await;
            StatusCode::NO_CONTENT.into_response()
        }
        OnPost::Slow(d) => {
            inner.lock().unwrap().deliveries.push(Delivery { headers, body });
            tokio::time::sleep(d).await;
            StatusCode::NO_CONTENT.into_response()
        }
    }
}
