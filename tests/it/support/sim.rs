//! A simulated Source served on 127.0.0.1:0 for the length of a test, plus fetch and check
//! helpers. The server stops when the handle is dropped.

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use tokio::sync::oneshot;
use tributary::check::{CheckReport, check_reader};
use tributary::model::{Document, ReadOptions, read_document};
use tributary::simulate::{SimConfig, Simulator, serve};
use url::Url;

/// A running simulated Source.
pub(crate) struct RunningSim {
    pub(crate) sim: Simulator,
    pub(crate) client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds 127.0.0.1:0, builds the config (virtual clock, defaults) with `tweak`, and serves.
pub(crate) async fn start(tweak: impl FnOnce(&mut SimConfig)) -> RunningSim {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = SimConfig::new(Url::parse(&format!("http://{addr}/")).unwrap());
    tweak(&mut config);
    let sim = Simulator::new(config).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, sim.clone(), async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10)).build().unwrap();
    RunningSim { sim, client, stop: Some(stop) }
}

impl RunningSim {
    /// GET a path or absolute URL: status, headers, body.
    pub(crate) async fn get(&self, path_or_url: &str) -> (StatusCode, HeaderMap, Vec<u8>) {
        let url = if path_or_url.starts_with("http") { path_or_url.to_owned() } else { self.sim.url(path_or_url) };
        let resp = self.client.get(&url).send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        (status, headers, resp.bytes().await.unwrap().to_vec())
    }

    /// GET a document that must exist, pass `check` with no errors, and parse.
    pub(crate) async fn doc(&self, path_or_url: &str) -> (Vec<u8>, Document) {
        let (status, _, body) = self.get(path_or_url).await;
        assert_eq!(status, StatusCode::OK, "{path_or_url}");
        assert_checks_clean(path_or_url, &body);
        let (doc, _) = read_document(&body, ReadOptions::named(path_or_url)).unwrap();
        (body, doc)
    }
}

/// Runs `tributary check` in-process and fails the test on any error.
pub(crate) fn assert_checks_clean(name: &str, body: &[u8]) -> CheckReport {
    let report = check_reader(body, ReadOptions::named(name));
    assert_eq!(report.errors(), 0, "{}\n{}", report.render(true), String::from_utf8_lossy(body));
    report
}
