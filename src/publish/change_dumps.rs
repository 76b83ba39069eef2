//! Change Dumps (spec §13): the bitstreams of a set's changes, packaged by period, so a
//! Destination that follows the set can catch up in a few requests.
//!
//! A package covers exactly one Change List: the same events, the same `from`/`until`
//! (see `changes`), its manifest the same entries in the same forward chronological order,
//! each created or updated resource's bitstream as it was at that change under the path its
//! entry names, deletions with no bitstream. So a closed Change List's package never changes:
//! it is built once, on its first request, and kept for good (a year of `immutable` caching).
//! The open Change List's package is cut at the set's position when the Change Dump is asked
//! for, named by that position, and cut again once the set has changed and `dump_max_age`
//! has passed; the previous cut is kept for downloads under way.
//!
//! A version that a later change replaced is only in the store until `tributary store gc`
//! collects it; a package of an old period not built before that fails with a clear error
//! naming the missing bitstream, and nothing is served for it.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::dumps::{DumpFile, Member, dump_io, entry_path, read_index, write_index, write_zip};
use super::entries::change_entry;
use super::resources::lock;
use super::{PublishError, Publisher, SetView};
use crate::model::{Capability, Change, Digest, DocumentWriter, Entry, HashAlgorithm, HashList, Header, Link, Md};
use crate::model::{RootFormat, W3cDateTime};

/// A built package: what the Change Dump says of it (kept as JSON beside it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Built {
    length: u64,
    sha256: String,
    /// When it was cut (for an open period's package: how old it is).
    built: String,
}

/// Which events a package holds: Change List `n`, through event `last`; `open` when the list
/// is still open (the package is then named by `last`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Period {
    n: u64,
    first: u64,
    last: u64,
    from: W3cDateTime,
    until: Option<W3cDateTime>,
}

impl Period {
    fn open_last(&self) -> Option<u64> {
        self.until.is_none().then_some(self.last)
    }
}

impl Publisher {
    /// The Change Dump of `set`: a package per closed Change List, then the open list's
    /// package, cut now when it is due (see the module docs). Length and hash are given for
    /// the packages already built; the others are built on their first request.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`]; [`PublishError::Dump`] when the
    /// open package cannot be built.
    pub fn change_dump(&self, set: &str) -> Result<Vec<u8>, PublishError> {
        let view = self.dump_view(set)?;
        let _building = lock(&view.dump);
        let st = self.extend(&view)?;
        let from = st.closed.first().map_or(st.open_from, |c| c.from);
        let md = Md { capability: Some(Capability::ChangeDump), from: Some(from), ..Md::default() };
        let mut header = Header::new(RootFormat::UrlSet, md);
        header.links.push(Link::new("up", self.naming.capability_list(set)));
        let mut entries = Vec::with_capacity(st.closed.len() + 1);
        for (i, c) in st.closed.iter().enumerate() {
            let p = Period { n: i as u64 + 1, first: c.first, last: c.last, from: c.from, until: Some(c.until) };
            let built = read_index::<Built>(&self.change_path(set, &p, "json"))?;
            entries.push(self.package_entry(set, &p, built.as_ref()));
        }
        let first_open = st.closed.last().map_or(1, |c| c.last + 1);
        if first_open <= st.visible {
            let n = st.closed.len() as u64 + 1;
            let p = Period { n, first: first_open, last: st.visible, from: st.open_from, until: None };
            let (p, built) = self.open_package(&view, p)?;
            entries.push(self.package_entry(set, &p, Some(&built)));
        }
        self.prune_open(set, st.closed.len() as u64 + 1);
        Ok(crate::model::to_bytes(&crate::model::Document { header, entries }))
    }

    /// A Change Dump package (or its manifest): a closed list's `n` with `last = None`, built
    /// now if it is not yet; an open period's `(n, last)` while that cut is kept.
    ///
    /// # Errors
    /// [`PublishError::UnknownSet`]; [`PublishError::Store`]; [`PublishError::Dump`] when the
    /// package cannot be built (a bitstream gone from the store).
    pub fn change_dump_file(
        &self,
        set: &str,
        n: u64,
        last: Option<u64>,
        manifest: bool,
    ) -> Result<Option<DumpFile>, PublishError> {
        let view = self.dump_view(set)?;
        let _building = lock(&view.dump);
        let period = match last {
            Some(last) => Period { n, first: 0, last, from: W3cDateTime::now(), until: None },
            None => {
                let st = self.extend(&view)?;
                let Some(c) = usize::try_from(n).ok().and_then(|n| n.checked_sub(1)).and_then(|i| st.closed.get(i))
                else {
                    return Ok(None);
                };
                let p = Period { n, first: c.first, last: c.last, from: c.from, until: Some(c.until) };
                if read_index::<Built>(&self.change_path(set, &p, "json"))?.is_none() {
                    self.build_package(set, &p)?;
                }
                p
            }
        };
        let Some(built) = read_index::<Built>(&self.change_path(set, &period, "json"))? else { return Ok(None) };
        let path = self.change_path(set, &period, if manifest { "manifest.xml" } else { "zip" });
        DumpFile::at(path, &built.sha256, manifest)
    }

    /// The open period's package: the newest cut kept when the set has not changed since or
    /// it is younger than `dump_max_age`, else a new cut through `p.last`.
    fn open_package(&self, view: &SetView, p: Period) -> Result<(Period, Built), PublishError> {
        let set = view.config.id.as_str();
        if let Some(last) = self.open_cuts(set, p.n).into_iter().max() {
            let kept = Period { last, ..p };
            if let Some(b) = read_index::<Built>(&self.change_path(set, &kept, "json"))?
                && (last == p.last || !self.is_older_than_max_age(&b.built))
            {
                return Ok((kept, b));
            }
        }
        let built = self.build_package(set, &p)?;
        Ok((p, built))
    }

    /// Builds the package of `p`: manifest, ZIP and the JSON saying what it is.
    fn build_package(&self, set: &str, p: &Period) -> Result<Built, PublishError> {
        let dir = self.dump_dir(set);
        fs::create_dir_all(&dir).map_err(|e| dump_io(&dir, e))?;
        let manifest = self.change_path(set, p, "manifest.xml");
        let members = self.write_change_manifest(set, p, &manifest)?;
        let (length, sha256) = write_zip(&self.store, &self.change_path(set, p, "zip"), &manifest, &members)
            .inspect_err(|_| {
                let _ = fs::remove_file(&manifest);
            })?;
        let built = Built { length, sha256, built: W3cDateTime::now().to_string() };
        write_index(&self.change_path(set, p, "json"), &built)?;
        tracing::info!(set = %set, package = p.n, through = p.last, "built a Change Dump package");
        Ok(built)
    }

    /// Writes the Change Dump Manifest of `p`; returns the bitstreams in path order.
    fn write_change_manifest(
        &self,
        set: &str,
        p: &Period,
        path: &std::path::Path,
    ) -> Result<Vec<Member>, PublishError> {
        let md = Md {
            capability: Some(Capability::ChangeDumpManifest),
            from: Some(p.from),
            until: p.until,
            ..Md::default()
        };
        let mut header = Header::new(RootFormat::UrlSet, md);
        header.links.push(Link::new("up", self.naming.capability_list(set)));
        let file = fs::File::create(path).map_err(|e| dump_io(path, e))?;
        let mut w = DocumentWriter::new(BufWriter::new(file), &header).map_err(|e| dump_io(path, e))?;
        let mut members = Vec::new();
        let events = self.store.events_after(set, p.first.saturating_sub(1))?.take((p.last + 1 - p.first) as usize);
        for ev in events {
            let ev = ev?;
            let content = (ev.change != Change::Deleted).then_some((ev.sha256, ev.length));
            let mut entry = change_entry(ev);
            if let Some((sha256, length)) = content {
                let name = entry_path(members.len() + 1);
                if let Some(md) = entry.md.as_mut() {
                    md.path = Some(format!("/{name}"));
                }
                members.push(Member { name, sha256, length });
            }
            w.write_entry(&entry).map_err(|e| dump_io(path, e))?;
        }
        let mut out = w.finish().map_err(|e| dump_io(path, e))?;
        out.flush().map_err(|e| dump_io(path, e))?;
        Ok(members)
    }

    fn package_entry(&self, set: &str, p: &Period, built: Option<&Built>) -> Entry {
        let hash = built.map(|b| HashList(vec![Digest { algorithm: HashAlgorithm::Sha256, value: b.sha256.clone() }]));
        Entry {
            md: Some(Md {
                media_type: Some("application/zip".into()),
                length: built.map(|b| b.length),
                hash,
                from: Some(p.from),
                until: p.until,
                ..Md::default()
            }),
            links: vec![Link {
                media_type: Some("application/xml".into()),
                ..Link::new("contents", self.naming.change_dump_manifest(set, p.n, p.open_last()))
            }],
            ..Entry::new(self.naming.change_dump_package(set, p.n, p.open_last()))
        }
    }

    /// `changedump-{n}.{ext}` for a closed list, `changedump-{n}-{last}.{ext}` for an open cut.
    fn change_path(&self, set: &str, p: &Period, ext: &str) -> PathBuf {
        let name = match p.open_last() {
            None => format!("changedump-{}", p.n),
            Some(last) => format!("changedump-{}-{last}", p.n),
        };
        let sep = if ext == "manifest.xml" { "-" } else { "." };
        self.dump_dir(set).join(format!("{name}{sep}{ext}"))
    }

    /// The cuts kept of the open list `n`, by their last event.
    fn open_cuts(&self, set: &str, n: u64) -> Vec<u64> {
        let Ok(files) = fs::read_dir(self.dump_dir(set)) else { return Vec::new() };
        let prefix = format!("changedump-{n}-");
        let last = |name: &str| name.strip_prefix(&prefix)?.strip_suffix(".json")?.parse::<u64>().ok();
        files.flatten().filter_map(|f| last(&f.file_name().to_string_lossy())).collect()
    }

    /// Deletes the cuts of lists that have closed since (their closed package replaces them)
    /// and all but the two newest cuts of the open list `open`.
    fn prune_open(&self, set: &str, open: u64) {
        let Ok(files) = fs::read_dir(self.dump_dir(set)) else { return };
        let mut cuts = self.open_cuts(set, open);
        cuts.sort_unstable();
        let keep: Vec<u64> = cuts.iter().rev().take(2).copied().collect();
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            let Some((n, last)) = open_cut_of(&name) else { continue };
            if n < open || (n == open && !keep.contains(&last)) {
                let _ = fs::remove_file(f.path());
            }
        }
    }
}

/// `(n, last)` of an open cut's file (`changedump-{n}-{last}…`).
fn open_cut_of(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("changedump-")?;
    let (n, rest) = rest.split_once('-')?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((n.parse().ok()?, digits.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::model::{DocumentReader, ReadOptions};
    use crate::naming::Naming;
    use crate::publish::{DumpLimits, Limits, LinkPolicies, Rollover, SetConfig};
    use crate::store::{Batch, Expected, Listing, NewRecord, Store, StoreOptions};

    fn publisher(store: &Store) -> Publisher {
        let naming = Naming::new(&url::Url::parse("http://t/").unwrap());
        let limits = Limits {
            change_list: Rollover { max_events: 3, period: None },
            dump: DumpLimits { max_age: std::time::Duration::ZERO, ..DumpLimits::default() },
            ..Limits::default()
        };
        Publisher::new(store.clone(), naming, vec![SetConfig::source("s")], LinkPolicies::default(), limits).unwrap()
    }

    fn put(store: &Store, uri: &str, bytes: &[u8]) {
        let info = store.put(bytes, &Expected::none()).unwrap();
        let listing = Listing { origin: format!("http://o/{uri}"), ..Listing::default() };
        let rec = NewRecord {
            uri: format!("http://t/r/s/{uri}"),
            source: "s".into(),
            upstream: format!("http://u/{uri}"),
            sha256: info.id,
            listing,
        };
        store.apply(Batch::new().upsert(&["s"], rec)).unwrap();
        store.flush().unwrap();
    }

    fn delete(store: &Store, uri: &str) {
        store.apply(Batch::new().delete(&["s"], &format!("http://t/r/s/{uri}"))).unwrap();
        store.flush().unwrap();
    }

    /// The manifest of a package file, and its members' bytes by path.
    fn open(path: &std::path::Path) -> (String, Vec<(String, Vec<u8>)>) {
        let mut zip = zip::ZipArchive::new(fs::File::open(path).unwrap()).unwrap();
        let mut all = Vec::new();
        for i in 0..zip.len() {
            let mut f = zip.by_index(i).unwrap();
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).unwrap();
            all.push((f.name().unwrap().into_owned(), bytes));
        }
        let manifest = String::from_utf8(all.remove(0).1).unwrap();
        (manifest, all)
    }

    #[test]
    fn a_package_per_change_list_in_order_with_every_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(&dir.path().join("s"), &StoreOptions::small()).unwrap();
        // Lists of 3 events: [a, a', b] [del a, c, b'] and the open [d].
        put(&store, "a", b"a1");
        put(&store, "a", b"a2");
        put(&store, "b", b"b1");
        delete(&store, "a");
        put(&store, "c", b"c1");
        put(&store, "b", b"b2");
        put(&store, "d", b"d1");
        let p = publisher(&store);
        let doc = p.change_dump("s").unwrap();
        let (document, _) = DocumentReader::new(&doc[..], ReadOptions::default()).unwrap().into_document().unwrap();
        let locs: Vec<&str> = document.entries.iter().map(|e| e.loc.as_str()).collect();
        assert_eq!(
            locs,
            [
                "http://t/sets/s/changedump-1.zip",
                "http://t/sets/s/changedump-2.zip",
                "http://t/sets/s/changedump-3-7.zip"
            ]
        );
        assert!(document.entries[0].md.as_ref().unwrap().length.is_none(), "closed packages are built on request");
        assert!(document.entries[2].md.as_ref().unwrap().length.is_some(), "the open cut is built with the document");

        let first = p.change_dump_file("s", 1, None, false).unwrap().unwrap();
        let (manifest, members) = open(&first.path);
        assert_eq!(
            members,
            [
                ("resources/1".into(), b"a1".to_vec()),
                ("resources/2".into(), b"a2".to_vec()),
                ("resources/3".into(), b"b1".to_vec())
            ]
        );
        assert!(manifest.contains("capability=\"changedump-manifest\"") && manifest.contains("until="), "{manifest}");
        let second = p.change_dump_file("s", 2, None, false).unwrap().unwrap();
        let (manifest, members) = open(&second.path);
        assert_eq!(members.len(), 2, "a deletion has no bitstream");
        let deleted = manifest.find("change=\"deleted\"").unwrap();
        assert!(deleted < manifest.find("http://t/r/s/c").unwrap(), "forward chronological order: {manifest}");
        assert!(!manifest[..manifest.find("http://t/r/s/c").unwrap()].contains("path="), "{manifest}");
        assert_eq!(p.change_dump_file("s", 3, None, false).unwrap().map(|f| f.path), None, "list 3 is open");
        assert!(p.change_dump_file("s", 3, Some(7), false).unwrap().is_some());

        // A new change: the open period is cut again, the old cut is kept for a download under way.
        put(&store, "e", b"e1");
        let doc = String::from_utf8(p.change_dump("s").unwrap()).unwrap();
        assert!(doc.contains("changedump-3-8.zip"), "{doc}");
        assert!(p.change_dump_file("s", 3, Some(7), false).unwrap().is_some());
    }
}
