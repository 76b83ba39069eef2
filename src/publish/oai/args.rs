//! An OAI-PMH request's arguments, checked (OAI-PMH 2.0 §3.1, §4): which verb, which
//! arguments it takes, and their syntax. Pure: the web layer hands the decoded pairs of the
//! query or the form body, in order, and gets a [`Request`] or the protocol error to answer.

use crate::model::W3cDateTime;

/// A protocol error: its code (§3.6) and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// `badVerb`, `badArgument`, `badResumptionToken`, `cannotDisseminateFormat`,
    /// `idDoesNotExist`, `noRecordsMatch`, `noMetadataFormats` or `noSetHierarchy`.
    pub code: &'static str,
    /// What was wrong.
    pub message: String,
}

impl Fault {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Fault {
        Fault { code, message: message.into() }
    }

    pub(crate) fn bad_argument(message: impl Into<String>) -> Fault {
        Fault::new("badArgument", message)
    }

    /// `badVerb` and `badArgument` answers echo no arguments (§3.6): they may be what is wrong.
    pub(crate) fn echoes_arguments(&self) -> bool {
        !matches!(self.code, "badVerb" | "badArgument")
    }
}

/// A list request's selection, as a new list starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selection {
    pub(crate) prefix: String,
    pub(crate) set: Option<String>,
    /// Records stamped at or after this instant.
    pub(crate) from: Option<W3cDateTime>,
    /// Records stamped before this instant (`until` plus its granule: the whole day or second).
    pub(crate) until: Option<W3cDateTime>,
}

/// A list request: a new list, or the next page of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListStart {
    New(Selection),
    Resume(String),
}

/// A checked request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    Identify,
    ListMetadataFormats {
        identifier: Option<String>,
    },
    ListSets {
        token: Option<String>,
    },
    GetRecord {
        identifier: String,
        prefix: String,
    },
    /// ListRecords (`records`) or ListIdentifiers.
    List {
        records: bool,
        start: ListStart,
    },
}

/// More arguments than any verb takes (ListRecords: verb, metadataPrefix, from, until, set).
const MAX_ARGUMENTS: usize = 16;

/// Every argument name the protocol has; anything else is `badArgument`.
const NAMES: [&str; 7] = ["verb", "identifier", "metadataPrefix", "from", "until", "set", "resumptionToken"];

/// Checks the arguments of one request: the verb first (`badVerb` when it is missing, repeated
/// or unknown), then repeated, unknown, missing and malformed arguments (`badArgument`).
pub(crate) fn parse(pairs: &[(String, String)]) -> Result<Request, Fault> {
    if pairs.len() > MAX_ARGUMENTS {
        return Err(Fault::bad_argument(format!("more than {MAX_ARGUMENTS} arguments: some are repeated or unknown")));
    }
    let verbs: Vec<&str> = pairs.iter().filter(|(k, _)| k == "verb").map(|(_, v)| v.as_str()).collect();
    let verb = match verbs.as_slice() {
        [] => return Err(Fault::new("badVerb", "the verb argument is missing")),
        [v] => *v,
        _ => return Err(Fault::new("badVerb", "the verb argument is repeated")),
    };
    for (i, (k, _)) in pairs.iter().enumerate() {
        if !NAMES.contains(&k.as_str()) {
            return Err(Fault::bad_argument(format!("{k:?} is not an OAI-PMH argument")));
        }
        if pairs[..i].iter().any(|(earlier, _)| earlier == k) {
            return Err(Fault::bad_argument(format!("{k} is repeated")));
        }
    }
    let args = Args(pairs);
    match verb {
        "Identify" => args.only(&[]).map(|()| Request::Identify),
        "ListMetadataFormats" => {
            args.only(&["identifier"])?;
            Ok(Request::ListMetadataFormats { identifier: args.get("identifier").map(str::to_owned) })
        }
        "ListSets" => {
            args.only(&["resumptionToken"])?;
            Ok(Request::ListSets { token: args.get("resumptionToken").map(str::to_owned) })
        }
        "GetRecord" => {
            args.only(&["identifier", "metadataPrefix"])?;
            let identifier = args.required("identifier")?.to_owned();
            Ok(Request::GetRecord { identifier, prefix: prefix(args.required("metadataPrefix")?)? })
        }
        "ListRecords" => list(&args).map(|start| Request::List { records: true, start }),
        "ListIdentifiers" => list(&args).map(|start| Request::List { records: false, start }),
        other => Err(Fault::new("badVerb", format!("{other:?} is not an OAI-PMH verb"))),
    }
}

/// The arguments besides `verb`.
struct Args<'a>(&'a [(String, String)]);

impl Args<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn required(&self, name: &str) -> Result<&str, Fault> {
        self.get(name).ok_or_else(|| Fault::bad_argument(format!("{name} is required")))
    }

    /// `badArgument` for any argument not in `allowed`.
    fn only(&self, allowed: &[&str]) -> Result<(), Fault> {
        match self.0.iter().find(|(k, _)| k != "verb" && !allowed.contains(&k.as_str())) {
            Some((k, _)) => Err(Fault::bad_argument(format!("{k} is not an argument of this verb"))),
            None => Ok(()),
        }
    }
}

/// ListRecords' and ListIdentifiers' arguments: a resumption token alone (§3.5), or a
/// `metadataPrefix` with optional `from`, `until` and `set`.
fn list(args: &Args<'_>) -> Result<ListStart, Fault> {
    args.only(&["metadataPrefix", "from", "until", "set", "resumptionToken"])?;
    if let Some(token) = args.get("resumptionToken") {
        if args.0.len() > 2 {
            return Err(Fault::bad_argument("resumptionToken is an exclusive argument"));
        }
        return Ok(ListStart::Resume(token.to_owned()));
    }
    let prefix = prefix(args.required("metadataPrefix")?)?;
    let set = args.get("set").map(set_spec).transpose()?;
    let from = args.get("from").map(|v| datestamp(v, "from")).transpose()?;
    let until = args.get("until").map(|v| datestamp(v, "until")).transpose()?;
    if let (Some(f), Some(u)) = (&from, &until) {
        if f.1 != u.1 {
            return Err(Fault::bad_argument("from and until have different granularities"));
        }
        if f.0 > u.0 {
            return Err(Fault::bad_argument("from is later than until"));
        }
    }
    // An `until` at the end of time bounds nothing.
    let until = until.and_then(|(t, granule)| end_of(&t, granule));
    Ok(ListStart::New(Selection { prefix, set, from: from.map(|f| f.0), until }))
}

/// A datestamp's granule in seconds: a day or a second.
const DAY: i64 = 86_400;

/// `YYYY-MM-DD` or `YYYY-MM-DDThh:mm:ssZ`, exactly (§3.3.1); with its granule.
pub(crate) fn datestamp(v: &str, name: &str) -> Result<(W3cDateTime, i64), Fault> {
    let bad = || Fault::bad_argument(format!("{name}={v:?} is neither YYYY-MM-DD nor YYYY-MM-DDThh:mm:ssZ"));
    let shape_ok = |pattern: &[u8]| {
        v.len() == pattern.len()
            && v.bytes().zip(pattern).all(|(c, p)| if *p == b'9' { c.is_ascii_digit() } else { c == *p })
    };
    let granule = if shape_ok(b"9999-99-99") {
        DAY
    } else if shape_ok(b"9999-99-99T99:99:99Z") {
        1
    } else {
        return Err(bad());
    };
    let text = if granule == DAY { format!("{v}T00:00:00Z") } else { v.to_owned() };
    let t: W3cDateTime = text.parse().map_err(|_| bad())?;
    Ok((t, granule))
}

/// The instant just after `t`'s granule: `until` includes its whole day or second.
fn end_of(t: &W3cDateTime, granule: i64) -> Option<W3cDateTime> {
    W3cDateTime::from_unix(t.unix_timestamp() + granule, 0).ok()
}

/// `metadataPrefix`'s syntax (OAI-PMH.xsd `metadataPrefixType`).
fn prefix(v: &str) -> Result<String, Fault> {
    let ok = !v.is_empty() && v.len() <= 64 && v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.!~*'()".contains(c));
    if ok { Ok(v.to_owned()) } else { Err(Fault::bad_argument(format!("{v:?} is not a metadataPrefix"))) }
}

/// `setSpec`'s syntax (OAI-PMH.xsd `setSpecType`).
fn set_spec(v: &str) -> Result<String, Fault> {
    let part_ok = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.!~*'()".contains(c));
    if v.len() <= 256 && v.split(':').all(part_ok) {
        Ok(v.to_owned())
    } else {
        Err(Fault::bad_argument(format!("{v:?} is not a setSpec")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(q: &[(&str, &str)]) -> Result<Request, Fault> {
        let pairs: Vec<(String, String)> = q.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        parse(&pairs)
    }

    fn code(q: &[(&str, &str)]) -> &'static str {
        req(q).unwrap_err().code
    }

    #[test]
    fn verbs_and_arguments() {
        assert_eq!(req(&[("verb", "Identify")]).unwrap(), Request::Identify);
        assert_eq!(code(&[]), "badVerb");
        assert_eq!(code(&[("verb", "Identify"), ("verb", "Identify")]), "badVerb");
        assert_eq!(code(&[("verb", "Frobnicate")]), "badVerb");
        assert_eq!(code(&[("verb", "Identify"), ("set", "a")]), "badArgument");
        assert_eq!(code(&[("verb", "ListRecords")]), "badArgument");
        assert_eq!(code(&[("verb", "ListRecords"), ("metadataPrefix", "a"), ("metadataPrefix", "a")]), "badArgument");
        assert_eq!(code(&[("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("bogus", "1")]), "badArgument");
        assert_eq!(code(&[("verb", "ListRecords"), ("resumptionToken", "x"), ("metadataPrefix", "a")]), "badArgument");
        assert_eq!(code(&[("verb", "GetRecord"), ("identifier", "x")]), "badArgument");
        assert_eq!(code(&[("verb", "GetRecord"), ("identifier", "x"), ("metadataPrefix", "<x>")]), "badArgument");
        assert_eq!(code(&[("verb", "ListIdentifiers"), ("metadataPrefix", "oai_dc"), ("set", "a::b")]), "badArgument");
        let r = req(&[("verb", "ListIdentifiers"), ("resumptionToken", "abc")]).unwrap();
        assert_eq!(r, Request::List { records: false, start: ListStart::Resume("abc".into()) });
    }

    #[test]
    fn dates() {
        let list = |from: &str, until: &str| {
            req(&[("verb", "ListRecords"), ("metadataPrefix", "oai_dc"), ("from", from), ("until", until)])
        };
        let Request::List { start: ListStart::New(s), .. } = list("2026-01-01", "2026-01-02").unwrap() else {
            panic!()
        };
        assert_eq!(s.from.unwrap().to_string(), "2026-01-01T00:00:00Z");
        assert_eq!(s.until.unwrap().to_string(), "2026-01-03T00:00:00Z", "until includes its whole day");
        let Request::List { start: ListStart::New(s), .. } =
            list("2026-01-01T10:00:00Z", "2026-01-01T10:00:00Z").unwrap()
        else {
            panic!()
        };
        assert_eq!(s.until.unwrap().to_string(), "2026-01-01T10:00:01Z");
        assert_eq!(list("2026-01-01", "2026-01-02T00:00:00Z").unwrap_err().code, "badArgument", "mixed");
        assert_eq!(list("2026-01-03", "2026-01-02").unwrap_err().code, "badArgument", "from > until");
        assert_eq!(list("2026-1-03", "2026-01-02").unwrap_err().code, "badArgument");
        assert_eq!(list("2026-01-01T10:00:00.5Z", "2026-01-02").unwrap_err().code, "badArgument");
        assert_eq!(list("2026-02-30", "2026-03-02").unwrap_err().code, "badArgument");
    }
}
