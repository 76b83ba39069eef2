//! Parked origins on the harvester's side: the fetcher parks an origin that answers `429` or
//! `503` with `Retry-After` and sends nothing there until then; the harvester keeps those
//! parks in the store, so that a restart, the next `harvest` or the next poll honours them
//! too, and tells which sources cannot be polled while one lasts.
//!
//! The seam between the two: [`Keeper::start`] hands the fetcher the parks the store kept
//! and saves the fetcher's parks each time a new one is set; [`Keeper::finish`] saves them a
//! last time. [`blocking`] is the park that keeps a source from being polled at all.

use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::ctx::join_error;
use crate::config::Source;
use crate::fetch::{Fetcher, Park};
use crate::model::W3cDateTime;
use crate::store::{ParkedOrigin, SourceState, Store, StoreError};

/// Keeps the fetcher's parks in the store while a pass or the service runs.
pub(crate) struct Keeper {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Keeper {
    /// Restores the parks the store kept into `fetcher`, then saves its parks at each change.
    pub(crate) async fn start(store: &Store, fetcher: &Fetcher) -> Keeper {
        restore(store, fetcher).await;
        let (stop, mut stopped) = oneshot::channel();
        let (store, fetcher) = (store.clone(), fetcher.clone());
        let mut changes = fetcher.watch_parks();
        changes.mark_unchanged();
        let task = tokio::spawn(async move {
            // Ends at `finish` (or when the Keeper is dropped): the fetcher's sender never closes.
            loop {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    _ = &mut stopped => break,
                }
                save(&store, &fetcher).await;
            }
            save(&store, &fetcher).await;
        });
        Keeper { stop, task }
    }

    /// Saves the parks a last time and stops.
    pub(crate) async fn finish(self) {
        let _ = self.stop.send(());
        if let Err(e) = self.task.await {
            tracing::error!(error = %crate::error::chain(&e), "the task keeping parked origins failed");
        }
    }
}

async fn restore(store: &Store, fetcher: &Fetcher) {
    let (s, f) = (store.clone(), fetcher.clone());
    let restored = tokio::task::spawn_blocking(move || honour_parks(&s, &f)).await.map_err(join_error);
    if let Err(e) = restored.and_then(|r| r) {
        tracing::error!(error = %crate::error::chain(&e), "cannot read the parked origins: none are honoured");
    }
}

/// Hands `fetcher` the parks kept in `store` that have not ended, so that it sends nothing to
/// those origins before their time: for commands that fetch without harvesting (`serve`'s
/// origin checks, `provenance --verify`). Blocking: it reads the store.
///
/// # Errors
/// [`StoreError`] when the rows cannot be read.
pub fn honour_parks(store: &Store, fetcher: &Fetcher) -> Result<(), StoreError> {
    let now = W3cDateTime::now();
    let parks = store.parked_origins()?.into_iter().filter(|(_, until)| *until > now).map(|(origin, until)| {
        tracing::info!(host = %origin, until = %until, "origin parked: it asked us to wait until then");
        Park { origin, until: system_time(&until) }
    });
    fetcher.restore_parks(parks.collect::<Vec<_>>());
    Ok(())
}

async fn save(store: &Store, fetcher: &Fetcher) {
    let parks: Vec<(String, W3cDateTime)> =
        fetcher.parks().into_iter().filter_map(|p| Some((p.origin, w3c(p.until)?))).collect();
    let s = store.clone();
    let saved = tokio::task::spawn_blocking(move || s.save_parked_origins(&parks)).await.map_err(join_error);
    if let Err(e) = saved.and_then(|r| r) {
        tracing::error!(error = %crate::error::chain(&e), "cannot save the parked origins: a restart would forget them");
    }
}

/// A park time as the store keeps it: whole seconds, rounded up, so that nobody comes back
/// a moment early.
pub(crate) fn w3c(t: SystemTime) -> Option<W3cDateTime> {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    W3cDateTime::from_unix(i64::try_from(secs).ok()?, 0).ok()
}

fn system_time(t: &W3cDateTime) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(t.unix_timestamp()).unwrap_or(0))
}

/// The park that keeps `source` from being polled now: of the origin of a URL a poll starts
/// from (a configured URL, the Resource List or Change List discovery found), the one that
/// ends last, when it ends later than the source's `max_backoff` from now (a shorter park the
/// fetcher waits out).
pub(crate) fn blocking(fetcher: &Fetcher, source: &Source, state: &SourceState) -> Option<ParkedOrigin> {
    let configured = source.feed.iter().flat_map(|f| f.urls.iter()).chain([&source.url]).cloned();
    let caps = state.capabilities.as_ref();
    let found = [caps.and_then(|c| c.resource_list.as_ref()), caps.and_then(|c| c.change_list.as_ref())];
    let found = found.into_iter().flatten().filter_map(|u| url::Url::parse(u).ok());
    let horizon = SystemTime::now() + source.settings.max_backoff;
    configured
        .chain(found)
        .filter_map(|u| fetcher.parked_until(&u).map(|until| (u, until)))
        .filter(|(_, until)| *until > horizon)
        .max_by_key(|(_, until)| *until)
        .and_then(|(u, until)| Some(ParkedOrigin { origin: u.origin().ascii_serialization(), until: w3c(until)? }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn park_times_round_up_to_the_second() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(w3c(t).unwrap().unix_timestamp(), 2);
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(7);
        assert_eq!(system_time(&w3c(whole).unwrap()), whole);
    }
}
