//! The CLI's side of the control socket: a command sent to the running service, and its output
//! relayed here, so that it looks the same whichever process ran it. `pause`, `resume` and
//! `reload` only make sense with a service, and their argument lives here.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use tributary::control::{self, wire};

use super::Global;
use super::common::load_config;
use super::progress;

#[derive(Debug, Args)]
pub(super) struct SourceArg {
    /// The source.
    #[arg(long = "source", value_name = "ID")]
    pub(super) source: String,
}

/// Sends `command` to the service running on `dir`; `None` when no service runs there.
pub(super) fn through_service(dir: &Path, command: wire::Command) -> anyhow::Result<Option<ExitCode>> {
    let Some(connection) = control::client::connect(dir)? else { return Ok(None) };
    let mut sink = Forward::default();
    let outcome = connection.call(command, &mut sink)?;
    sink.finish();
    Ok(Some(exit_with(outcome)))
}

/// The exit of a command the service ran: its status, or its error as this process would
/// print it.
pub(super) fn exit_with(outcome: control::client::Outcome) -> ExitCode {
    match outcome {
        control::client::Outcome::Exit(code) => ExitCode::from(code),
        control::client::Outcome::Error(text) => {
            eprintln!("error: {text}");
            ExitCode::from(2)
        }
    }
}

/// A command that needs the running service (`poll`, `pause`, `resume`, `reload`): exit 2 with
/// a plain message when none runs.
pub(super) fn online(global: &Global, command: wire::Command) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &[])?;
    let dir = &config.aggregator.data_dir;
    match through_service(dir, command)? {
        Some(code) => Ok(code),
        None => {
            eprintln!("error: no tributary service is running on {} (start it with `tributary run`)", dir.display());
            Ok(ExitCode::from(2))
        }
    }
}

/// Relays a command's answer to this process's output: its text as is, and its progress to a
/// bar on a terminal, as the command would show it here.
#[derive(Default)]
pub(super) struct Forward {
    bar: Option<Arc<progress::Display>>,
}

impl Forward {
    pub(super) fn with_progress() -> Forward {
        Forward { bar: Some(progress::for_terminal()) }
    }

    pub(super) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

impl control::client::Sink for Forward {
    fn stdout(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        std::io::stdout().lock().write_all(bytes)
    }

    fn stderr(&mut self, bytes: &[u8]) {
        use std::io::Write as _;
        let _ = std::io::stderr().lock().write_all(bytes);
    }

    fn progress(&mut self, p: &wire::Progress) {
        if let Some(bar) = &self.bar {
            bar.show(p);
        }
    }
}
