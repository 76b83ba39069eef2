//! The harvest's progress display for the command line: a progress bar on a terminal,
//! nothing extra otherwise (the harvester's structured log lines carry the story then).

use std::io::IsTerminal as _;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use tributary::harvest::{Progress, ResourceOutcome, SourceReport};

/// A progress display; [`Display::finish`] clears it before the summary is printed.
pub(crate) struct Display {
    bar: Option<ProgressBar>,
}

/// A bar on a terminal (stderr), otherwise none.
pub(crate) fn for_terminal() -> Arc<Display> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos}/{len} resources {per_sec} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    });
    Arc::new(Display { bar })
}

impl Display {
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Display {
    /// Shows the totals a running service sent for a command it runs.
    pub(crate) fn show(&self, p: &tributary::control::wire::Progress) {
        if let Some(bar) = &self.bar {
            bar.set_length(p.listed);
            bar.set_position(p.done);
            if let Some(m) = &p.message {
                bar.set_message(m.clone());
            }
        }
    }
}

impl Progress for Display {
    fn listed(&self, _source: &str) {
        if let Some(bar) = &self.bar {
            bar.inc_length(1);
        }
    }

    fn resource(&self, _source: &str, _outcome: ResourceOutcome, _bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn source_done(&self, report: &SourceReport) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{} done", report.source));
        }
    }
}
