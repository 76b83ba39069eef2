//! Printing an error with its causes, once.
//!
//! Every error type in the library keeps what caused it as its `source()` and says in its own
//! message only what it adds (a URL, a package, a path), never the cause's text again. Whoever
//! finally shows the error — a log line, a failure row, the dashboard, `main` — prints the
//! whole chain with [`chain`], as anyhow's `{:#}` does: `cannot fetch the document:
//! http://a.example/x: HTTP status 404`.

use std::error::Error;
use std::fmt;

/// Causes followed at most; chains are short, but a cyclic one must not hang a log line.
const MAX_DEPTH: usize = 8;

/// `e` and its sources, joined by `: `, for a log field (`error = %chain(&e)`).
pub fn chain<'a>(e: &'a (dyn Error + 'a)) -> Chain<'a> {
    Chain(e)
}

/// See [`chain`].
#[derive(Clone, Copy)]
pub struct Chain<'a>(&'a (dyn Error + 'a));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        for _ in 0..MAX_DEPTH {
            let Some(c) = cause else { break };
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read the list")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn each_cause_appears_once() {
        let e = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(chain(&e).to_string(), "cannot read the list: disk on fire");
    }
}
