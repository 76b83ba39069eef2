//! A subscriber's request to a hub (WebSub §5.1), read from its form-encoded body and checked
//! before anything is contacted. Pure: the hub decides what to do with it.

use std::time::Duration;

use url::Url;

use super::signature::MAX_SECRET_BYTES;

/// Largest request body read: a callback and a topic URL, a secret under 200 bytes, a lease.
pub(crate) const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// subscribe or unsubscribe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Subscribe,
    Unsubscribe,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Subscribe => "subscribe",
            Mode::Unsubscribe => "unsubscribe",
        }
    }
}

/// A well-formed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HubRequest {
    pub(crate) mode: Mode,
    pub(crate) topic: String,
    pub(crate) callback: Url,
    /// `hub.lease_seconds` as asked for; the hub clamps it into its bounds.
    pub(crate) lease: Option<Duration>,
    pub(crate) secret: Option<String>,
}

/// Why a request is refused with 400 (the text is the answer's body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("hub.mode is missing")]
    NoMode,
    #[error("hub.mode {0:?} is not subscribe or unsubscribe (this hub publishes its own topics only)")]
    BadMode(String),
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("{0} is given more than once")]
    Repeated(String),
    #[error("hub.callback {0:?} is not an absolute http or https URL")]
    BadCallback(String),
    #[error("hub.lease_seconds {0:?} is not a positive whole number of seconds")]
    BadLease(String),
    #[error("hub.secret is {0} bytes; it must be shorter than {MAX_SECRET_BYTES} bytes (WebSub 5.1)")]
    SecretTooLong(usize),
    #[error("hub.secret is empty")]
    EmptySecret,
    #[error("the body is not application/x-www-form-urlencoded UTF-8")]
    NotForm,
}

/// Why a POST to a hub is refused before verification: its status and a text for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) text: String,
}

/// Whether a `Content-Type` says `application/x-www-form-urlencoded` (parameters ignored).
pub(crate) fn is_form(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
}

/// Reads a POST to a hub: declared form-encoded (else 415), at most [`MAX_REQUEST_BYTES`]
/// (else 413), and well-formed (else 400 with the reason).
pub(crate) fn read(form: bool, body: &[u8]) -> Result<HubRequest, Refusal> {
    let refuse = |status, text: String| Err(Refusal { status, text });
    if !form {
        return refuse(415, "send hub requests as application/x-www-form-urlencoded".into());
    }
    if body.len() > MAX_REQUEST_BYTES {
        return refuse(413, format!("a hub request is at most {MAX_REQUEST_BYTES} bytes"));
    }
    parse(body).or_else(|e| refuse(400, e.to_string()))
}

/// Reads a request body. Parameters WebSub does not name are ignored (§5.1.1: hubs MUST
/// ignore what they do not understand); a `hub.*` parameter given twice is refused, since
/// either reading could be the wrong one.
pub(crate) fn parse(body: &[u8]) -> Result<HubRequest, RequestError> {
    std::str::from_utf8(body).map_err(|_| RequestError::NotForm)?;
    let mut fields: Vec<(String, String)> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(body) {
        if k.starts_with("hub.") {
            if fields.iter().any(|(seen, _)| *seen == k) {
                return Err(RequestError::Repeated(k.into_owned()));
            }
            fields.push((k.into_owned(), v.into_owned()));
        }
    }
    let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let mode = match get("hub.mode") {
        None => return Err(RequestError::NoMode),
        Some("subscribe") => Mode::Subscribe,
        Some("unsubscribe") => Mode::Unsubscribe,
        Some(other) => return Err(RequestError::BadMode(other.to_owned())),
    };
    let topic = get("hub.topic").filter(|t| !t.is_empty()).ok_or(RequestError::Missing("hub.topic"))?;
    let raw_callback = get("hub.callback").filter(|c| !c.is_empty()).ok_or(RequestError::Missing("hub.callback"))?;
    let callback = Url::parse(raw_callback)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some() && u.fragment().is_none())
        .ok_or_else(|| RequestError::BadCallback(raw_callback.to_owned()))?;
    let lease = get("hub.lease_seconds").map(lease).transpose()?;
    let secret = get("hub.secret").map(secret).transpose()?;
    Ok(HubRequest { mode, topic: topic.to_owned(), callback, lease, secret })
}

fn lease(text: &str) -> Result<Duration, RequestError> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .map(Duration::from_secs)
        .ok_or_else(|| RequestError::BadLease(text.to_owned()))
}

fn secret(text: &str) -> Result<String, RequestError> {
    match text.len() {
        0 => Err(RequestError::EmptySecret),
        n if n >= MAX_SECRET_BYTES => Err(RequestError::SecretTooLong(n)),
        _ => Ok(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            s.append_pair(k, v);
        }
        s.finish().into_bytes()
    }

    const OK: [(&str, &str); 3] = [
        ("hub.mode", "subscribe"),
        ("hub.topic", "http://t/sets/a/notifications"),
        ("hub.callback", "http://c/cb?x=1"),
    ];

    #[test]
    fn a_subscription_request_is_read() {
        let mut pairs = OK.to_vec();
        pairs.extend([("hub.lease_seconds", "600"), ("hub.secret", "s3cret"), ("other", "ignored")]);
        let r = parse(&form(&pairs)).unwrap();
        assert_eq!(r.mode, Mode::Subscribe);
        assert_eq!(r.topic, "http://t/sets/a/notifications");
        assert_eq!(r.callback.as_str(), "http://c/cb?x=1");
        assert_eq!(r.lease, Some(Duration::from_secs(600)));
        assert_eq!(r.secret.as_deref(), Some("s3cret"));
        let mut un = OK.to_vec();
        un[0].1 = "unsubscribe";
        assert_eq!(parse(&form(&un)).unwrap().mode, Mode::Unsubscribe);
    }

    #[test]
    fn every_defect_has_its_answer() {
        let with = |k: &str, v: &str| {
            let mut p: Vec<(&str, &str)> = OK.iter().filter(|(key, _)| *key != k).copied().collect();
            p.push((k, v));
            parse(&form(&p))
        };
        let without = |k: &str| parse(&form(&OK.iter().filter(|(key, _)| *key != k).copied().collect::<Vec<_>>()));
        assert_eq!(without("hub.mode"), Err(RequestError::NoMode));
        assert_eq!(with("hub.mode", "publish"), Err(RequestError::BadMode("publish".into())));
        assert_eq!(without("hub.topic"), Err(RequestError::Missing("hub.topic")));
        assert_eq!(with("hub.topic", ""), Err(RequestError::Missing("hub.topic")));
        assert_eq!(without("hub.callback"), Err(RequestError::Missing("hub.callback")));
        for bad in ["ftp://c/x", "/relative", "http://c/x#frag", "not a url"] {
            assert_eq!(with("hub.callback", bad), Err(RequestError::BadCallback(bad.into())), "{bad}");
        }
        for bad in ["0", "-5", "ten", "1.5"] {
            assert_eq!(with("hub.lease_seconds", bad), Err(RequestError::BadLease(bad.into())), "{bad}");
        }
        assert_eq!(with("hub.secret", &"x".repeat(200)), Err(RequestError::SecretTooLong(200)));
        assert!(with("hub.secret", &"x".repeat(199)).is_ok());
        assert_eq!(with("hub.secret", ""), Err(RequestError::EmptySecret));
        let mut twice = form(&OK);
        twice.extend_from_slice(b"&hub.topic=http://other/");
        assert_eq!(parse(&twice), Err(RequestError::Repeated("hub.topic".into())));
        assert_eq!(parse(&[0xff, 0xfe]), Err(RequestError::NotForm));
    }

    #[test]
    fn a_post_is_refused_for_its_type_and_size_before_its_fields() {
        assert!(is_form(Some("application/x-www-form-urlencoded; charset=UTF-8")));
        assert!(!is_form(Some("application/xml")) && !is_form(None));
        assert_eq!(read(false, &form(&OK)).unwrap_err().status, 415);
        assert_eq!(read(true, &vec![b'a'; MAX_REQUEST_BYTES + 1]).unwrap_err().status, 413);
        assert_eq!(read(true, b"hub.mode=publish").unwrap_err().status, 400);
        assert_eq!(read(true, &form(&OK)).unwrap().mode, Mode::Subscribe);
    }
}
