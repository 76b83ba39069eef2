//! OAI-PMH data providers for the harvest tests, on 127.0.0.1: the real one, PyPI's `oaipmh`
//! served by `tests/fixtures/oai/server.py` from a JSON file the test rewrites, and a hostile
//! one written here, which answers each request as the test's script says and logs it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use super::tools::oaipmh_python;

/// The real data provider, killed when dropped.
pub(crate) struct PyOai {
    child: Child,
    repo: PathBuf,
    _dir: tempfile::TempDir,
    /// Its base URL.
    pub(crate) base: String,
}

impl PyOai {
    /// Serves `repo` (the JSON of `server.py`'s docs) with `batch` records per page; `None`
    /// when `oaipmh` is missing outside CI.
    pub(crate) fn start(test: &str, repo: &serde_json::Value, batch: usize) -> Option<PyOai> {
        let python = oaipmh_python(test)?;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repo.json");
        std::fs::write(&path, repo.to_string()).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oai/server.py");
        let mut child = python
            .command()
            .args([script, path.to_str().unwrap(), &batch.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("server.py printed {line:?}"));
        Some(PyOai { child, repo: path, _dir: dir, base: format!("http://127.0.0.1:{port}/oai") })
    }

    /// Replaces the repository's content (read again at the next request).
    pub(crate) fn set(&self, repo: &serde_json::Value) {
        std::fs::write(&self.repo, repo.to_string()).unwrap();
    }
}

impl Drop for PyOai {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One scripted answer: status, headers, body.
pub(crate) type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);

/// The script: the request's query arguments and its number (from 0) → the answer.
pub(crate) type Script = Arc<dyn Fn(&HashMap<String, String>, usize) -> Answer + Send + Sync>;

/// The hostile provider; every request's raw query is in `log`.
pub(crate) struct Hostile {
    /// Its base URL.
    pub(crate) base: String,
    pub(crate) log: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Hostile {
    pub(crate) async fn start(script: Script) -> Hostile {
        use axum::extract::{RawQuery, State};
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let state = (script, log.clone());
        let app = axum::Router::new()
            .route(
                "/oai",
                axum::routing::get(
                    |State((script, log)): State<(Script, Arc<Mutex<Vec<String>>>)>, RawQuery(q): RawQuery| async move {
                        let q = q.unwrap_or_default();
                        let n = {
                            let mut l = log.lock().unwrap();
                            l.push(q.clone());
                            l.len() - 1
                        };
                        let args: HashMap<String, String> =
                            url::form_urlencoded::parse(q.as_bytes()).into_owned().collect();
                        let (status, headers, body) = script(&args, n);
                        let mut r = axum::response::Response::new(axum::body::Body::from(body));
                        *r.status_mut() = axum::http::StatusCode::from_u16(status).unwrap();
                        for (k, v) in headers {
                            r.headers_mut().insert(k, v.parse().unwrap());
                        }
                        r
                    },
                ),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/oai", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Hostile { base, log, task }
    }

    /// The queries received so far.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A well-formed response envelope around `inner`.
/// The GetRecord URL (oai_dc) of `id` at `base`: the name and origin Tributary's harvester
/// gives a record.
pub(crate) fn get_record_url(base: &str, id: &str) -> String {
    let mut u = url::Url::parse(base).unwrap();
    u.query_pairs_mut()
        .append_pair("verb", "GetRecord")
        .append_pair("metadataPrefix", "oai_dc")
        .append_pair("identifier", id);
    u.to_string()
}

pub(crate) fn envelope(inner: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<OAI-PMH xmlns=\"http://www.openarchives.org/OAI/2.0/\">\
         <responseDate>2026-01-10T12:00:00Z</responseDate><request>http://x/oai</request>{inner}</OAI-PMH>\n"
    )
    .into_bytes()
}

/// Identify with `granularity` and `deleted` (`persistent`, `no`…).
pub(crate) fn identify(granularity: &str, deleted: &str) -> Vec<u8> {
    identify_since(granularity, deleted, "2000-01-01")
}

/// [`identify`] with `earliestDatestamp` = `earliest`.
pub(crate) fn identify_since(granularity: &str, deleted: &str, earliest: &str) -> Vec<u8> {
    envelope(&format!(
        "<Identify><repositoryName>Hostile</repositoryName><baseURL>http://x/oai</baseURL>\
         <protocolVersion>2.0</protocolVersion><adminEmail>ops@x</adminEmail>\
         <earliestDatestamp>{earliest}</earliestDatestamp><deletedRecord>{deleted}</deletedRecord>\
         <granularity>{granularity}</granularity></Identify>"
    ))
}

/// ListMetadataFormats offering oai_dc.
pub(crate) fn formats() -> Vec<u8> {
    envelope(
        "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix>\
         <schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema>\
         <metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace>\
         </metadataFormat></ListMetadataFormats>",
    )
}

/// A record with `title`.
pub(crate) fn record(id: &str, title: &str) -> String {
    format!(
        "<record><header><identifier>{id}</identifier><datestamp>2026-01-01T00:00:00Z</datestamp></header>\
         <metadata><oai_dc:dc xmlns:oai_dc=\"http://www.openarchives.org/OAI/2.0/oai_dc/\" \
         xmlns:dc=\"http://purl.org/dc/elements/1.1/\"><dc:title>{title}</dc:title></oai_dc:dc></metadata></record>"
    )
}

/// A ListRecords page of `records`, with `token` (`None`: none).
pub(crate) fn page(records: &[String], token: Option<&str>) -> Vec<u8> {
    let token = token.map(|t| format!("<resumptionToken>{t}</resumptionToken>")).unwrap_or_default();
    envelope(&format!("<ListRecords>{}{token}</ListRecords>", records.concat()))
}

/// An OAI-PMH error response.
pub(crate) fn oai_error(code: &str) -> Vec<u8> {
    envelope(&format!("<error code=\"{code}\">as you asked</error>"))
}

/// 200 with `body` as XML.
pub(crate) fn ok(body: Vec<u8>) -> Answer {
    (200, vec![("content-type", "text/xml".into())], body)
}

/// The answer to Identify and ListMetadataFormats, if `args` asks one of them.
pub(crate) fn preamble(args: &HashMap<String, String>) -> Option<Answer> {
    match args.get("verb").map(String::as_str) {
        Some("Identify") => Some(ok(identify("YYYY-MM-DDThh:mm:ssZ", "persistent"))),
        Some("ListMetadataFormats") => Some(ok(formats())),
        _ => None,
    }
}
