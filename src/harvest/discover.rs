//! Discovery and navigation (spec §6): from whatever URL a source gives to its Capability
//! List and the capabilities it offers.
//!
//! The given URL is fetched first. A ResourceSync document is used as it is: a Source
//! Description leads down to its Capability List (the configured one, or the only one); a
//! Resource List, Change List, dump or index leads up through its `up` link (or its `index`
//! link first). Anything else — a site root, an HTML page, a 404 — is a starting point for the
//! four discovery routes, tried in order of specificity: the response's
//! `Link: <…>; rel="resourcesync"` header, an HTML `<link rel="resourcesync">`, the well-known
//! URI `/.well-known/resourcesync`, and robots.txt `Sitemap:` lines. Relative references are
//! resolved against the URL of the document that carries them (after redirects).
//!
//! Walking an index down to its entries is [`IndexWalker`](super::IndexWalker)'s job.

use url::Url;

use super::document::{DiscoverError, FetchedDoc, Result, entries, fetch_doc, wrong_kind};
use crate::config::Settings;
use crate::fetch::{Document, FetchError, Fetcher};
use crate::model::discovery::{html_link_targets, link_header_targets};
use crate::model::{Capability, DocumentKind, Header};

/// `up`/`index` hops followed from a list to its Capability List.
const MAX_UP_HOPS: usize = 4;

/// The capability documents a Capability List points to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Resource List (or Resource List Index).
    pub resourcelist: Option<Url>,
    /// Change List (or Change List Index).
    pub changelist: Option<Url>,
    /// Resource Dump.
    pub resourcedump: Option<Url>,
    /// Change Dump.
    pub changedump: Option<Url>,
    /// The change-notification channel: its topic and hub (Change Notification §5).
    pub change_notification: Option<Channel>,
}

/// A notification channel: a WebSub topic and the hub that publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    /// The topic URI (the channel entry's `<loc>`).
    pub topic: Url,
    /// The hub (the entry's `rs:ln rel="hub"`).
    pub hub: Url,
}

/// How the Capability List (or the list the source gave) was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The configured URL was itself a ResourceSync document.
    Direct,
    /// An HTTP `Link: <…>; rel="resourcesync"` header on the configured URL.
    LinkHeader,
    /// An HTML `<link rel="resourcesync">` in the configured page.
    HtmlLink,
    /// The well-known URI `/.well-known/resourcesync`.
    WellKnown,
    /// A robots.txt `Sitemap:` line.
    RobotsSitemap,
}

/// What discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The Source Description, when known (reached, or named by the Capability List's `up`).
    pub source_description: Option<Url>,
    /// The Capability List. `None` only when the source gave a list without an `up` link, so
    /// no Capability List can be found; `capabilities` then holds that list alone.
    pub capability_list: Option<Url>,
    /// What the Capability List offers (plus the list the source gave, if it was missing).
    pub capabilities: Capabilities,
    /// How it was found.
    pub route: Route,
    /// Where the URL discovery started from has moved, when it answered a permanent redirect
    /// (301, 308): the URL it led to.
    pub moved: Option<Url>,
}

/// Discovers the Capability List and capabilities from `url` (see the module docs);
/// `select` picks among several Capability Lists of a Source Description.
///
/// # Errors
/// Fetch and read failures, [`DiscoverError::NotFound`] when no route leads anywhere,
/// [`DiscoverError::Ambiguous`]/[`DiscoverError::NotListed`] for the selection.
pub async fn discover(f: &Fetcher, url: &Url, select: Option<&Url>, s: &Settings) -> Result<Discovered> {
    discover_keeping(f, url, select, s).await.map(|(found, _)| found)
}

/// [`discover`], also handing back the list document it was given and fetched, when it found
/// one (a Resource List configured, or named by robots.txt): a harvest that is to walk that
/// same list starts from it instead of fetching it a second time.
pub(crate) async fn discover_keeping(
    f: &Fetcher,
    url: &Url,
    select: Option<&Url>,
    s: &Settings,
) -> Result<(Discovered, Option<FetchedDoc>)> {
    let mut candidates: Vec<(Url, Route)> = Vec::new();
    let mut tried = Vec::new();
    let mut moved = None;
    match fetch_doc(f, url, s).await {
        Ok(d) if d.header.is_some() => {
            let moved = d.doc.moved.clone();
            let (found, given) = from_document(f, d, select, s, Route::Direct).await?;
            return Ok((Discovered { moved, ..found }, given));
        }
        Ok(d) => {
            tried.push(format!("{url} (not a ResourceSync document)"));
            candidates.extend(page_links(&d.doc));
            moved = d.doc.moved;
        }
        Err(DiscoverError::Fetch(FetchError::Status { status, .. })) if (400..500).contains(&status) => {
            tried.push(format!("{url} (HTTP {status})"));
        }
        // Without credentials a refusal may be of the page only; with them, they are wrong.
        Err(DiscoverError::Fetch(FetchError::Denied { status, credentials: false, .. })) => {
            tried.push(format!("{url} (HTTP {status})"));
        }
        Err(e) => return Err(e),
    }
    if let Ok(wk) = url.join("/.well-known/resourcesync") {
        candidates.push((wk, Route::WellKnown));
    }
    match f.robots_sitemaps(url, s).await {
        Ok(maps) => candidates.extend(maps.into_iter().map(|u| (u, Route::RobotsSitemap))),
        Err(e) => tried.push(format!("robots.txt ({e})")),
    }
    for (cand, route) in candidates {
        if cand == *url || tried.iter().any(|t| t.starts_with(&format!("{cand} "))) {
            continue;
        }
        match fetch_doc(f, &cand, s).await {
            Ok(d) if d.header.is_some() => {
                let (found, given) = from_document(f, d, select, s, route).await?;
                return Ok((Discovered { moved, ..found }, given));
            }
            Ok(_) => tried.push(format!("{cand} (not a ResourceSync document)")),
            Err(e) => tried.push(format!("{cand} ({e})")),
        }
    }
    Err(DiscoverError::NotFound { url: url.to_string(), tried })
}

/// `rel="resourcesync"` targets of a non-ResourceSync response: its Link header, then (for
/// HTML) its `<link>` elements, resolved against the response URL.
fn page_links(doc: &Document) -> Vec<(Url, Route)> {
    let mut out = Vec::new();
    for value in doc.headers.get_all(reqwest::header::LINK).iter().filter_map(|v| v.to_str().ok()) {
        for t in link_header_targets(value, "resourcesync") {
            out.extend(doc.url.join(&t).ok().map(|u| (u, Route::LinkHeader)));
        }
    }
    let looks_html = doc.content_type.as_deref().is_some_and(|c| c.contains("html"))
        || doc.body.iter().take(1024).any(|&b| b == b'<');
    if looks_html {
        let text = String::from_utf8_lossy(&doc.body);
        for t in html_link_targets(&text, "resourcesync") {
            out.extend(doc.url.join(&t).ok().map(|u| (u, Route::HtmlLink)));
        }
    }
    out
}

async fn from_document(
    f: &Fetcher,
    d: FetchedDoc,
    select: Option<&Url>,
    s: &Settings,
    route: Route,
) -> Result<(Discovered, Option<FetchedDoc>)> {
    let kind = d.header.as_ref().and_then(Header::kind).ok_or_else(|| wrong_kind(&d, "a ResourceSync document"))?;
    match kind {
        DocumentKind::SourceDescription => {
            let cl_url = choose_capability_list(&d, select, s)?;
            let cl = fetch_doc(f, &cl_url, s).await?;
            let mut found = from_capability_list(&cl, s)?;
            found.source_description = Some(d.doc.url.clone());
            Ok((Discovered { route, ..found }, None))
        }
        DocumentKind::CapabilityList => Ok((Discovered { route, ..from_capability_list(&d, s)? }, None)),
        k if list_capability(k).is_some() => from_list(f, d, k, s, route).await,
        _ => Err(wrong_kind(&d, "a Source Description, Capability List, list, dump or index")),
    }
}

/// The Capability List to use from a Source Description.
fn choose_capability_list(d: &FetchedDoc, select: Option<&Url>, s: &Settings) -> Result<Url> {
    let choices: Vec<Url> = entries(d, s)?
        .iter()
        .filter(|e| e.md.as_ref().and_then(|m| m.capability).is_none_or(|c| c == Capability::CapabilityList))
        .filter_map(|e| d.doc.url.join(&e.loc).ok())
        .collect();
    let names = || choices.iter().map(Url::to_string).collect::<Vec<_>>();
    match (select, choices.as_slice()) {
        (Some(want), _) if choices.contains(want) => Ok(want.clone()),
        (Some(want), _) => {
            Err(DiscoverError::NotListed { url: d.doc.url.to_string(), wanted: want.to_string(), choices: names() })
        }
        (None, [only]) => Ok(only.clone()),
        (None, _) => Err(DiscoverError::Ambiguous { url: d.doc.url.to_string(), choices: names() }),
    }
}

fn from_capability_list(d: &FetchedDoc, s: &Settings) -> Result<Discovered> {
    if d.header.as_ref().and_then(Header::kind) != Some(DocumentKind::CapabilityList) {
        return Err(wrong_kind(d, "a Capability List"));
    }
    let mut caps = Capabilities::default();
    for e in entries(d, s)? {
        let Some(cap) = e.md.as_ref().and_then(|m| m.capability) else { continue };
        if cap == Capability::ChangeNotification {
            caps.change_notification = caps.change_notification.take().or_else(|| channel(&d.doc.url, &e));
            continue;
        }
        let Some(slot) = slot(&mut caps, cap) else { continue };
        if slot.is_none() {
            *slot = d.doc.url.join(&e.loc).ok();
        }
    }
    let up = d.header.as_ref().and_then(|h| h.link("up")).and_then(|l| d.doc.url.join(&l.href).ok());
    Ok(Discovered {
        source_description: up,
        capability_list: Some(d.doc.url.clone()),
        capabilities: caps,
        route: Route::Direct,
        moved: None,
    })
}

/// A change-notification entry's topic and hub; `None` (with a warning) without a usable hub.
fn channel(base: &Url, e: &crate::model::Entry) -> Option<Channel> {
    let topic = base.join(e.loc.trim()).ok()?;
    let hub = e.links.iter().find(|l| l.rel == "hub").and_then(|l| base.join(l.href.trim()).ok());
    match hub.filter(|h| matches!(h.scheme(), "http" | "https")) {
        Some(hub) => Some(Channel { topic, hub }),
        None => {
            tracing::warn!(topic = %topic, "a change-notification channel without an http(s) rs:ln rel=\"hub\" is ignored");
            None
        }
    }
}

/// From a list, dump or index up to its Capability List (via `index` first, then `up`).
async fn from_list(
    f: &Fetcher,
    given: FetchedDoc,
    kind: DocumentKind,
    s: &Settings,
    route: Route,
) -> Result<(Discovered, Option<FetchedDoc>)> {
    let given_url = given.doc.url.clone();
    let mut up: Option<FetchedDoc> = None;
    for _ in 0..MAX_UP_HOPS {
        let current = up.as_ref().unwrap_or(&given);
        let header = current.header.as_ref();
        let next = header.and_then(|h| h.link("index").or_else(|| h.link("up")));
        let Some(next) = next.and_then(|l| current.doc.url.join(&l.href).ok()) else { break };
        let current = up.insert(fetch_doc(f, &next, s).await?);
        if current.header.as_ref().and_then(Header::kind) == Some(DocumentKind::CapabilityList) {
            let mut found = from_capability_list(current, s)?;
            // The Capability List is the Source's own statement of what it offers, so its list
            // wins: a part of an index, or a stale copy, would make a baseline that deletes
            // everything it does not list. Say so, since the operator named another URL.
            if let Some(used) = fill_if_missing(&mut found.capabilities, kind, &given_url).filter(|u| **u != given_url)
            {
                tracing::info!(given = %given_url, %used, "the Capability List names another {kind}; following it");
            }
            return Ok((Discovered { route, ..found }, Some(given)));
        }
    }
    tracing::warn!(url = %given_url, "list has no up link to a Capability List; using it alone");
    let mut capabilities = Capabilities::default();
    fill_if_missing(&mut capabilities, kind, &given_url);
    Ok((Discovered { source_description: None, capability_list: None, capabilities, route, moved: None }, Some(given)))
}

/// Puts `url` in the slot of the capability a `kind` document provides, unless that slot is
/// taken; answers what the slot holds afterwards.
fn fill_if_missing<'a>(caps: &'a mut Capabilities, kind: DocumentKind, url: &Url) -> Option<&'a Url> {
    list_capability(kind).and_then(|c| slot(caps, c)).map(|slot| &*slot.get_or_insert_with(|| url.clone()))
}

/// The capability a list, dump or index document provides.
fn list_capability(kind: DocumentKind) -> Option<Capability> {
    use DocumentKind as K;
    Some(match kind {
        K::ResourceList | K::ResourceListIndex => Capability::ResourceList,
        K::ChangeList | K::ChangeListIndex => Capability::ChangeList,
        K::ResourceDump | K::ResourceDumpIndex => Capability::ResourceDump,
        K::ChangeDump | K::ChangeDumpIndex => Capability::ChangeDump,
        _ => return None,
    })
}

fn slot(caps: &mut Capabilities, cap: Capability) -> Option<&mut Option<Url>> {
    match cap {
        Capability::ResourceList => Some(&mut caps.resourcelist),
        Capability::ChangeList => Some(&mut caps.changelist),
        Capability::ResourceDump => Some(&mut caps.resourcedump),
        Capability::ChangeDump => Some(&mut caps.changedump),
        _ => None,
    }
}
