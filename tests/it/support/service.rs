//! A real `tributary run` process for a test: its own data directory, a configuration with a
//! `[[simulate]]` Source on 127.0.0.1 (so the binary starts the upstream itself, as the shipped
//! `sources.toml` does), and helpers to poll its HTTP API with bounded waits. Killed on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A free port on 127.0.0.1 (bound, then released: a small race other tests rarely win).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The configuration of a one-source aggregator whose source is a simulator on `sim_port`
/// changing `rate` times a second, posing as an aggregator of http://origin.example.org/.
pub(crate) fn config(port: u16, sim_port: u16, resources: usize, rate: f64) -> String {
    format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\n\n\
         [[simulate]]\nid = \"sim\"\nlisten = \"127.0.0.1:{sim_port}\"\nresources = {resources}\nchange_rate = {rate:.1}\n\
         seed = 7\nvia_origin = \"http://origin.example.org/\"\n\n\
         [[source]]\nid = \"sim\"\nurl = \"http://127.0.0.1:{sim_port}/.well-known/resourcesync\"\nallow_private = true\n\
         rate = \"unlimited\"\npoll = \"1s\"\n\n[[set]]\nid = \"all\"\nsources = [\"sim\"]\n"
    )
}

/// A running `tributary run`.
pub(crate) struct Service {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT/`.
    pub(crate) base: String,
    /// Holds `sources.toml`, `store/` and `stderr.log`.
    pub(crate) dir: PathBuf,
    pub(crate) client: reqwest::Client,
}

impl Service {
    /// Writes `config` into `dir` and starts `tributary <args…> run` there, then waits (at
    /// most 30 s) until it answers HTTP.
    pub(crate) async fn start(dir: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> Service {
        std::fs::write(dir.join("sources.toml"), config).unwrap();
        let port = config.split("listen = \"127.0.0.1:").nth(1).and_then(|r| r.split('"').next()).unwrap();
        let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tributary"));
        cmd.current_dir(dir).args(args).arg("run").stdout(Stdio::null()).stderr(log).env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let s = Service {
            child: Some(child),
            base: format!("http://127.0.0.1:{port}/"),
            dir: dir.to_owned(),
            client: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
        };
        s.wait_until("the server answers", Duration::from_secs(30), |s| async move {
            s.client.get(format!("{}api/status", s.base)).send().await.is_ok_and(|r| r.status().is_success())
        })
        .await;
        s
    }

    /// GET `path` (relative to the base URL) as JSON.
    pub(crate) async fn json(&self, path: &str) -> serde_json::Value {
        let r = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        serde_json::from_str(&r.text().await.unwrap()).unwrap()
    }

    /// GET `path`: status, headers and body text.
    pub(crate) async fn get(&self, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
        let r = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        let (status, headers) = (r.status().as_u16(), r.headers().clone());
        (status, headers, r.text().await.unwrap())
    }

    /// Polls `check` every 250 ms until it holds; panics after `limit`.
    pub(crate) async fn wait_until<'a, F, Fut>(&'a self, what: &str, limit: Duration, check: F)
    where
        F: Fn(&'a Service) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if check(self).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("timed out after {limit:?} waiting until {what}; log:\n{}", self.log());
    }

    /// What the process logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// Sends SIGTERM and waits (at most 30 s) for the exit.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("tributary did not stop within 30 s of SIGTERM; log:\n{}", self.log());
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One sample of the Prometheus text format.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) value: f64,
}

impl Sample {
    pub(crate) fn label(&self, k: &str) -> Option<&str> {
        self.labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }
}

/// Parses the exposition text (the subset Tributary writes: no escapes in label values).
pub(crate) fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), Vec::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line}"));
                let labels = body
                    .split("\",")
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p.split_once("=\"").unwrap_or_else(|| panic!("bad label {p:?} in {line}"));
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
        };
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "bad name: {line}");
        out.push(Sample { name, labels, value });
    }
    out
}

/// The value of `name` with these labels (all must match), if present.
pub(crate) fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples.iter().find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v))).map(|s| s.value)
}
