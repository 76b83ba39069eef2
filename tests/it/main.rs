//! Tributary's integration tests, as one test binary. Each module was once a file of its own
//! under `tests/`, and so a binary of its own that relinked the whole dependency graph; as
//! modules of one crate they link once, share `support` without copies, and still run by
//! name (`cargo test --test it -- store_crash::`).

/// The allocator the `tributary` binary ships with, so that what the tests see (and the
/// figures `store_perf` prints) is what the binary does. One per binary, hence here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod support;

mod alerts;
mod audit;
mod cli_check;
mod cli_harvest;
mod cli_resume;
mod cli_serve;
mod cli_shard;
mod config;
mod control;
mod dashboard_browser;
mod dashboard_sources;
mod deletions;
mod demo_shards;
mod discover;
mod dump;
mod dump_interop;
mod feed_merge;
mod feed_model;
mod fetch;
mod fetch_politeness;
mod harvest;
mod harvest_change_dump;
mod harvest_failures;
mod harvest_faults;
mod harvest_feed;
mod harvest_hosts;
mod harvest_oai;
mod harvest_resource_dump;
mod harvest_resume;
mod harvest_wild;
mod hostile;
mod interop_resync;
mod model_hostile;
mod model_roundtrip;
mod model_spec_examples;
mod model_split;
mod notify_hub;
mod notify_interop;
mod operations;
mod powercut_fs;
mod publish_bitstreams;
mod publish_chain;
mod publish_documents;
mod publish_dumps;
mod publish_feed;
mod publish_feed_provenance;
mod publish_links;
mod publish_provenance;
mod publish_resync;
mod push_chain;
mod push_subscribe;
mod serve_oai;
mod simulate;
mod simulate_push;
mod store;
mod store_crash;
mod store_export;
mod store_history;
mod store_open;
mod store_perf;
mod store_powercut;
mod store_powercut_import;
mod store_s3;
