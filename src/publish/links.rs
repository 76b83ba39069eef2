//! Which of an upstream's `<rs:ln>` links Tributary republishes (§14.8, last paragraph).
//!
//! A link the upstream made about *its* copy is not necessarily true of Tributary's: a
//! `canonical` or `collection` of the original Source, a mirror (`duplicate`), archived
//! versions (`memento`, `timegate`, `timemap`), or navigation (`up`, `index`) describe the
//! upstream, not the aggregate. Links *about the content* — its metadata (`describedby`,
//! `describes`), its profile, alternate representations, patches — stay true, and when their
//! target is itself republished in the same set, Destinations are better served by Tributary's
//! copy, so the `href` is rewritten. `via` is never inherited: Tributary generates it from the
//! stored origin.
//!
//! The policy is applied when a document is written, not when a resource is harvested, so a
//! changed policy takes effect at the next request without re-harvesting. Relation types are
//! compared ASCII-case-insensitively (RFC 8288 §2.1.1); a `rel` listing several types keeps
//! only the allowed ones.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::render::Kept;
use crate::model::Link;
use crate::store::LinkView;

/// The patch relation as the spec spells it (§14.4).
pub const PATCH_REL: &str = "http://www.openarchives.org/rs/terms/patch";

/// Relation types republished by default.
pub const DEFAULT_KEEP: [&str; 6] = ["describedby", "describes", "profile", "alternate", "patch", PATCH_REL];

/// Relation types dropped by default (listed for the configuration and the set page; anything
/// not kept is dropped anyway).
pub const DEFAULT_DROP: [&str; 9] =
    ["collection", "canonical", "memento", "timegate", "timemap", "duplicate", "up", "index", "via"];

/// Per relation type: republish or drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPolicy {
    /// Relation types republished (lowercase); every other type is dropped.
    pub keep: BTreeSet<String>,
    /// Relation types dropped even if also listed in `keep` (lowercase).
    pub drop: BTreeSet<String>,
}

impl Default for LinkPolicy {
    fn default() -> Self {
        LinkPolicy {
            keep: DEFAULT_KEEP.iter().map(|s| (*s).to_owned()).collect(),
            drop: DEFAULT_DROP.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

impl LinkPolicy {
    /// A policy from configuration lists (`keep_links`, `drop_links`), lowercased. Whatever
    /// is not kept is dropped; `drop` wins over `keep`; `via` is always dropped.
    pub fn new(
        keep: impl IntoIterator<Item = impl AsRef<str>>,
        drop: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Self {
        LinkPolicy {
            keep: keep.into_iter().map(|s| s.as_ref().to_ascii_lowercase()).collect(),
            drop: drop.into_iter().map(|s| s.as_ref().to_ascii_lowercase()).collect(),
        }
    }

    /// A policy keeping exactly `keep` (the default drop list still applies to `via`).
    pub fn keeping(keep: impl IntoIterator<Item = impl AsRef<str>>) -> Self {
        LinkPolicy {
            keep: keep.into_iter().map(|s| s.as_ref().to_ascii_lowercase()).collect(),
            drop: BTreeSet::from(["via".to_owned()]),
        }
    }

    /// Whether links of relation type `rel` are republished. `via` never is.
    pub fn allows(&self, rel: &str) -> bool {
        // Called for every link of every entry: lowercase only when needed.
        let lower: std::borrow::Cow<'_, str> = if rel.bytes().any(|b| b.is_ascii_uppercase()) {
            std::borrow::Cow::Owned(rel.to_ascii_lowercase())
        } else {
            std::borrow::Cow::Borrowed(rel)
        };
        let rel = lower.as_ref();
        rel != "via" && self.keep.contains(rel) && !self.drop.contains(rel)
    }
}

/// The policy for every source: defaults plus per-source overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkPolicies {
    /// Applies to sources without an override.
    pub default: LinkPolicy,
    /// Overrides by source id.
    pub per_source: BTreeMap<String, LinkPolicy>,
}

impl LinkPolicies {
    /// The policy for `source`.
    pub fn for_source(&self, source: &str) -> &LinkPolicy {
        self.per_source.get(source).unwrap_or(&self.default)
    }
}

/// The links to republish: those `policy` allows (with a multi-type `rel` reduced to its
/// allowed types), each `href` replaced by `rewrite(href)` when that returns Tributary's URI.
///
/// # Errors
/// The first error of `rewrite`.
pub(crate) fn inherit<E>(
    links: &[Link],
    policy: &LinkPolicy,
    mut rewrite: impl FnMut(&str) -> Result<Option<String>, E>,
) -> Result<Vec<Link>, E> {
    let mut out = Vec::new();
    for link in links {
        let Some(rel) = allowed_rel(&link.rel, policy) else { continue };
        let mut kept = link.clone();
        kept.rel = rel.into_owned();
        if let Some(uri) = rewrite(&link.href)? {
            kept.href = uri;
        }
        out.push(kept);
    }
    Ok(out)
}

/// As [`inherit`], over stored links borrowed from a record view (the Resource List's hot
/// path); an `href` is borrowed unless rewritten.
///
/// # Errors
/// The first error of `rewrite`.
pub(crate) fn inherit_views<'a, E>(
    links: &'a [LinkView<'a>],
    policy: &LinkPolicy,
    mut rewrite: impl FnMut(&str) -> Result<Option<String>, E>,
) -> Result<Vec<Kept<'a>>, E> {
    let mut out = Vec::new();
    for link in links {
        let Some(rel) = allowed_rel(link.rel, policy) else { continue };
        let href = match rewrite(link.href)? {
            Some(uri) => Cow::Owned(uri),
            None => Cow::Borrowed(link.href),
        };
        out.push(Kept { rel, href, link });
    }
    Ok(out)
}

/// The allowed relation types of `rel`, space-separated; `None` when none is allowed.
fn allowed_rel<'a>(rel: &'a str, policy: &LinkPolicy) -> Option<Cow<'a, str>> {
    let mut tokens = rel.split_ascii_whitespace();
    let first = tokens.next()?;
    if tokens.next().is_none() {
        // The common case, one type: borrowed, as written.
        return policy.allows(first).then_some(Cow::Borrowed(first));
    }
    let kept: Vec<&str> = rel.split_ascii_whitespace().filter(|t| policy.allows(t)).collect();
    (!kept.is_empty()).then(|| Cow::Owned(kept.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rels(links: &[Link]) -> Vec<(&str, &str)> {
        links.iter().map(|l| (l.rel.as_str(), l.href.as_str())).collect()
    }

    #[test]
    fn default_policy_per_relation() {
        let p = LinkPolicy::default();
        for keep in DEFAULT_KEEP {
            assert!(p.allows(keep), "{keep}");
        }
        for drop in DEFAULT_DROP {
            assert!(!p.allows(drop), "{drop}");
        }
        assert!(!p.allows("license"), "not on the keep list");
        assert!(p.allows("DescribedBy"), "case-insensitive");
    }

    #[test]
    fn via_is_never_inherited_even_when_kept() {
        let mut p = LinkPolicy::keeping(["via", "canonical"]);
        assert!(!p.allows("via"));
        assert!(p.allows("canonical"));
        p.drop.clear();
        assert!(!p.allows("via"));
    }

    #[test]
    fn filters_rewrites_and_splits_multi_type_rels() {
        let links = vec![
            Link::new("describedby", "http://up/meta/1"),
            Link::new("canonical", "http://up/c"),
            Link::new("alternate canonical", "http://up/alt"),
            Link::new("via", "http://elsewhere/x"),
            Link::new("profile", "http://schema/p"),
        ];
        let out = inherit(&links, &LinkPolicy::default(), |href| {
            Ok::<_, ()>((href == "http://up/meta/1").then(|| "http://trib/r/s/http/up/meta/1".to_owned()))
        })
        .unwrap();
        assert_eq!(
            rels(&out),
            vec![
                ("describedby", "http://trib/r/s/http/up/meta/1"),
                ("alternate", "http://up/alt"),
                ("profile", "http://schema/p"),
            ]
        );
    }

    #[test]
    fn configuration_lists_are_lowercased_and_drop_wins() {
        let p = LinkPolicy::new(["DescribedBy", "canonical"], ["CANONICAL"]);
        assert!(p.allows("describedby"));
        assert!(!p.allows("canonical"));
        assert!(!p.allows("alternate"), "not kept");
    }

    #[test]
    fn per_source_override() {
        let mut ps = LinkPolicies::default();
        ps.per_source.insert("museum".into(), LinkPolicy::keeping(["collection"]));
        assert!(ps.for_source("museum").allows("collection"));
        assert!(!ps.for_source("museum").allows("describedby"));
        assert!(ps.for_source("other").allows("describedby"));
    }
}
