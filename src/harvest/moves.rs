//! Moved endpoints: a source's configured URL (its discovery, feed or OAI-PMH base URL) that
//! answers a permanent redirect (301, 308) is followed, and the move is kept in the source's
//! status — for the dashboard, `api/status` and `/metrics` — and logged once, as a WARN line
//! asking the operator to update `sources.toml`. Temporary redirects are followed silently.

use url::Url;

use crate::config::Source;
use crate::store::SourceStatus;

/// Records what fetching the configured URL `from` showed: moved to `to`, or not moved
/// (`None`, which forgets an earlier move). Logs a move the first time it is seen.
pub(crate) fn note(status: &mut SourceStatus, source: &str, from: &Url, to: Option<&Url>) {
    match to {
        Some(to) if status.moved.get(from.as_str()).is_some_and(|known| known == to.as_str()) => {}
        Some(to) => {
            tracing::warn!(source.id = %source, from = %from, "moved to {to} — update sources.toml");
            status.moved.insert(from.to_string(), to.to_string());
        }
        None => {
            status.moved.remove(from.as_str());
        }
    }
}

/// Forgets moves of URLs the source is no longer configured with: the operator updated
/// `sources.toml`.
pub(crate) fn prune(status: &mut SourceStatus, source: &Source) {
    let configured: Vec<&str> =
        source.feed.iter().flat_map(|f| f.urls.iter()).chain([&source.url]).map(Url::as_str).collect();
    status.moved.retain(|from, _| configured.contains(&from.as_str()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_is_kept_until_undone() {
        let mut status = SourceStatus::default();
        let (from, to) = (Url::parse("http://a/x").unwrap(), Url::parse("https://b/x").unwrap());
        note(&mut status, "s", &from, Some(&to));
        note(&mut status, "s", &from, Some(&to));
        assert_eq!(status.moved.get("http://a/x").map(String::as_str), Some("https://b/x"));
        note(&mut status, "s", &from, None);
        assert!(status.moved.is_empty());
    }
}
