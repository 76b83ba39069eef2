//! Callback URLs in log lines. A callback URL is its subscriber's capability: whoever knows
//! it can post deliveries and denials to it. Logs name only its host, and error texts that
//! quote the URL (reqwest's, `FetchError`'s, with the verification query appended) have it
//! replaced by its host before they are logged.

use url::Url;

/// The callback's host, what a log line may say of it.
pub(crate) fn host(callback: &Url) -> &str {
    callback.host_str().unwrap_or("")
}

/// The host of a callback given as text (as subscription tables key them); empty when it is
/// not a URL.
pub(crate) fn host_of(callback: &str) -> String {
    Url::parse(callback).ok().and_then(|u| u.host_str().map(str::to_ascii_lowercase)).unwrap_or_default()
}

/// `text` with every occurrence of `callback` (and of any URL that extends it, such as the
/// callback with `hub.challenge` appended) replaced by `<scheme>://<host>/…`.
pub(crate) fn scrub(text: &str, callback: &Url) -> String {
    let shown = format!("{}://{}/…", callback.scheme(), host(callback));
    // The URL with its query cut off is a prefix of every URL the hub builds from it.
    let mut bare = callback.clone();
    bare.set_query(None);
    bare.set_fragment(None);
    let prefix = bare.as_str();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        out.push_str(&rest[..at]);
        out.push_str(&shown);
        // Skip the rest of that URL: up to the next character no URL contains.
        let tail = &rest[at + prefix.len()..];
        let end =
            tail.find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ',')).unwrap_or(tail.len());
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_leaves_only_the_host() {
        let cb = Url::parse("https://sub.example/websub/0123abcd?k=1").unwrap();
        let text = "error sending request for url (https://sub.example/websub/0123abcd?k=1&hub.mode=denied&hub.challenge=x): refused";
        let got = scrub(text, &cb);
        assert_eq!(got, "error sending request for url (https://sub.example/…): refused");
        assert!(!got.contains("0123abcd"));
        assert_eq!(scrub("timed out", &cb), "timed out");
        assert_eq!(host(&cb), "sub.example");
    }
}
