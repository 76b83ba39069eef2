//! Findings about a document that do not stop reading it.
//!
//! Documents in the wild break SHOULDs constantly, so the reader and the validator keep going
//! and report. An `Error` means the document (or that entry) cannot be used safely; a `Warning`
//! means it can, with the stated reading. Each finding names the spec section it comes from.

use std::fmt;

use super::position::Position;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// A MUST is broken in a way that makes the document or entry unusable.
    Error,
    /// A SHOULD (or a harmless MUST) is broken; Tributary proceeds with a stated reading.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Where in the document.
    pub position: Position,
    /// The spec section the rule comes from (e.g. "12.1", "Appendix A").
    pub section: &'static str,
    /// What is wrong, naming the offending value.
    pub message: String,
}

impl Diagnostic {
    /// An error at `position`.
    pub fn error(position: Position, section: &'static str, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Error, position, section, message: message.into() }
    }

    /// A warning at `position`.
    pub fn warning(position: Position, section: &'static str, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, position, section, message: message.into() }
    }

    /// True for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let section = if self.section.starts_with(|c: char| c.is_ascii_digit()) { "§" } else { "" };
        write!(f, "{}: {}: {} [spec {section}{}]", self.severity, self.position, self.message, self.section)
    }
}
