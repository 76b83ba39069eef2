//! A real `tributary run` process for a test: its own data directory, a configuration with a
//! `[[simulate]]` Source on 127.0.0.1 (so the binary starts the upstream itself, as the shipped
//! `sources.toml` does), and helpers to poll its HTTP API with bounded waits. Killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;

use super::cli;
use super::net::{eventually, wait_until_ok};

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
        Service::start_command(dir, config, args, env, "run").await
    }

    /// As [`Service::start`], with `tributary <args…> serve`: the aggregate of the store as
    /// it is, nothing harvested.
    pub(crate) async fn serve(dir: &Path, config: &str) -> Service {
        Service::start_command(dir, config, &[], &[], "serve").await
    }

    async fn start_command(dir: &Path, config: &str, args: &[&str], env: &[(&str, &str)], command: &str) -> Service {
        std::fs::write(dir.join("sources.toml"), config).unwrap();
        let port = config.split("listen = \"127.0.0.1:").nth(1).and_then(|r| r.split('"').next()).unwrap();
        let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let mut cmd = cli::tributary(args);
        cmd.current_dir(dir).arg(command).stdout(Stdio::null()).stderr(log).envs(env.iter().copied());
        let mut s = Service {
            child: Some(cmd.spawn().unwrap()),
            base: format!("http://127.0.0.1:{port}/"),
            dir: dir.to_owned(),
            client: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
        };
        let status = format!("{}api/status", s.base);
        let answered = wait_until_ok(&s.client, &status, s.child.as_mut().unwrap(), Duration::from_secs(30)).await;
        answered.unwrap_or_else(|e| panic!("{e}; log:\n{}", s.log()));
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
        if !eventually(limit, || check(self)).await {
            panic!("timed out after {limit:?} waiting until {what}; log:\n{}", self.log());
        }
    }

    /// The process, to signal it.
    pub(crate) fn child(&self) -> &Child {
        self.child.as_ref().expect("the service is running")
    }

    /// What the process logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// SIGKILL, at once: no shutdown, no flush; what the store made durable is all that stays.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits (at most 30 s) for the exit.
    pub(crate) async fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        cli::signal(&child, "TERM");
        if let Some(status) = cli::wait_for_exit(&mut child, Duration::from_secs(30)).await {
            return status;
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
