//! The operator's dashboard: the static page from the top-level `web/` directory (compiled into
//! the binary, so an installed `tributary` needs no files beside it), the two small JSON
//! endpoints it polls, `api/status` and `api/changes`, and `api/failures`, the resources of a
//! source that could not be stored. One source's page is `source_page`.
//!
//! The polled endpoints read only counters and status rows — a source's saved status, each
//! set's counters, and the last few events of a log by sequence number — never a scan of
//! records, so they cost the same with a thousand resources or a million. `api/status` orders
//! and filters every source (a status row and a counter each, see `problems`) but answers one
//! page of them, so its size does not grow with the number of sources. `api/failures` reads
//! one source's failure rows, at most [`MAX_FAILURES`] of them.

use std::collections::{BTreeMap, HashSet};

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::WebState;
use super::error::WebError;
use super::problems::{self, Problem, StateFilter};
use crate::model::W3cDateTime;
use crate::naming::Naming;
use crate::notify::Push;
use crate::publish::{Publisher, SetConfig};
use crate::store::{Event, FailureReport, SetInfo, SourceState, Store, StoreError, Subscription};

const INDEX_HTML: &str = include_str!("../../web/index.html");
const STYLE_CSS: &str = include_str!("../../web/style.css");
const APP_JS: &str = include_str!("../../web/app.js");

/// Scripts, styles and requests only from this server; nothing inline, nothing framed.
const DASHBOARD_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
     img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Changes returned when the client does not say.
const DEFAULT_CHANGES: usize = 25;
/// Most changes one request returns.
const MAX_CHANGES: usize = 500;

/// Sources on a page of `api/status` when the client does not say: the dashboard's first screen.
const DEFAULT_SOURCES: usize = 50;
/// Most sources one page holds.
const MAX_SOURCES: usize = 1000;

/// Failures returned when the client does not say.
const DEFAULT_FAILURES: usize = 100;
/// Most failures one request returns.
const MAX_FAILURES: usize = 1000;

/// Where the page carries its first status, so it renders without waiting for a request.
const STATUS_SLOT: &str = "<!--STATUS-->";

/// A static file of the dashboard, by its name under `dashboard/`.
pub(crate) fn asset(file: &str) -> Option<Response> {
    let (body, content_type) = match file {
        "style.css" => (STYLE_CSS, "text/css; charset=utf-8"),
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        _ => return None,
    };
    Some(with_headers(body.into_response(), content_type))
}

/// The page at the base URL, with the current status embedded as a JSON data block (inert:
/// the script policy does not let it run, `app.js` only reads it).
pub(crate) async fn index(st: &WebState) -> Result<Response, WebError> {
    let p = st.shared.publisher.clone();
    let push = st.shared.push.clone();
    let configured = st.configured();
    let q = StatusQuery::default();
    let s = tokio::task::spawn_blocking(move || status(&p, push.as_ref(), configured.as_deref(), &q)).await??;
    // `<` only occurs inside JSON strings, where \u003c means the same; so no `</script>`.
    let data = serde_json::to_string(&s).unwrap_or_default().replace('<', "\\u003c");
    let block = format!("<script type=\"application/json\" id=\"status-data\">{data}</script>");
    let page = INDEX_HTML.replacen(STATUS_SLOT, &block, 1);
    Ok(with_headers(page.into_response(), "text/html; charset=utf-8"))
}

fn with_headers(mut r: Response, content_type: &'static str) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(DASHBOARD_CSP));
    // The assets change only with the binary; the page must still be revalidated after upgrades.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// What `api/status` answers.
#[derive(Debug, Serialize)]
pub(crate) struct Status {
    generated: String,
    /// Why the store accepts no writes, if it does not (a full disk, a failed sync).
    store_read_only: Option<String>,
    source_description: String,
    provenance: String,
    /// Origins that asked (`Retry-After`) not to be contacted before a time: nothing is sent
    /// to them until then.
    parked_origins: Vec<ParkRow>,
    /// Sources in all.
    total: usize,
    /// Sources the filter admits (all of them without one).
    matched: usize,
    /// Where the page starts among them, and its most rows.
    offset: usize,
    limit: usize,
    /// How many sources have each problem, among them all.
    problems: BTreeMap<&'static str, usize>,
    /// The page: problems first.
    sources: Vec<SourceRow>,
    /// The merged sets, and the own sets of the sources on the page.
    sets: Vec<SetRow>,
}

/// An origin parked until a time.
#[derive(Debug, Serialize)]
struct ParkRow {
    origin: String,
    until: String,
}

/// A configured URL that answered a permanent redirect, and where it led.
#[derive(Debug, Serialize)]
struct MovedRow {
    from: String,
    to: String,
}

#[derive(Debug, Serialize)]
pub(super) struct SourceRow {
    id: String,
    /// What an operator should look at, most serious first; empty when healthy.
    problems: Vec<Problem>,
    state: crate::store::HarvestState,
    last_attempt: Option<String>,
    last_success: Option<String>,
    next_attempt: Option<String>,
    /// Live resources held (the source's own set counter).
    resources: u64,
    /// Change events applied (the length of the source's own change log).
    changes: u64,
    failures: u64,
    /// Resources recorded as failing now (`api/failures?source=ID` lists them).
    failing: u64,
    consecutive_failures: u32,
    last_error: Option<String>,
    last_pass: crate::store::PassCounts,
    set_page: String,
    /// When Tributary applied the source's newest change (its own clock), by poll or push.
    last_change: Option<String>,
    /// Seconds since then: how fresh the copy is known to be.
    freshness_seconds: Option<i64>,
    /// Whether the source is followed by push or by polling.
    push: PushRow,
    /// For an OAI-PMH source, what its repository's Identify said.
    oai: Option<OaiRow>,
    /// The origin the source needs that asked us to wait, while it does: the source is not
    /// polled before `until`.
    parked: Option<ParkRow>,
    /// Configured URLs that moved for good: `sources.toml` should say `to`.
    moved: Vec<MovedRow>,
    /// Since when the operator has it paused (`tributary pause`).
    paused: Option<String>,
    /// False for a source removed from the configuration whose records are still published
    /// (until `tributary source forget`).
    configured: bool,
    /// Deletions held for the operator (a pass would have deleted more than `max_deletions`).
    held_deletions: u64,
    /// Since when.
    held_since: Option<String>,
}

/// An OAI-PMH repository as Identify described it at the last poll.
#[derive(Debug, Serialize)]
struct OaiRow {
    repository_name: String,
    granularity: String,
    earliest_datestamp: String,
    deleted_record: String,
    admin_emails: Vec<String>,
}

impl OaiRow {
    fn of(o: crate::store::OaiState) -> OaiRow {
        OaiRow {
            repository_name: o.repository_name,
            granularity: o.granularity,
            earliest_datestamp: o.earliest_datestamp,
            deleted_record: o.deleted_record,
            admin_emails: o.admin_emails,
        }
    }
}

/// A source's push subscription, as the dashboard shows it.
#[derive(Debug, Serialize)]
struct PushRow {
    /// `subscribed` (a verified lease stands), `pending` (waiting for the hub's verification)
    /// or `polling` (no subscription: push is off, no channel is advertised, or it failed).
    mode: &'static str,
    hub: Option<String>,
    topic: Option<String>,
    lease_expires: Option<String>,
    /// Why the last request failed or was denied.
    last_error: Option<String>,
}

impl PushRow {
    fn of(sub: Option<&Subscription>, now: i64) -> PushRow {
        let Some(sub) = sub else {
            return PushRow { mode: "polling", hub: None, topic: None, lease_expires: None, last_error: None };
        };
        let lease = sub.active.as_ref().filter(|l| l.expires > now);
        let mode = match (lease, &sub.pending) {
            (Some(_), _) => "subscribed",
            (None, Some(p)) if p.mode == "subscribe" => "pending",
            _ => "polling",
        };
        PushRow {
            mode,
            hub: Some(sub.hub.clone()),
            topic: Some(sub.topic.clone()),
            lease_expires: lease.and_then(|l| W3cDateTime::from_unix(l.expires, 0).ok()).map(|t| t.to_string()),
            last_error: sub.last_error.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
struct SetRow {
    id: String,
    sources: Vec<String>,
    resources: u64,
    changes: u64,
    last_change: Option<String>,
    capability_list: String,
    /// The set's FeedSync Atom feed.
    feed: String,
    page: String,
    /// Its change-notification channel, when notifications are on.
    notifications: Option<NotificationRow>,
}

/// A set's notification channel as the dashboard shows it.
#[derive(Debug, Serialize)]
struct NotificationRow {
    topic: String,
    hub: String,
    /// Verified subscriptions whose lease runs (the built-in hub's; `None` for an external hub).
    subscribers: Option<usize>,
    /// Their delivery counts in total: never their callbacks, which are capabilities.
    deliveries: crate::notify::SubscriberTotals,
}

/// One change as the dashboard lists it.
#[derive(Debug, Serialize)]
struct ChangeRow {
    set: String,
    seq: u64,
    source: String,
    uri: String,
    change: &'static str,
    datetime: String,
    origin: String,
    length: u64,
}

#[derive(Debug, Serialize)]
struct Changes {
    changes: Vec<ChangeRow>,
}

fn text(t: Option<W3cDateTime>) -> Option<String> {
    t.map(|t| t.to_string())
}

/// Every source of every set, in configuration order, once.
pub(crate) fn source_ids(p: &Publisher) -> Vec<String> {
    let mut seen = HashSet::new();
    p.sets().flat_map(|s| s.sources).filter(|id| seen.insert(id.clone())).collect()
}

/// Everything `api/status` knows of one source before it is shown: enough to order and filter
/// every source (a state row and a set counter each), and to build the row of those on the
/// page.
pub(super) struct Candidate {
    pub(super) id: String,
    pub(super) state: SourceState,
    pub(super) own: Option<SetInfo>,
    pub(super) configured: bool,
    pub(super) problems: Vec<Problem>,
}

/// Reads what orders and filters one source.
pub(super) fn candidate(
    store: &Store,
    id: String,
    configured: Option<&HashSet<String>>,
    now: i64,
) -> Result<Candidate, StoreError> {
    let state = store.source_state(&id)?.unwrap_or_default();
    let own = store.set_info(&id)?;
    let configured = configured.is_none_or(|c| c.contains(&id));
    let problems = problems::problems(&state, configured, own.as_ref().and_then(|i| i.last_change), now);
    Ok(Candidate { id, state, own, configured, problems })
}

/// The dashboard row of one source.
pub(super) fn source_row(n: &Naming, subs: &[Subscription], now: W3cDateTime, c: Candidate) -> SourceRow {
    let Candidate { id, state: SourceState { status: s, oai, paused, .. }, own, configured, problems } = c;
    let sub = subs.iter().find(|x| x.source == id && x.pending.as_ref().is_none_or(|p| p.mode != "unsubscribe"));
    let last_change = own.as_ref().and_then(|i| i.last_change);
    SourceRow {
        last_change: text(last_change),
        freshness_seconds: last_change.map(|t| (now.unix_timestamp() - t.unix_timestamp()).max(0)),
        push: PushRow::of(sub, now.unix_timestamp()),
        oai: oai.map(OaiRow::of),
        resources: own.as_ref().map_or(0, |i| i.live),
        changes: own.as_ref().map_or(0, |i| i.events),
        state: s.state,
        last_attempt: text(s.last_attempt),
        last_success: text(s.last_success),
        next_attempt: text(s.next_attempt),
        failures: s.failures,
        failing: s.failing,
        consecutive_failures: s.consecutive_failures,
        last_error: s.last_error,
        last_pass: s.last_pass,
        set_page: n.set_page(&id),
        paused: text(paused),
        configured,
        held_deletions: s.held_deletions,
        held_since: text(s.held_since),
        parked: s.parked.filter(|p| p.until > now).map(|p| ParkRow { origin: p.origin, until: p.until.to_string() }),
        moved: s.moved.into_iter().map(|(from, to)| MovedRow { from, to }).collect(),
        problems,
        id,
    }
}

/// Every source, problems first (most serious first, then in configuration order), with the
/// counts of each problem among them all.
fn ranked(
    p: &Publisher,
    configured: Option<&HashSet<String>>,
    now: i64,
) -> Result<(Vec<Candidate>, BTreeMap<&'static str, usize>), StoreError> {
    let mut all = Vec::new();
    for id in source_ids(p) {
        all.push(candidate(p.store(), id, configured, now)?);
    }
    // Stable: equal ranks keep the configuration order.
    all.sort_by_key(|c| c.problems.first().copied().map_or(usize::MAX, |p| p as usize));
    let mut counts: BTreeMap<&'static str, usize> = Problem::ALL.iter().map(|p| (p.as_str(), 0)).collect();
    for p in all.iter().flat_map(|c| &c.problems) {
        *counts.entry(p.as_str()).or_default() += 1;
    }
    Ok((all, counts))
}

fn status(
    p: &Publisher,
    push: Option<&Push>,
    configured: Option<&HashSet<String>>,
    q: &StatusQuery,
) -> Result<Status, StoreError> {
    let store = p.store();
    let n = p.naming();
    let now = W3cDateTime::now();
    let (all, problems) = ranked(p, configured, now.unix_timestamp())?;
    let total = all.len();
    let matched: Vec<Candidate> = all.into_iter().filter(|c| q.admits(c)).collect();
    let matched_count = matched.len();
    let subs = store.subscriptions()?;
    let sources: Vec<SourceRow> =
        matched.into_iter().skip(q.offset).take(q.limit).map(|c| source_row(n, &subs, now, c)).collect();
    let shown: HashSet<&str> = sources.iter().map(|r| r.id.as_str()).collect();
    let mut sets = Vec::new();
    // A source's own set is shown with the source; merged sets always.
    for s in p.sets().filter(|s| !is_own_set(s) || shown.contains(s.id.as_str())) {
        sets.push(set_row(store, n, push, &s)?);
    }
    let parked_origins = store.parked_origins()?.into_iter().filter(|(_, until)| *until > now);
    Ok(Status {
        generated: W3cDateTime::now().to_string(),
        store_read_only: store.read_only(),
        source_description: n.source_description(),
        provenance: n.provenance(),
        parked_origins: parked_origins.map(|(origin, until)| ParkRow { origin, until: until.to_string() }).collect(),
        total,
        matched: matched_count,
        offset: q.offset,
        limit: q.limit,
        problems,
        sources,
        sets,
    })
}

fn is_own_set(s: &SetConfig) -> bool {
    matches!(s.sources.as_slice(), [only] if *only == s.id)
}

fn set_row(store: &Store, n: &Naming, push: Option<&Push>, s: &SetConfig) -> Result<SetRow, StoreError> {
    let info = store.set_info(&s.id)?;
    Ok(SetRow {
        resources: info.as_ref().map_or(0, |i| i.live),
        changes: info.as_ref().map_or(0, |i| i.events),
        last_change: text(info.and_then(|i| i.last_change)),
        capability_list: n.capability_list(&s.id),
        feed: n.set_feed(&s.id),
        page: n.set_page(&s.id),
        notifications: push.map(|push| NotificationRow {
            topic: n.notification_topic(&s.id),
            hub: push.hub().to_owned(),
            subscribers: push.is_builtin().then(|| push.subscriber_count(&s.id)),
            deliveries: push.subscriber_totals(&s.id),
        }),
        sources: s.sources.clone(),
        id: s.id.clone(),
    })
}

/// A page of `api/status`: which sources, by position in the ranked list, a state and a name.
#[derive(Debug, Clone)]
pub(crate) struct StatusQuery {
    offset: usize,
    limit: usize,
    state: Option<StateFilter>,
    /// Part of the id, lower case.
    name: Option<String>,
}

impl Default for StatusQuery {
    fn default() -> Self {
        StatusQuery { offset: 0, limit: DEFAULT_SOURCES, state: None, name: None }
    }
}

impl StatusQuery {
    /// `offset=N&limit=N&state=NAME&q=TEXT`, each optional.
    fn parse(raw: Option<&str>) -> Result<StatusQuery, WebError> {
        let mut q = StatusQuery::default();
        for (k, v) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            let number =
                |v: &str| v.parse::<usize>().map_err(|_| WebError::BadRequest(format!("{k}={v}: expected a number")));
            match k.as_ref() {
                "offset" => q.offset = number(&v)?,
                "limit" => q.limit = number(&v)?.clamp(1, MAX_SOURCES),
                "state" if v.is_empty() || v == "all" => q.state = None,
                "state" => {
                    let bad = || WebError::BadRequest(format!("state={v}: not a problem or harvest state"));
                    q.state = Some(StateFilter::parse(&v).ok_or_else(bad)?);
                }
                "q" => q.name = Some(v.trim().to_lowercase()).filter(|v| !v.is_empty()),
                _ => {}
            }
        }
        Ok(q)
    }

    fn admits(&self, c: &Candidate) -> bool {
        self.state.is_none_or(|f| f.admits(c.state.status.state, &c.problems))
            && self.name.as_ref().is_none_or(|n| c.id.to_lowercase().contains(n.as_str()))
    }
}

/// `api/status[?offset=N][&limit=N][&state=NAME][&q=TEXT]`: a page of the sources, problems
/// first, with the counts of every problem, and the sets those sources publish plus the merged
/// sets.
pub(crate) async fn api_status(st: &WebState, raw_query: Option<&str>) -> Result<Response, WebError> {
    let q = StatusQuery::parse(raw_query)?;
    let p = st.shared.publisher.clone();
    let push = st.shared.push.clone();
    let configured = st.configured();
    let s = tokio::task::spawn_blocking(move || status(&p, push.as_ref(), configured.as_deref(), &q)).await??;
    Ok(json(&s))
}

struct ChangeQuery {
    set: Option<String>,
    after: Option<u64>,
    limit: usize,
}

fn change_query(raw: Option<&str>) -> Result<ChangeQuery, WebError> {
    let mut q = ChangeQuery { set: None, after: None, limit: DEFAULT_CHANGES };
    for (k, v) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        let number =
            |v: &str| v.parse::<u64>().map_err(|_| WebError::BadRequest(format!("{k}={v}: expected a number")));
        match k.as_ref() {
            "set" => q.set = Some(v.into_owned()),
            "after" => q.after = Some(number(&v)?),
            "limit" => q.limit = usize::try_from(number(&v)?).unwrap_or(MAX_CHANGES).clamp(1, MAX_CHANGES),
            _ => {}
        }
    }
    if q.after.is_some() && q.set.is_none() {
        return Err(WebError::BadRequest("after=SEQ needs set=ID: sequence numbers are per set".into()));
    }
    Ok(q)
}

fn row(set: &str, e: Event) -> ChangeRow {
    ChangeRow {
        set: set.to_owned(),
        seq: e.seq,
        source: e.source,
        uri: e.uri,
        change: e.change.as_str(),
        datetime: e.datetime.to_string(),
        origin: e.origin,
        length: e.length,
    }
}

/// The newest `limit` events of `set`, oldest first; or, with `after`, the first `limit`
/// events after that sequence number.
fn set_changes(store: &Store, set: &str, after: Option<u64>, limit: usize) -> Result<Vec<ChangeRow>, StoreError> {
    let start = match after {
        Some(a) => a,
        None => store.set_info(set)?.map_or(0, |i| i.events.saturating_sub(limit as u64)),
    };
    store.events_after(set, start)?.take(limit).map(|e| e.map(|e| row(set, e))).collect()
}

fn changes(p: &Publisher, q: &ChangeQuery) -> Result<Vec<ChangeRow>, WebError> {
    if let Some(set) = &q.set {
        if p.set(set).is_none() {
            return Err(WebError::NotFound(format!("no set {set:?}")));
        }
        return Ok(set_changes(p.store(), set, q.after, q.limit)?);
    }
    // Every source's own log holds each change exactly once. Newest sources first: once
    // `limit` changes are collected, a source whose last change is older than all of them
    // cannot contribute, so only a few logs are read however many sources there are.
    let store = p.store();
    let mut recent = Vec::new();
    for id in source_ids(p) {
        if let Some(info) = store.set_info(&id)?.filter(|i| i.events > 0) {
            recent.push((info.last_change, id));
        }
    }
    recent.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut all: Vec<(W3cDateTime, ChangeRow)> = Vec::new();
    for (last, id) in recent {
        if all.len() >= q.limit && last.is_some_and(|l| l < all[q.limit - 1].0) {
            break;
        }
        let start = store.set_info(&id)?.map_or(0, |i| i.events.saturating_sub(q.limit as u64));
        for e in store.events_after(&id, start)?.take(q.limit) {
            let e = e?;
            all.push((e.datetime, row(&id, e)));
        }
        all.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.seq.cmp(&a.1.seq)));
        all.truncate(q.limit);
    }
    Ok(all.into_iter().map(|(_, r)| r).collect())
}

/// `api/changes[?set=ID[&after=SEQ]][&limit=N]`: without `set`, the newest changes across
/// every source, newest first; with `set`, that set's log in order (after `SEQ`, or its tail).
pub(crate) async fn api_changes(st: &WebState, raw_query: Option<&str>) -> Result<Response, WebError> {
    let q = change_query(raw_query)?;
    let p = st.shared.publisher.clone();
    let changes = tokio::task::spawn_blocking(move || changes(&p, &q)).await??;
    Ok(json(&Changes { changes }))
}

fn failure_query(raw: Option<&str>) -> Result<(String, usize), WebError> {
    let (mut source, mut limit) = (None, DEFAULT_FAILURES);
    for (k, v) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "source" => source = Some(v.into_owned()),
            "limit" => {
                let n = v.parse::<u64>().map_err(|_| WebError::BadRequest(format!("limit={v}: expected a number")))?;
                limit = usize::try_from(n).unwrap_or(MAX_FAILURES).clamp(1, MAX_FAILURES);
            }
            _ => {}
        }
    }
    let source = source.ok_or_else(|| WebError::BadRequest("source=ID is required".into()))?;
    Ok((source, limit))
}

fn failures(p: &Publisher, source: &str, limit: usize) -> Result<FailureReport, WebError> {
    if !source_ids(p).iter().any(|id| id == source) {
        return Err(WebError::NotFound(format!("no source {source:?}")));
    }
    Ok(p.store().failure_report(source, limit)?)
}

/// `api/failures?source=ID[&limit=N]`: the source's resources that could not be stored, why,
/// since when and how many times, in URI order.
pub(crate) async fn api_failures(st: &WebState, raw_query: Option<&str>) -> Result<Response, WebError> {
    let (source, limit) = failure_query(raw_query)?;
    let p = st.shared.publisher.clone();
    let f = tokio::task::spawn_blocking(move || failures(&p, &source, limit)).await??;
    Ok(json(&f))
}

pub(super) fn json<T: Serialize>(v: &T) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_queries() {
        let q = change_query(Some("set=a&after=7&limit=100000")).unwrap();
        assert_eq!((q.set.as_deref(), q.after, q.limit), (Some("a"), Some(7), MAX_CHANGES));
        assert_eq!(change_query(None).unwrap().limit, DEFAULT_CHANGES);
        assert!(change_query(Some("after=3")).is_err());
        assert!(change_query(Some("set=a&after=x")).is_err());
    }

    #[test]
    fn assets_are_embedded() {
        for file in ["style.css", "app.js"] {
            assert!(asset(file).is_some(), "{file}");
        }
        assert!(INDEX_HTML.contains("dashboard/app.js") && INDEX_HTML.contains(STATUS_SLOT));
        assert!(asset("nope.js").is_none());
    }
}
