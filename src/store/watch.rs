//! Listeners told when readers may see new change events, so a reader that follows the change
//! log (the notifier of Tributary's own change notifications) wakes up at once instead of
//! polling. The store stays free of any async runtime: a listener is a plain callback, run on
//! the flushing thread, and must only signal (e.g. wake a task), never block or call the store.

use std::sync::{Arc, RwLock};

use super::Store;

/// A callback run after a flush made new change events visible.
pub type Listener = Arc<dyn Fn() + Send + Sync>;

/// The registered listeners.
#[derive(Default)]
pub(super) struct Listeners(RwLock<Vec<Listener>>);

impl Listeners {
    pub(super) fn call(&self) {
        let all = self.0.read().unwrap_or_else(|p| p.into_inner());
        for f in all.iter() {
            f();
        }
    }
}

impl Store {
    /// Registers `listener`, called (on the flushing thread) every time a flush makes change
    /// events visible to readers; it must return quickly. Listeners live as long as the store.
    pub fn on_visible(&self, listener: Listener) {
        self.inner.listeners.0.write().unwrap_or_else(|p| p.into_inner()).push(listener);
    }
}
