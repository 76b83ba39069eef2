//! Credentials: `headers_env = { Authorization = "UP_AUTH" }` maps header names to the
//! environment variables holding their values, read once when the file is loaded. A value
//! never appears in `sources.toml`, and [`Secret`] keeps it out of every `Debug` print, so it
//! cannot reach a log line, an error message or the dashboard by way of the settings.
//!
//! The headers are sent to one origin only, the source's own (its configured URL's scheme,
//! host and port): the fetcher checks [`Credentials::applies_to`] on every hop.

use std::collections::BTreeMap;
use std::fmt;

use toml::Spanned;

use super::{ConfigError, Locator};

/// A header value read from the environment. Shown as `[redacted]` by `Debug`; only
/// [`Secret::expose`] hands out the value, for the request that carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// One credential header: its name, where its value came from, and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialHeader {
    /// The header name as written (`Authorization`).
    pub name: String,
    /// The environment variable it was read from (`UP_AUTH`), for messages.
    pub env: String,
    /// The value.
    pub value: Secret,
}

/// The headers a source sends to its own origin, and that origin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// `scheme://host[:port]` of the source's configured URL (as `Url::origin` writes it);
    /// `None` in `[defaults]`' own settings and wherever no source is named: sent nowhere.
    pub origin: Option<String>,
    /// The headers, in name order; empty: none.
    pub headers: Vec<CredentialHeader>,
}

impl Credentials {
    /// Whether the headers go to a request for `origin` (`scheme://host[:port]`).
    pub fn applies_to(&self, origin: &str) -> bool {
        !self.headers.is_empty() && self.origin.as_deref() == Some(origin)
    }
}

/// Headers Tributary sets itself, or that would change how a request is framed.
const RESERVED: [&str; 10] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
    "upgrade",
    "accept-encoding",
    "if-none-match",
    "if-modified-since",
    "user-agent",
];

impl Locator<'_> {
    /// `headers_env`: each header name checked, each variable read from the environment.
    /// Messages name the variable, never its value.
    pub(super) fn headers_env(
        &self,
        v: &Spanned<BTreeMap<String, Spanned<String>>>,
    ) -> Result<Vec<CredentialHeader>, ConfigError> {
        let mut out = Vec::new();
        for (name, env) in v.get_ref() {
            let at = |message: String| self.error(env.span(), "headers_env", message);
            check_name(name).map_err(|m| self.error(v.span(), "headers_env", m))?;
            let var = env.get_ref().trim();
            if var.is_empty() {
                return Err(at(format!("{name}: names no environment variable")));
            }
            let value = match std::env::var(var) {
                Ok(value) => value,
                Err(std::env::VarError::NotPresent) => {
                    return Err(at(format!("environment variable {var} (for header {name}) is not set")));
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(at(format!("environment variable {var} (for header {name}) is not valid UTF-8")));
                }
            };
            check_value(&value).map_err(|why| at(format!("environment variable {var} (for header {name}) {why}")))?;
            out.push(CredentialHeader { name: name.clone(), env: var.to_owned(), value: Secret(value) });
        }
        Ok(out)
    }
}

/// An HTTP field name (RFC 9110 §5.1: a token), not one Tributary sets itself.
fn check_name(name: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!("{name:?} is not an HTTP header name"));
    }
    if RESERVED.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!("{name} is set by Tributary itself and cannot be configured"));
    }
    Ok(())
}

/// A value that can be sent as a header: not empty, visible ASCII, spaces and tabs only. The
/// reason never quotes the value.
fn check_value(value: &str) -> Result<(), &'static str> {
    if value.trim().is_empty() {
        return Err("is empty");
    }
    if !value.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)) {
        return Err("holds a character an HTTP header cannot carry (a line break, a control or non-ASCII character)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let h = CredentialHeader { name: "Authorization".into(), env: "E".into(), value: Secret("Bearer xyz".into()) };
        let c = Credentials { origin: Some("http://a".into()), headers: vec![h] };
        let shown = format!("{c:?} {c:#?}");
        assert!(!shown.contains("xyz") && shown.contains("[redacted]"), "{shown}");
        assert!(c.applies_to("http://a") && !c.applies_to("http://a:81") && !c.applies_to("https://a"));
        assert!(!Credentials::default().applies_to("http://a"));
    }

    #[test]
    fn names_and_values_are_checked() {
        assert!(check_name("X-Api-Key").is_ok() && check_name("Authorization").is_ok());
        for bad in ["", "Bad Name", "Host", "user-agent", "a:b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_value("Bearer abc.def").is_ok());
        for bad in ["", "  ", "a\nb", "a\rb", "é"] {
            assert!(check_value(bad).is_err(), "{bad:?}");
        }
    }
}
