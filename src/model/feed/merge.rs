//! FeedSync merge (stub until it lands).
use super::{FeedItem, History};
use crate::model::W3cDateTime;

/// The outcome of merging an incoming item into the local state (§3.3).
#[derive(Debug, Clone, PartialEq)]
pub enum Merged {
    /// No local item had this sync id: the incoming item is added as it is.
    New(FeedItem),
    /// The local item already holds everything the incoming one says.
    Unchanged,
    /// The merge result: the winner, with `sx:conflicts` as §3.3 steps 10–11 say.
    Changed(FeedItem),
}

/// §3.3 for one incoming item.
pub fn merge(_local: Option<&FeedItem>, _incoming: &FeedItem) -> Merged {
    unimplemented!("merge")
}

/// History subsumption (§3.3 note 2).
pub fn history_subsumed(_hx: &History, _hy: &History) -> bool {
    unimplemented!("merge")
}

/// Item subsumption (§3.3 note 1).
pub fn item_subsumed(_x: &FeedItem, _y: &FeedItem) -> bool {
    unimplemented!("merge")
}

/// Winner picking (§3.3 note 3): the winning item of two with the same sync id.
pub fn winner<'a>(_x: &'a FeedItem, _y: &'a FeedItem) -> &'a FeedItem {
    unimplemented!("merge")
}

/// §3.1/§3.2: an update (or deletion) of `item` made by endpoint `by` at `when`.
pub fn local_update(_item: &mut FeedItem, _by: &str, _when: W3cDateTime, _deleted: bool) {
    unimplemented!("merge")
}
