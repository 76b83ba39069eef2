//! The publisher's view of `sources.toml`: one set per source plus the merged sets, each
//! source's inherited-link policy, and the shape of the lists. The publisher's own types stay
//! plain values (tests and benchmarks build them directly); this is the one place that maps
//! the configuration onto them.

use super::{DumpLimits, Limits, LinkPolicies, LinkPolicy, Rollover, SetConfig};
use crate::config::{Config, Settings};
use crate::store::{Store, StoreError};

impl SetConfig {
    /// Every set `config` names: one per source (in order), then the merged sets.
    pub fn from_config(config: &Config) -> Vec<SetConfig> {
        let merged = config.sets.iter().map(|s| SetConfig::new(s.id.clone(), s.sources.clone()));
        SetConfig::all(config.sources.iter().map(|s| s.id.clone()), merged)
    }

    /// Every set to publish over `store`: those of [`SetConfig::from_config`], plus the set of
    /// each source no longer configured that the store still holds (its records stay
    /// published until `tributary source forget` deletes them), before the merged sets.
    ///
    /// # Errors
    /// When the store's source states cannot be read.
    pub fn published(config: &Config, store: &Store) -> Result<Vec<SetConfig>, StoreError> {
        let mut sets = SetConfig::from_config(config);
        let merged = sets.split_off(config.sources.len());
        for (id, _) in store.source_states()? {
            if config.source(&id).is_none() {
                sets.push(SetConfig::source(id));
            }
        }
        sets.extend(merged);
        Ok(sets)
    }
}

impl LinkPolicy {
    /// The policy of `keep_links` / `drop_links` (relation types compare lowercase).
    pub fn from_settings(s: &Settings) -> LinkPolicy {
        LinkPolicy {
            keep: s.keep_links.iter().map(|r| r.to_ascii_lowercase()).collect(),
            drop: s.drop_links.iter().map(|r| r.to_ascii_lowercase()).collect(),
        }
    }
}

impl LinkPolicies {
    /// `[defaults]` for sources no longer configured, each source's own settings otherwise.
    pub fn from_config(config: &Config) -> LinkPolicies {
        LinkPolicies {
            default: LinkPolicy::from_settings(&config.defaults),
            per_source: config.sources.iter().map(|s| (s.id.clone(), LinkPolicy::from_settings(&s.settings))).collect(),
        }
    }
}

impl Limits {
    /// The `[publish]` table.
    pub fn from_config(config: &Config) -> Limits {
        let p = &config.publish;
        Limits {
            resource_list_entries: p.resource_list_entries,
            change_list: Rollover { max_events: p.change_list_events, period: p.change_list_period },
            dump: DumpLimits {
                package_entries: p.dump_package_entries,
                package_bytes: p.dump_package_size,
                max_age: p.dump_max_age,
            },
            dumps: p.dumps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
[aggregator]
base_url = "http://agg.example/"
user_agent = "Tributary-test (+mailto:ops@example.org)"
[defaults]
keep_links = ["describedby"]
[[source]]
id = "a"
url = "http://a.example/"
keep_links = ["Alternate"]
[[source]]
id = "b"
url = "http://b.example/"
[[set]]
id = "all"
sources = ["a", "b"]
"#;

    #[test]
    fn sets_policies_and_limits_follow_the_configuration() {
        let config = Config::parse(TOML, "sources.toml".as_ref(), None).unwrap();
        let ids: Vec<String> = SetConfig::from_config(&config).into_iter().map(|s| s.id).collect();
        assert_eq!(ids, ["a", "b", "all"]);
        let p = LinkPolicies::from_config(&config);
        assert!(p.for_source("a").keep.contains("alternate"), "lowercased");
        assert!(p.for_source("b").keep.contains("describedby") && !p.for_source("b").keep.contains("alternate"));
        assert_eq!(p.for_source("gone"), &p.default);
        assert_eq!(Limits::from_config(&config).resource_list_entries, config.publish.resource_list_entries);
    }
}
