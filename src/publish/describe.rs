//! The navigation documents (§8 Source Description, §9 Capability List) and the facts the
//! human-readable set page shows.
//!
//! Each configured set gets one Capability List in the Source Description, with a
//! `describedby` link to its page; each Capability List has its mandatory `up` link and lists
//! the set's Resource List and Change List, and, when notifications are on, its
//! change-notification channel (Change Notification 1.0.1 §5). No `<lastmod>` is written: these documents do not
//! change when the lists they point to do (§8, §9).

use serde::Serialize;

use super::{PublishError, Publisher};
use crate::model::{Capability, Document, Entry, Header, Link, Md, RootFormat, W3cDateTime, to_bytes};

/// What the page describing a set shows.
#[derive(Debug, Clone, Serialize)]
pub struct SetSummary {
    /// The set id.
    pub id: String,
    /// Live resources in the set.
    pub live: u64,
    /// Change events in the set's log (visible ones).
    pub events: u64,
    /// When the set last changed.
    pub last_change: Option<String>,
    /// Each source of the set.
    pub sources: Vec<SourceSummary>,
}

/// One source on a set page.
#[derive(Debug, Clone, Serialize)]
pub struct SourceSummary {
    /// The source id.
    pub id: String,
    /// Live resources harvested from it.
    pub live: u64,
    /// When its resources last changed in Tributary.
    pub last_change: Option<String>,
    /// End of its last successful harvest, as the harvester recorded it.
    pub last_harvest: Option<String>,
    /// Its last harvest error, if any.
    pub last_error: Option<String>,
}

fn md(capability: Capability) -> Md {
    Md { capability: Some(capability), ..Md::default() }
}

impl Publisher {
    /// The Source Description: one Capability List per configured set.
    pub fn source_description(&self) -> Vec<u8> {
        let mut header = Header::new(RootFormat::UrlSet, md(Capability::Description));
        header.links.push(Link::new("describedby", self.naming.base()));
        let entries = self
            .sets()
            .map(|s| Entry {
                md: Some(md(Capability::CapabilityList)),
                links: vec![Link::new("describedby", self.naming.set_page(&s.id))],
                ..Entry::new(self.naming.capability_list(&s.id))
            })
            .collect();
        to_bytes(&Document { header, entries })
    }

    /// The Capability List of `set`, `None` for an unknown set.
    pub fn capability_list(&self, set: &str) -> Option<Vec<u8>> {
        self.set(set)?;
        let mut header = Header::new(RootFormat::UrlSet, md(Capability::CapabilityList));
        header.links.push(Link::new("describedby", self.naming.set_page(set)));
        header.links.push(Link::new("up", self.naming.source_description()));
        let entry = |capability, loc| Entry { md: Some(md(capability)), ..Entry::new(loc) };
        let mut entries = vec![entry(Capability::ResourceList, self.naming.resource_list(set))];
        if self.limits().dumps {
            entries.push(entry(Capability::ResourceDump, self.naming.resource_dump(set)));
        }
        entries.push(entry(Capability::ChangeList, self.naming.change_list(set)));
        if self.limits().dumps {
            entries.push(entry(Capability::ChangeDump, self.naming.change_dump(set)));
        }
        entries.extend(self.notification_channel(set));
        Some(to_bytes(&Document { header, entries }))
    }

    /// Counts and times for the page describing `set`.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`].
    pub fn set_summary(&self, set: &str) -> Result<SetSummary, PublishError> {
        let view = self.view_or_missing(set)?;
        let text = |t: Option<W3cDateTime>| t.map(|t| t.to_string());
        let info = self.store.set_info(set)?;
        let mut sources = Vec::with_capacity(view.config.sources.len());
        for id in &view.config.sources {
            let own = self.store.set_info(id)?;
            let state = self.store.source_state(id)?.unwrap_or_default();
            sources.push(SourceSummary {
                id: id.clone(),
                live: own.as_ref().map_or(0, |i| i.live),
                last_change: text(own.and_then(|i| i.last_change)),
                last_harvest: text(state.status.last_success),
                last_error: state.status.last_error,
            });
        }
        Ok(SetSummary {
            id: set.to_owned(),
            live: info.as_ref().map_or(0, |i| i.live),
            events: info.as_ref().map_or(0, |i| i.events),
            last_change: text(info.and_then(|i| i.last_change)),
            sources,
        })
    }
}
