//! The `[aggregator]` keys of Tributary's own OAI-PMH endpoint (`oai_name`, `oai_admin_email`,
//! `oai_repository_identifier`, `oai_page_size`, `oai_token_lifetime`), checked here so that
//! `raw.rs` only dispatches. Identify must name a repository and an administrator, and
//! Tributary cannot invent either: without both the endpoint is off (`{base_url}oai` answers
//! 404); with only one of them the file is wrong and says so.

use std::time::Duration;

use toml::Spanned;
use url::Url;

use super::{ConfigError, Locator, OaiProvider};

/// Records per page: with records of a few KiB, a page of a few MB (the writer also closes a
/// page at [`OaiProvider::page_bytes`], whatever the count).
const DEFAULT_OAI_PAGE_SIZE: u32 = 500;
/// DRIVER asks for resumption tokens that live at least a day.
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(86_400);
/// The soft cap of a page's bytes: the record that crosses it is the page's last.
const PAGE_BYTES: usize = 4 * 1024 * 1024;

/// The raw keys, as read.
pub(super) struct RawOaiKeys<'a> {
    pub(super) name: Option<&'a Spanned<String>>,
    pub(super) admin_email: Option<&'a Spanned<String>>,
    pub(super) repository_identifier: Option<&'a Spanned<String>>,
    pub(super) page_size: Option<&'a Spanned<i64>>,
    pub(super) token_lifetime: Option<&'a Spanned<String>>,
}

/// The endpoint's settings, or `None` when neither `oai_name` nor `oai_admin_email` is given.
pub(super) fn validate(
    k: &RawOaiKeys<'_>,
    base: &Url,
    table: std::ops::Range<usize>,
    at: &Locator<'_>,
) -> Result<Option<OaiProvider>, ConfigError> {
    let (name, email) = match (k.name, k.admin_email) {
        (None, None) => return no_extras(k, at).map(|()| None),
        (Some(_), None) => {
            return Err(at.error(table, "oai_admin_email", "oai_name needs oai_admin_email (Identify requires both)"));
        }
        (None, Some(_)) => {
            return Err(at.error(table, "oai_name", "oai_admin_email needs oai_name (Identify requires both)"));
        }
        (Some(n), Some(e)) => (n, e),
    };
    if name.get_ref().trim().is_empty() {
        return Err(at.error(name.span(), "oai_name", "must not be empty"));
    }
    let admin = email.get_ref().trim();
    if !is_email(admin) {
        return Err(at.error(email.span(), "oai_admin_email", format!("{admin:?} is not an e-mail address")));
    }
    let repository_identifier =
        match k.repository_identifier {
            Some(v) => check_repository_identifier(v.get_ref())
                .map_err(|m| at.error(v.span(), "oai_repository_identifier", m))?,
            None => default_repository_identifier(base)
                .map_err(|m| at.error(table.clone(), "oai_repository_identifier", m))?,
        };
    let page_size = match k.page_size {
        Some(v) => at.int(v, "oai_page_size", 1, 10_000)?,
        None => DEFAULT_OAI_PAGE_SIZE,
    };
    let token_lifetime = match k.token_lifetime {
        Some(v) => at.duration(v, "oai_token_lifetime")?,
        None => DEFAULT_TOKEN_LIFETIME,
    };
    if token_lifetime.as_secs() < 60 {
        let span = k.token_lifetime.map_or(table, Spanned::span);
        return Err(at.error(span, "oai_token_lifetime", "must be at least 60s"));
    }
    Ok(Some(OaiProvider {
        name: name.get_ref().trim().to_owned(),
        admin_email: admin.to_owned(),
        repository_identifier,
        page_size,
        page_bytes: PAGE_BYTES,
        token_lifetime,
    }))
}

/// The other keys mean nothing while the endpoint is off; naming one is a mistake.
fn no_extras(k: &RawOaiKeys<'_>, at: &Locator<'_>) -> Result<(), ConfigError> {
    let stray = [
        ("oai_repository_identifier", k.repository_identifier.map(Spanned::span)),
        ("oai_page_size", k.page_size.map(Spanned::span)),
        ("oai_token_lifetime", k.token_lifetime.map(Spanned::span)),
    ];
    match stray.into_iter().find_map(|(key, s)| s.map(|s| (key, s))) {
        Some((key, span)) => Err(at.error(span, key, format!("{key} needs oai_name and oai_admin_email"))),
        None => Ok(()),
    }
}

fn is_email(s: &str) -> bool {
    s.split_once('@').is_some_and(|(l, d)| !l.is_empty() && d.contains('.') && !s.contains(char::is_whitespace))
}

/// The base URL's host, which is a domain name as the oai-identifier scheme wants unless it is
/// an IP address; `localhost` and addresses get a `.local` / dotted form that still parses.
fn default_repository_identifier(base: &Url) -> Result<String, String> {
    let host = base.host_str().ok_or("base_url has no host; set oai_repository_identifier")?;
    let domain = matches!(base.host(), Some(url::Host::Domain(_))) && host.contains('.');
    let id = match (domain, base.port()) {
        (true, _) => host.to_owned(),
        // An address or a single label (`localhost`): a name made from it, with the port so
        // that two aggregators on one machine differ.
        (false, port) => {
            let flat = host.trim_matches(['[', ']']).replace(['.', ':'], "-");
            let port = port.map(|p| format!("-{p}")).unwrap_or_default();
            format!("tributary-{flat}{port}.local")
        }
    };
    check_repository_identifier(&id)
}

/// The oai-identifier scheme's `repositoryIdentifier`: a domain name, at least two labels of
/// `[A-Za-z0-9-]` (OAI-PMH guidelines, oai-identifier.xsd).
pub(super) fn check_repository_identifier(s: &str) -> Result<String, String> {
    let labels: Vec<&str> = s.split('.').collect();
    let label_ok =
        |l: &&str| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') && !l.starts_with('-');
    if labels.len() < 2 || !labels.iter().all(label_ok) || !labels[0].starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(format!("{s:?} is not a repositoryIdentifier: a domain name such as \"example.org\""));
    }
    Ok(s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_identifier_defaults_to_a_domain() {
        let id = |u: &str| default_repository_identifier(&Url::parse(u).unwrap());
        assert_eq!(id("https://agg.example.org/x/").unwrap(), "agg.example.org");
        assert_eq!(id("http://localhost:8080/").unwrap(), "tributary-localhost-8080.local");
        assert_eq!(id("http://127.0.0.1:8080/").unwrap(), "tributary-127-0-0-1-8080.local");
        assert_eq!(id("http://[::1]/").unwrap(), "tributary---1.local");
        assert!(check_repository_identifier("a.b-c").is_ok());
        assert!(check_repository_identifier("nodot").is_err());
    }
}
