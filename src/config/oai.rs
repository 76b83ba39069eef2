//! The keys of an OAI-PMH source (`oai`, `metadata_prefix`, `oai_sets`, `oai_relist`,
//! `oai_objects`),
//! checked here so that `raw.rs` only dispatches: an OAI-PMH data provider is a third kind
//! of source beside ResourceSync Sources and feeds, and its keys make no sense on the others.

use std::time::Duration;

use toml::Spanned;

use super::raw::RawSource;
use super::{ConfigError, Locator, OaiSource, Settings};

/// The prefix every OAI-PMH repository must offer (OAI-PMH 2.0 §3.4).
const DEFAULT_PREFIX: &str = "oai_dc";

/// A full re-list of a repository that keeps no deleted records, once a week by default: a
/// compromise between finding deletions late and listing a large repository too often.
const DEFAULT_RELIST: Duration = Duration::from_secs(7 * 86_400);

/// The OAI-PMH settings of a `[[source]]`, or `None` when it has no `oai` key. The OAI keys
/// without `oai`, and `oai` together with `url`, `feed` or `capability_list`, are errors.
pub(super) fn validate(raw: &Spanned<RawSource>, at: &Locator<'_>) -> Result<Option<OaiSource>, ConfigError> {
    let s = raw.get_ref();
    let Some(oai) = &s.oai else {
        let stray = [("metadata_prefix", s.metadata_prefix.as_ref().map(Spanned::span))]
            .into_iter()
            .chain([("oai_sets", s.oai_sets.as_ref().map(Spanned::span))])
            .chain([("oai_relist", s.oai_relist.as_ref().map(Spanned::span))])
            .chain([("oai_objects", s.oai_objects.as_ref().map(Spanned::span))])
            .find_map(|(k, span)| span.map(|sp| (k, sp)));
        return match stray {
            Some((key, span)) => Err(at.error(span, key, format!("{key} is for OAI-PMH sources (`oai = ...`)"))),
            None => Ok(None),
        };
    };
    let other = [("url", s.url.as_ref()), ("feed", s.feed.as_ref()), ("capability_list", s.capability_list.as_ref())];
    if let Some((key, v)) = other.into_iter().find_map(|(k, v)| v.map(|v| (k, v))) {
        let why = format!("a source has either `oai` (an OAI-PMH base URL) or `{key}`, not both");
        return Err(at.error(v.span(), key, why));
    }
    if let Some(f) = &s.feeds {
        return Err(at.error(f.span(), "feeds", "a source has either `oai` or `feeds`, not both"));
    }
    let mut base = at.http_url(oai, "oai")?;
    if base.query().is_some() {
        return Err(at.error(oai.span(), "oai", "an OAI-PMH base URL has no query (OAI-PMH 2.0 §3.1.1)"));
    }
    base.set_fragment(None);
    Ok(Some(OaiSource {
        base,
        metadata_prefix: prefix(s.metadata_prefix.as_ref(), at)?,
        sets: sets(s.oai_sets.as_ref(), at)?,
        relist: s.oai_relist.as_ref().map(|v| at.duration(v, "oai_relist")).transpose()?.unwrap_or(DEFAULT_RELIST),
        objects: s.oai_objects.as_ref().is_some_and(|v| *v.get_ref()),
    }))
}

/// `metadata_prefix`: the protocol allows `A-Za-z0-9` and `-_.!~*'()`.
fn prefix(v: Option<&Spanned<String>>, at: &Locator<'_>) -> Result<String, ConfigError> {
    let Some(v) = v else { return Ok(DEFAULT_PREFIX.to_owned()) };
    let p = v.get_ref();
    let ok = !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.!~*'()".contains(c));
    if !ok {
        return Err(at.error(
            v.span(),
            "metadata_prefix",
            format!("{p:?} is not a metadataPrefix ([A-Za-z0-9-_.!~*'()])"),
        ));
    }
    Ok(p.clone())
}

/// `oai_sets`: `setSpec`s, each once (a colon-separated hierarchy of the same characters).
fn sets(v: Option<&Spanned<Vec<Spanned<String>>>>, at: &Locator<'_>) -> Result<Vec<String>, ConfigError> {
    let Some(list) = v else { return Ok(Vec::new()) };
    let mut out: Vec<String> = Vec::new();
    for spec in list.get_ref() {
        let t = spec.get_ref();
        let ok = !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || "-_.!~*'():".contains(c));
        if !ok {
            return Err(at.error(spec.span(), "oai_sets", format!("{t:?} is not a setSpec")));
        }
        if out.contains(t) {
            return Err(at.error(spec.span(), "oai_sets", format!("{t:?} is listed twice")));
        }
        out.push(t.clone());
    }
    if out.is_empty() {
        return Err(at.error(list.span(), "oai_sets", "lists no set (leave the key out to harvest every set)"));
    }
    Ok(out)
}

/// The link policy of an OAI-PMH source when the file sets none: its `collection` links are
/// Tributary's own statement of each record's set membership (standard §12.6), true of the
/// aggregate's copy as of the original, so they are kept instead of dropped.
pub(super) fn keep_collection_links(settings: &mut Settings) {
    settings.drop_links.retain(|r| r != "collection");
    if !settings.keep_links.iter().any(|r| r == "collection") {
        settings.keep_links.push("collection".to_owned());
    }
}
