//! The spec's rules for each document type, applied as a stream: the header once, then each
//! entry as it is read, then a closing pass.
//!
//! Severity follows one principle: an **error** is a broken MUST that makes the document or the
//! entry unusable for synchronization (no capability, a change without a `change` type, a
//! manifest entry without a `path`, a Change List out of chronological order, an interval that
//! ends before it starts). Everything else — a missing `up` link, a missing `at`, a relative URI
//! — is a **warning** with the reading Tributary applies. Warnings that would repeat for every
//! entry are reported once with a count.

use std::collections::HashMap;

use super::datetime::W3cDateTime;
use super::diagnostic::Diagnostic;
use super::position::Position;
use super::types::{Capability, Change, Document, DocumentKind, Entry, Header, Md, RootFormat};

/// A warning that is counted rather than repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Repeated {
    NoDatetime,
    NoIndexFrom,
    RelativeLoc,
    OutsideInterval,
}

/// Streaming validator. See the module docs.
#[derive(Debug)]
pub struct Validator {
    kind: Option<DocumentKind>,
    format: RootFormat,
    from: Option<W3cDateTime>,
    until: Option<W3cDateTime>,
    diagnostics: Vec<Diagnostic>,
    last_time: Option<W3cDateTime>,
    capabilities: HashMap<Capability, Position>,
    open_lists: Vec<Position>,
    repeated: HashMap<Repeated, (Position, usize)>,
    entries: usize,
}

impl Validator {
    /// Checks the header (found at `root` in the document) and prepares for entries.
    pub fn new(header: &Header, root: Position) -> Self {
        let md = header.md.as_ref();
        let mut v = Validator {
            kind: header.kind(),
            format: header.format.unwrap_or(RootFormat::UrlSet),
            from: md.and_then(|m| m.from),
            until: md.and_then(|m| m.until),
            diagnostics: Vec::new(),
            last_time: None,
            capabilities: HashMap::new(),
            open_lists: Vec::new(),
            repeated: HashMap::new(),
            entries: 0,
        };
        v.check_header(header, root);
        v
    }

    /// The document kind, when the header names a valid one.
    pub fn kind(&self) -> Option<DocumentKind> {
        self.kind
    }

    /// Checks one entry found at `pos`.
    pub fn entry(&mut self, entry: &Entry, pos: Position) {
        self.entries += 1;
        self.check_loc(entry, pos);
        let Some(kind) = self.kind else { return };
        match kind {
            DocumentKind::SourceDescription => self.source_description_entry(entry, pos),
            DocumentKind::CapabilityList => self.capability_list_entry(entry, pos),
            DocumentKind::ResourceDumpManifest => self.manifest_entry(entry, pos, false),
            DocumentKind::ChangeDumpManifest => self.manifest_entry(entry, pos, true),
            DocumentKind::ChangeList => self.change_entry(entry, pos, "12.1"),
            DocumentKind::ChangeListIndex => self.change_index_entry(entry, pos, "12.2"),
            DocumentKind::ChangeDump | DocumentKind::ChangeDumpIndex => self.change_index_entry(entry, pos, "13.1"),
            DocumentKind::ChangeNotification => self.change_entry(entry, pos, CHANGE_NOTIFICATION),
            DocumentKind::FrameworkNotification => self.framework_notification_entry(entry, pos),
            _ => {}
        }
    }

    /// Closing checks; returns every finding.
    pub fn finish(mut self) -> Vec<Diagnostic> {
        if self.open_lists.len() > 1 {
            let pos = self.open_lists[1];
            self.warn(
                pos,
                "12.2",
                format!("{} open lists (without `until`); an index has at most one", self.open_lists.len()),
            );
        }
        let mut repeated: Vec<_> = self.repeated.drain().collect();
        repeated.sort_by_key(|(_, (pos, _))| *pos);
        for (what, (pos, count)) in repeated {
            let (section, msg) = match what {
                Repeated::NoDatetime => {
                    ("12.1", "without `datetime`; their order in the list is taken as the order of changes")
                }
                Repeated::NoIndexFrom => ("Appendix A", "without the recommended `from` attribute"),
                Repeated::RelativeLoc => ("7", "with a relative <loc>; resolved against the document's URL"),
                Repeated::OutsideInterval => ("7", "whose `datetime` lies outside the document's `from`/`until`"),
            };
            self.warn(pos, section, format!("{count} entr{} {msg}", if count == 1 { "y" } else { "ies" }));
        }
        self.diagnostics
    }

    fn error(&mut self, pos: Position, section: &'static str, msg: impl Into<String>) {
        self.diagnostics.push(Diagnostic::error(pos, section, msg));
    }

    fn warn(&mut self, pos: Position, section: &'static str, msg: impl Into<String>) {
        self.diagnostics.push(Diagnostic::warning(pos, section, msg));
    }

    fn count(&mut self, what: Repeated, pos: Position) {
        self.repeated.entry(what).or_insert((pos, 0)).1 += 1;
    }

    fn check_header(&mut self, header: &Header, root: Position) {
        let Some(md) = header.md.as_ref() else {
            self.error(root, "7", "the root has no <rs:md>; every ResourceSync document needs one with a `capability`");
            return;
        };
        let Some(capability) = md.capability else {
            self.error(root, "7", "the root <rs:md> has no valid `capability`; the kind of document is unknown");
            return;
        };
        let Some(kind) = self.kind else {
            let root_name = self.format.root_name();
            self.error(root, "7", format!("capability `{capability}` cannot be used on <{root_name}>"));
            return;
        };
        if capability.is_archive() {
            self.warn(root, "7", format!("capability `{capability}` is defined by ResourceSync Archives, not Z39.99"));
        }
        self.check_times(kind, md, root);
        self.check_up_link(kind, header, root);
    }

    fn check_times(&mut self, kind: DocumentKind, md: &Md, root: Position) {
        let section = section_of(kind);
        if kind.is_snapshot_kind() {
            if md.at.is_none() {
                self.warn(
                    root,
                    "Appendix A",
                    format!("{kind} has no `at` attribute on its root <rs:md> (mandatory, {section})"),
                );
            }
            if md.from.is_some() || md.until.is_some() {
                self.warn(root, "7", format!("`from`/`until` are not used in a {kind}; ignored"));
            }
            if let (Some(at), Some(completed)) = (md.at, md.completed)
                && completed < at
            {
                self.warn(root, "7", format!("`completed` {completed} is before `at` {at}"));
            }
        }
        if kind.is_change_kind() {
            // A framework notification's interval is optional ([F] §3); a change notification's
            // `until` is as mandatory as its `from` ([N] §3): gaps are found by both.
            if md.from.is_none() && kind != DocumentKind::FrameworkNotification {
                self.warn(
                    root,
                    "Appendix A",
                    format!("{kind} has no `from` attribute on its root <rs:md> (mandatory, {section})"),
                );
            }
            if md.until.is_none() && kind == DocumentKind::ChangeNotification {
                self.warn(root, section, format!("{kind} has no `until` attribute on its root <rs:md> (mandatory)"));
            }
            if md.at.is_some() || md.completed.is_some() {
                self.warn(root, "7", format!("`at`/`completed` are not used in a {kind}; ignored"));
            }
            if let (Some(from), Some(until)) = (md.from, md.until)
                && until < from
            {
                self.error(root, "7", format!("`until` {until} is before `from` {from}: the interval is empty"));
            }
        }
    }

    fn check_up_link(&mut self, kind: DocumentKind, header: &Header, root: Position) {
        // A notification's `up` link is optional ([N] §3, [F] §3).
        let needs_up = !matches!(
            kind,
            DocumentKind::SourceDescription
                | DocumentKind::SourceDescriptionIndex
                | DocumentKind::Archive
                | DocumentKind::ChangeNotification
                | DocumentKind::FrameworkNotification
        );
        let ups = header.links.iter().filter(|l| l.rel == "up").count();
        if needs_up && ups == 0 {
            let target = if kind == DocumentKind::CapabilityList { "Source Description" } else { "Capability List" };
            self.warn(root, section_of(kind), format!("{kind} has no <rs:ln rel=\"up\"> to its {target} (mandatory)"));
        }
        if ups > 1 {
            self.warn(root, section_of(kind), "more than one root <rs:ln rel=\"up\">; the first is used");
        }
    }

    fn check_loc(&mut self, entry: &Entry, pos: Position) {
        if entry.loc.is_empty() {
            return; // reported by the reader, which knows whether it was missing or empty
        }
        if looks_like_plain_http_uri(&entry.loc) {
            return;
        }
        match url::Url::parse(&entry.loc) {
            Ok(_) => {}
            Err(url::ParseError::RelativeUrlWithoutBase) => self.count(Repeated::RelativeLoc, pos),
            Err(e) => self.error(pos, "7", format!("<loc> `{}` is not a valid URI: {e}", entry.loc)),
        }
    }

    fn source_description_entry(&mut self, entry: &Entry, pos: Position) {
        if let Some(c) = entry.md.as_ref().and_then(|m| m.capability)
            && c != Capability::CapabilityList
        {
            let msg = format!("a Source Description lists Capability Lists, but this entry has capability `{c}`");
            self.error(pos, "8", msg);
        }
    }

    fn capability_list_entry(&mut self, entry: &Entry, pos: Position) {
        let Some(c) = entry.md.as_ref().and_then(|m| m.capability) else {
            self.error(pos, "9", format!("Capability List entry {} has no <rs:md capability=…>", entry.loc));
            return;
        };
        let allowed = matches!(
            c,
            Capability::ResourceList
                | Capability::ChangeList
                | Capability::ResourceDump
                | Capability::ChangeDump
                // notification channels, ResourceSync Change Notification 1.0.1 §5
                | Capability::ChangeNotification
                | Capability::FrameworkNotification
        ) || c.is_archive();
        if !allowed {
            self.error(pos, "9", format!("capability `{c}` cannot be listed in a Capability List"));
        }
        if let Some(first) = self.capabilities.insert(c, pos) {
            self.error(
                pos,
                "9",
                format!("capability `{c}` listed twice (first at {first}); only one entry per capability"),
            );
        }
    }

    fn manifest_entry(&mut self, entry: &Entry, pos: Position, changes: bool) {
        let section = if changes { "13.2" } else { "11.2" };
        let Some(md) = entry.md.as_ref() else {
            self.error(pos, section, format!("manifest entry {} has no <rs:md>", entry.loc));
            return;
        };
        if changes {
            self.change_entry(entry, pos, section);
        }
        let deleted = md.change == Some(Change::Deleted);
        match md.path.as_deref() {
            None if !deleted => {
                self.error(pos, section, format!("manifest entry {} has no `path` to its bitstream", entry.loc))
            }
            Some(p) if !p.starts_with('/') => {
                self.warn(pos, section, format!("`path` {p} should start with `/` (relative to the package root)"));
            }
            _ => {}
        }
    }

    fn change_entry(&mut self, entry: &Entry, pos: Position, section: &'static str) {
        let Some(md) = entry.md.as_ref() else {
            self.error(pos, section, format!("change entry {} has no <rs:md change=…>", entry.loc));
            return;
        };
        if md.change.is_none() {
            self.error(pos, section, format!("change entry {} has no valid `change` attribute", entry.loc));
        }
        let Some(t) = md.datetime else {
            self.count(Repeated::NoDatetime, pos);
            return;
        };
        let before = self.from.is_some_and(|from| t < from);
        let after = self.until.is_some_and(|until| t > until);
        if before || after {
            self.count(Repeated::OutsideInterval, pos);
        }
        self.check_order(t, pos, section, "datetime");
    }

    /// [F] §3: each entry names the framework document that changed — by its capability, one
    /// of the documents a Source Description or Capability List may list — and how.
    fn framework_notification_entry(&mut self, entry: &Entry, pos: Position) {
        let md = entry.md.as_ref();
        if md.and_then(|m| m.change).is_none() {
            self.error(pos, FRAMEWORK_NOTIFICATION, format!("entry {} has no valid <rs:md change=…>", entry.loc));
        }
        match md.and_then(|m| m.capability) {
            None => self.error(pos, FRAMEWORK_NOTIFICATION, format!("entry {} has no <rs:md capability=…>", entry.loc)),
            Some(c) if !FRAMEWORK_DOCUMENTS.contains(&c) => {
                let msg = format!("capability `{c}` is not a framework document a notification can announce");
                self.error(pos, FRAMEWORK_NOTIFICATION, msg);
            }
            Some(_) => {}
        }
    }

    fn change_index_entry(&mut self, entry: &Entry, pos: Position, section: &'static str) {
        let md = entry.md.as_ref();
        let Some(from) = md.and_then(|m| m.from) else {
            self.count(Repeated::NoIndexFrom, pos);
            return;
        };
        if md.and_then(|m| m.until).is_none() {
            self.open_lists.push(pos);
        } else if let Some(&open) = self.open_lists.last() {
            self.warn(open, section, "an open list (without `until`) is followed by later lists");
        }
        self.check_order(from, pos, section, "from");
    }

    fn check_order(&mut self, t: W3cDateTime, pos: Position, section: &'static str, attr: &str) {
        if let Some(prev) = self.last_time
            && t < prev
        {
            let msg = format!("entries are not in forward chronological order: `{attr}` {t} comes after {prev}");
            self.error(pos, section, msg);
            return;
        }
        self.last_time = Some(t);
    }
}

/// The common case, checked without a full URL parse: `http(s)://host…` with only characters
/// that need no escaping. Anything else goes through `url::Url::parse`.
fn looks_like_plain_http_uri(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("https://").or_else(|| s.strip_prefix("http://")) else { return false };
    let b = rest.as_bytes();
    // The host: letters, digits, `.`, `-` and a port's `:`, up to `/`, `?`, `#` or the end.
    // Anything unusual (percent-encoded hosts, IPv6 literals, userinfo) takes the full parse.
    let host_len = b.iter().position(|&c| !(c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b':')));
    let host_len = host_len.unwrap_or(b.len());
    if host_len == 0 || (host_len < b.len() && !matches!(b[host_len], b'/' | b'?' | b'#')) {
        return false;
    }
    // Table-driven and branch-free over the rest: printable ASCII other than the characters a
    // URI never holds unescaped.
    b[host_len..].iter().fold(true, |ok, &c| ok & URI_PLAIN[usize::from(c)])
}

/// Bytes allowed unescaped in the plain-URI fast path (see [`looks_like_plain_http_uri`]).
const URI_PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = b'!';
    while b < 0x7f {
        t[b as usize] = !matches!(b, b'<' | b'>' | b'"' | b'{' | b'}' | b'|' | b'\\' | b'^' | b'`');
        b += 1;
    }
    t
};

/// Sections of the two notification specifications (ResourceSync Change Notification 1.0.1 and
/// Framework Notification 1.0.1), named so a finding is not mistaken for one of Z39.99's.
const CHANGE_NOTIFICATION: &str = "Change Notification §3";
const FRAMEWORK_NOTIFICATION: &str = "Framework Notification §3";

/// What a framework notification may announce ([F] §3).
const FRAMEWORK_DOCUMENTS: [Capability; 6] = [
    Capability::Description,
    Capability::CapabilityList,
    Capability::ResourceList,
    Capability::ChangeList,
    Capability::ResourceDump,
    Capability::ChangeDump,
];

fn section_of(kind: DocumentKind) -> &'static str {
    match kind {
        DocumentKind::SourceDescription | DocumentKind::SourceDescriptionIndex => "8",
        DocumentKind::CapabilityList | DocumentKind::CapabilityListIndex => "9",
        DocumentKind::ResourceList => "10.1",
        DocumentKind::ResourceListIndex => "10.2",
        DocumentKind::ResourceDump | DocumentKind::ResourceDumpIndex => "11.1",
        DocumentKind::ResourceDumpManifest => "11.2",
        DocumentKind::ChangeList => "12.1",
        DocumentKind::ChangeListIndex => "12.2",
        DocumentKind::ChangeDump | DocumentKind::ChangeDumpIndex => "13.1",
        DocumentKind::ChangeDumpManifest => "13.2",
        DocumentKind::Archive => "7",
        DocumentKind::ChangeNotification => CHANGE_NOTIFICATION,
        DocumentKind::FrameworkNotification => FRAMEWORK_NOTIFICATION,
    }
}

/// Validates an in-memory document (positions are unknown and reported as 0:0).
pub fn validate(doc: &Document) -> Vec<Diagnostic> {
    let mut v = Validator::new(&doc.header, Position::default());
    for e in &doc.entries {
        v.entry(e, Position::default());
    }
    v.finish()
}
