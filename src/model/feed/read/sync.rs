//! The FeedSync attributes (`sx:sync`, `sx:history`, `sx:sharing`, `sx:related`) and their
//! rules (§2.1–§2.6). Every broken rule is an error naming the item and the section: these
//! values drive the merge, and a guessed `updates` or `when` would pick the wrong winner on
//! every endpoint that merges after us.

use std::io::BufRead;

use quick_xml::events::BytesStart;
use quick_xml::events::attributes::Attribute;

use super::{Core, FeedError};
use crate::model::W3cDateTime;
use crate::model::feed::{History, Related, RelatedKind, Sharing, Sync};

/// The largest `updates` and `sequence` (§2.4, §2.5): 2^31-1.
const MAX_COUNT: u32 = i32::MAX as u32;

/// The attributes of an `sx:sync`, checked.
pub(super) struct SyncHead {
    id: String,
    updates: u32,
    deleted: bool,
    noconflicts: bool,
}

impl SyncHead {
    /// Reads and checks the attributes of `sx:sync`; `label` names the item when the id is
    /// missing.
    pub(super) fn parse<R: BufRead>(core: &Core<'_, R>, e: &BytesStart<'_>, label: &str) -> Result<Self, FeedError> {
        let (mut id, mut updates, mut deleted, mut noconflicts) = (None, None, None, None);
        for attr in e.attributes() {
            let attr = attr.map_err(|err| core.malformed(err.to_string()))?;
            match attr.key.as_ref() {
                "id" => id = Some(value(core, &attr)?),
                "updates" => updates = Some(value(core, &attr)?),
                "deleted" => deleted = Some(value(core, &attr)?),
                "noconflicts" => noconflicts = Some(value(core, &attr)?),
                _ => {}
            }
        }
        let fail = |item: &str, rule: String| invalid(core, item, rule);
        let id = match id {
            Some(id) if !id.is_empty() => id,
            Some(_) => return Err(fail(label, "sx:sync has an empty id (§2.4, §2.1.2)".into())),
            None => return Err(fail(label, "sx:sync has no id; §2.4 requires one".into())),
        };
        let Some(updates) = updates else {
            return Err(fail(&id, "sx:sync has no updates attribute; §2.4 requires one".into()));
        };
        let updates =
            count(&updates).map_err(|why| fail(&id, format!("sx:sync updates=\"{updates}\" {why} (§2.4)")))?;
        let deleted = boolean(deleted.as_deref()).map_err(|v| fail(&id, bool_rule("deleted", v)))?;
        let noconflicts = boolean(noconflicts.as_deref()).map_err(|v| fail(&id, bool_rule("noconflicts", v)))?;
        Ok(SyncHead { id, updates, deleted, noconflicts })
    }

    pub(super) fn into_sync(self) -> Sync {
        Sync {
            id: self.id,
            updates: self.updates,
            deleted: self.deleted,
            noconflicts: self.noconflicts,
            history: Vec::new(),
            conflicts: Vec::new(),
        }
    }
}

/// Reads and checks an `sx:history` of the item with sync id `id`.
pub(super) fn history<R: BufRead>(core: &Core<'_, R>, e: &BytesStart<'_>, id: &str) -> Result<History, FeedError> {
    let (mut sequence, mut when, mut by) = (None, None, None);
    for attr in e.attributes() {
        let attr = attr.map_err(|err| core.malformed(err.to_string()))?;
        match attr.key.as_ref() {
            "sequence" => sequence = Some(value(core, &attr)?),
            "when" => when = Some(value(core, &attr)?),
            "by" => by = Some(value(core, &attr)?),
            _ => {}
        }
    }
    let Some(sequence) = sequence else {
        return Err(invalid(core, id, "sx:history has no sequence; §2.5 requires one".into()));
    };
    let sequence = count(&sequence)
        .map_err(|why| invalid(core, id, format!("sx:history sequence=\"{sequence}\" {why} (§2.5)")))?;
    let when = match when {
        Some(w) => Some(utc_second(&w).map_err(|why| invalid(core, id, format!("sx:history when=\"{w}\" {why}")))?),
        None => None,
    };
    if by.as_deref() == Some("") {
        return Err(invalid(core, id, "sx:history has an empty by (§2.1.2)".into()));
    }
    if when.is_none() && by.is_none() {
        return Err(invalid(core, id, "sx:history has neither when nor by; §2.5 requires one of them".into()));
    }
    Ok(History { sequence, when, by })
}

/// Reads and checks the attributes of `sx:sharing` (starting at byte `start`).
pub(super) fn sharing_attrs<R: BufRead>(
    core: &Core<'_, R>,
    e: &BytesStart<'_>,
    start: u64,
) -> Result<Sharing, FeedError> {
    let mut sharing = Sharing::default();
    let fail = |rule: String| FeedError::InvalidSharing { document: core.doc(), position: core.position(start), rule };
    for attr in e.attributes() {
        let attr = attr.map_err(|err| core.malformed(err.to_string()))?;
        match attr.key.as_ref() {
            "since" => sharing.since = Some(value(core, &attr)?),
            "until" => sharing.until = Some(value(core, &attr)?),
            "expires" => {
                let v = value(core, &attr)?;
                sharing.expires = Some(utc_second(&v).map_err(|why| fail(format!("expires=\"{v}\" {why}")))?);
            }
            _ => {}
        }
    }
    match (&sharing.since, &sharing.until) {
        (Some(_), None) => return Err(fail("since without until; §2.2 wants both or neither".into())),
        (None, Some(_)) => return Err(fail("until without since; §2.2 wants both or neither".into())),
        (Some(s), Some(u)) if s.is_empty() || u.is_empty() => {
            return Err(fail("since or until is empty (§2.1.2)".into()));
        }
        _ => {}
    }
    Ok(sharing)
}

/// Reads and checks an `sx:related`.
pub(super) fn related<R: BufRead>(core: &Core<'_, R>, e: &BytesStart<'_>) -> Result<Related, FeedError> {
    let (mut link, mut title, mut kind) = (None, None, None);
    for attr in e.attributes() {
        let attr = attr.map_err(|err| core.malformed(err.to_string()))?;
        match attr.key.as_ref() {
            "link" => link = Some(value(core, &attr)?),
            "title" => title = Some(value(core, &attr)?),
            "type" => kind = Some(value(core, &attr)?),
            _ => {}
        }
    }
    let fail = |rule: String| FeedError::InvalidSharing { document: core.doc(), position: core.here(), rule };
    let link = match link {
        Some(l) if !l.trim().is_empty() => l.trim().to_owned(),
        _ => return Err(fail("sx:related has no link; §2.3 requires one".into())),
    };
    let kind = match kind.as_deref() {
        Some("complete") => RelatedKind::Complete,
        Some("aggregated") => RelatedKind::Aggregated,
        Some(other) => {
            return Err(fail(format!("sx:related type=\"{other}\" is neither complete nor aggregated (§2.3)")));
        }
        None => return Err(fail("sx:related has no type; §2.3 requires complete or aggregated".into())),
    };
    Ok(Related { link, title, kind })
}

fn value<R: BufRead>(core: &Core<'_, R>, attr: &Attribute<'_>) -> Result<String, FeedError> {
    core.attr_value(attr)
}

fn invalid<R: BufRead>(core: &Core<'_, R>, item: &str, rule: String) -> FeedError {
    FeedError::InvalidSync { document: core.doc(), item: item.to_owned(), position: core.here(), rule }
}

fn bool_rule(name: &str, v: String) -> String {
    format!("sx:sync {name}=\"{v}\" is invalid: only \"true\" or \"false\" (lower-case) are allowed (§2.4)")
}

/// `"true"`/`"false"`/absent; anything else is returned as the error.
fn boolean(v: Option<&str>) -> Result<bool, String> {
    match v {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(other.to_owned()),
    }
}

/// An `updates` or `sequence`: digits only, 1 ..= 2^31-1.
fn count(v: &str) -> Result<u32, &'static str> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err("is not an integer");
    }
    match v.parse::<u64>() {
        Ok(n) if (1..=u64::from(MAX_COUNT)).contains(&n) => Ok(n as u32),
        _ => Err("is outside 1..=2147483647"),
    }
}

/// A FeedSync date-time (§2.1.5): RFC 3339 in whole seconds, in UTC, ending in `Z`.
pub(super) fn utc_second(v: &str) -> Result<W3cDateTime, String> {
    let rule = "(§2.1.5 wants whole-second UTC like 2005-05-21T11:43:33Z)";
    let b = v.as_bytes();
    if b.len() > 19 && b[19] == b'.' {
        return Err(format!("has fractional seconds {rule}"));
    }
    if b.len() == 25 && matches!(b[19], b'+' | b'-') {
        return Err(format!("has a zone offset instead of Z {rule}"));
    }
    let shaped = b.len() == 20
        && b[19] == b'Z'
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => true,
            _ => c.is_ascii_digit(),
        });
    if !shaped {
        return Err(format!("is not a date-time {rule}"));
    }
    v.parse::<W3cDateTime>().map_err(|e| format!("is not a valid date-time: {e}"))
}
