//! The polite HTTP client: every request Tributary sends goes out through [`Fetcher`] — the
//! harvester's, the provenance command's live origin check, `tributary check` on a URL and
//! the web server's `&verify=1` alike — so no request escapes the limits an operator set.
//!
//! # Architecture
//! - `client`: [`Fetcher`], the one place a `reqwest::Client` is built; a request walks its
//!   redirects itself so each hop is checked, and retries what is worth retrying.
//! - `request`: one attempt — the SSRF guard, robots.txt, the host's turn, the request with a
//!   header deadline, the response sorted into success, 304 or a typed error.
//! - `host`: per-host politeness — a governor rate limit and a concurrency cap (per origin, or
//!   shared by the origins of one address under `politeness = "ip"`), backoff with jitter,
//!   robots.txt's `Crawl-delay` — and the counters behind the dashboard.
//! - `launch`: when a request leaves (on a new connection, once its answer begins), so a host's
//!   rate holds as its server sees the requests arrive, not only as turns are given out.
//! - `park`: origins parked by their `Retry-After`; the caller keeps them across restarts
//!   ([`Fetcher::restore_parks`], [`Fetcher::parks`]).
//! - `robots`: robots.txt, fetched once per host and cached (texting_robots).
//! - `guard`: the SSRF policy — which addresses a name may resolve to — enforced in the DNS
//!   resolver, so a redirect or a DNS answer cannot lead to a private address either.
//! - `body`: reading a body within its size, idle, throughput and total limits, decoding gzip
//!   and refusing bombs; a body cut short is an error, never a shorter document.
//! - `error`: [`FetchError`], one type for every way a request can fail.
//! - `form`: form POSTs to a WebSub hub (subscribe, unsubscribe), under the same guard.
//! - `metrics`: which source a request counts for on `/metrics`.
//! - `outbound`: requests to endpoints that asked for them (WebSub callbacks, an external
//!   hub): the same SSRF guard, no robots.txt, no redirects, one deadline.
//!
//! Depends on [`crate::config`] (the per-source [`Settings`](crate::config::Settings)) only;
//! knows nothing of ResourceSync, the store or the harvester.

mod body;
mod client;
mod error;
mod form;
mod guard;
mod host;
mod launch;
mod metrics;
mod outbound;
mod park;
mod request;
mod robots;

pub use client::{Document, FetchResponse, Fetched, Fetcher, FetcherOptions, MAX_REDIRECTS, ProxyChoice, Validators};
pub use error::{FetchError, Phase};
pub use form::FormAnswer;
pub use guard::non_public_reason;
pub use host::{HostCounters, HostSnapshot};
pub use metrics::{in_source, inherit};
pub use outbound::{Outbound, OutboundOptions, Reply};
pub use park::Park;
pub use robots::RobotsStatus;
