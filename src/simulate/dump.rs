//! The optional Resource Dump (§11): ZIP packages, each holding a Resource Dump Manifest as
//! `manifest.xml` plus the bitstreams at the manifest's `path`s.
//!
//! A Resource Dump states each package's length and hash, so packages must exist before the
//! dump document can be written. A build is made from one snapshot (a clone of the resource
//! records, taken under the read lock and released before any bytes are generated), named by
//! the state's generation, and its package URLs carry that generation: a Destination that read
//! the dump gets exactly the packages it describes even after the Source has moved on. The
//! cost is memory for the packages of the few most recent builds (see `Simulator`).

use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::SimError;
use super::clock::to_datetime;
use super::content::Digests;
use super::render::{self, Site, target_path};
use super::state::{self, Listed, Resource};
use crate::model::{Capability, Entry, Link, Md};

/// One package: the ZIP and, separately, the manifest it contains.
#[derive(Debug)]
pub(crate) struct Package {
    pub(crate) zip: Vec<u8>,
    pub(crate) manifest: Vec<u8>,
}

/// A Resource Dump of one generation of the resource set.
#[derive(Debug)]
pub(crate) struct DumpBuild {
    pub(crate) generation: u64,
    pub(crate) document: Vec<u8>,
    pub(crate) packages: Vec<Package>,
}

/// What a build needs from the state, copied out under the lock.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) generation: u64,
    pub(crate) at_ms: i64,
    pub(crate) resources: Vec<(u64, Resource)>,
}

/// Path of package `k` of generation `generation`.
pub(crate) fn package_path(generation: u64, k: usize) -> String {
    format!("/resourcedump/{generation}/{k}.zip")
}

/// Path of the manifest of package `k` of generation `generation`.
pub(crate) fn manifest_path(generation: u64, k: usize) -> String {
    format!("/resourcedump/{generation}/{k}-manifest.xml")
}

/// Builds every package and the dump document. Packages hold up to `ids_per_part` ids each,
/// so a manifest never exceeds the list limit.
///
/// # Errors
/// [`SimError::Dump`] when the ZIP writer fails (it writes to memory, so only on a bug).
pub(crate) fn build(site: &Site, snap: &Snapshot) -> Result<DumpBuild, SimError> {
    let per = site.config.ids_per_part() as usize;
    let mut packages = Vec::new();
    for chunk in snap.resources.chunks(per.max(1)) {
        packages.push(package(site, snap.at_ms, chunk)?);
    }
    let entries = packages.iter().enumerate().map(|(i, p)| package_entry(site, snap, i + 1, p));
    let document = render::write(&site.dump_header(Capability::ResourceDump, snap.at_ms), entries);
    Ok(DumpBuild { generation: snap.generation, document, packages })
}

fn package(site: &Site, at_ms: i64, chunk: &[(u64, Resource)]) -> Result<Package, SimError> {
    let listed: Vec<(Listed, &Resource)> =
        chunk.iter().flat_map(|(id, r)| state::listed_of(*id, r).map(move |l| (l, r))).collect();
    let entries = listed.iter().map(|(l, _)| {
        let mut e = site.resource_entry(l);
        if let Some(md) = e.md.as_mut() {
            md.path = Some(target_path(l.target));
        }
        e
    });
    let manifest = render::write(&site.dump_header(Capability::ResourceDumpManifest, at_ms), entries);
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file("manifest.xml", options(at_ms))?;
    zip.write_all(&manifest).map_err(|e| SimError::Dump(e.to_string()))?;
    for (l, r) in &listed {
        let body = state::body(&site.config, l.target, r).unwrap_or_default();
        // ZIP entry names are relative; the manifest's `path` is the same with a leading `/`.
        zip.start_file(target_path(l.target).trim_start_matches('/'), options(l.lastmod_ms))?;
        zip.write_all(&body).map_err(|e| SimError::Dump(e.to_string()))?;
    }
    let zip = zip.finish()?.into_inner();
    Ok(Package { zip, manifest })
}

fn package_entry(site: &Site, snap: &Snapshot, k: usize, p: &Package) -> Entry {
    let digests = Digests::of(&p.zip);
    let mut e = Entry::new(site.url(&package_path(snap.generation, k)));
    e.md = Some(Md {
        hash: Some(digests.hash_list()),
        length: Some(digests.length),
        media_type: Some("application/zip".into()),
        at: Some(to_datetime(snap.at_ms)),
        ..Md::default()
    });
    let mut contents = Link::new("contents", site.url(&manifest_path(snap.generation, k)));
    contents.media_type = Some("application/xml".into());
    e.links.push(contents);
    e
}

/// Stored (uncompressed) entries with the bitstream's own modification time, so the same
/// snapshot always gives the same ZIP bytes.
fn options(ms: i64) -> SimpleFileOptions {
    let t = to_datetime(ms).utc();
    let time = zip::DateTime::from_date_and_time(
        t.year().clamp(1980, 2107) as u16,
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    )
    .unwrap_or_default();
    SimpleFileOptions::default().compression_method(CompressionMethod::Stored).last_modified_time(time)
}

impl From<zip::result::ZipError> for SimError {
    fn from(e: zip::result::ZipError) -> Self {
        SimError::Dump(e.to_string())
    }
}
