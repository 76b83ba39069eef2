//! The origin of a harvested record: where a ResourceSync `via` should point. A record from
//! a repository that made it is its own origin (its GetRecord URL there). A record from an
//! aggregator — another Tributary's OAI-PMH endpoint, or any provider that fills in the
//! provenance container — carries `originDescription`s, and the innermost one names the
//! repository the record came from first: the origin is its GetRecord URL, as `via` chains
//! keep the original Source across ResourceSync aggregators.

use url::Url;

use super::request::get_record_url;
use crate::model::oai::read_stored;

/// The origin URI of the record stored as `document`, harvested in `prefix`; `harvested_at`
/// (the record's GetRecord URL at the repository harvested) when it names no other.
///
/// Only a record holding an `originDescription` is read again, to find it: reading every
/// record's document a second time cost a baseline harvest a tenth of its CPU.
pub(super) fn origin(document: &[u8], prefix: &str, harvested_at: &Url) -> String {
    if memchr::memmem::find(document, b"originDescription").is_none() {
        return harvested_at.to_string();
    }
    let Some(first) = read_stored(document).and_then(|r| r.origin) else { return harvested_at.to_string() };
    let o = first.innermost();
    match Url::parse(o.base_url.trim()) {
        Ok(base) if matches!(base.scheme(), "http" | "https") && !o.identifier.is_empty() => {
            get_record_url(&base, prefix, o.identifier.trim()).to_string()
        }
        _ => harvested_at.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_origin_description_is_the_origin() {
        let at =
            Url::parse("http://b.example/oai?verb=GetRecord&metadataPrefix=oai_dc&identifier=oai%3Ab%3A1").unwrap();
        let plain = br#"<record xmlns="http://www.openarchives.org/OAI/2.0/"><header><identifier>oai:b:1</identifier><datestamp>2020-01-01</datestamp></header></record>"#;
        assert_eq!(origin(plain, "oai_dc", &at), at.as_str());
        let nested = br#"<record xmlns="http://www.openarchives.org/OAI/2.0/"><header><identifier>oai:b:1</identifier><datestamp>2020-01-01</datestamp></header><about><provenance xmlns="http://www.openarchives.org/OAI/2.0/provenance"><originDescription harvestDate="2020-01-01" altered="false"><baseURL>http://a.example/oai</baseURL><identifier>oai:a:1</identifier><datestamp>2020-01-01</datestamp><metadataNamespace>n</metadataNamespace><originDescription harvestDate="2019-01-01" altered="false"><baseURL>http://o.example/oai</baseURL><identifier>oai:o:1 x</identifier><datestamp>2019-01-01</datestamp><metadataNamespace>n</metadataNamespace></originDescription></originDescription></provenance></about></record>"#;
        assert_eq!(
            origin(nested, "oai_dc", &at),
            "http://o.example/oai?verb=GetRecord&metadataPrefix=oai_dc&identifier=oai%3Ao%3A1+x"
        );
    }
}
