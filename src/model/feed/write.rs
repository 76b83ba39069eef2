//! Writing feeds (stub until the writer lands).
use std::io::{self, Write};

use super::{FeedItem, FeedLink, Sharing};
use crate::model::W3cDateTime;

/// What an Atom feed says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedHead {
    /// Atom `<id>`.
    pub id: String,
    /// `<title>`.
    pub title: String,
    /// `<updated>`.
    pub updated: W3cDateTime,
    /// Feed links (`self`, RFC 5005 `next-archive`, `prev-archive`, `current`, …).
    pub links: Vec<FeedLink>,
    /// `sx:sharing` for the consumer this copy is for.
    pub sharing: Option<Sharing>,
    /// `<author><name>`.
    pub author: Option<String>,
}

/// Writes an Atom feed with FeedSync extensions, item by item.
pub struct AtomWriter<W: Write> {
    out: W,
}

impl<W: Write> AtomWriter<W> {
    /// Starts the feed.
    ///
    /// # Errors
    /// The writer's.
    pub fn new(out: W, _head: &FeedHead) -> io::Result<Self> {
        Ok(AtomWriter { out })
    }

    /// Writes one item as an Atom `<entry>` with its `sx:sync`.
    ///
    /// # Errors
    /// The writer's.
    pub fn item(&mut self, _item: &FeedItem) -> io::Result<()> {
        unimplemented!("writer")
    }

    /// Ends the feed.
    ///
    /// # Errors
    /// The writer's.
    pub fn finish(self) -> io::Result<W> {
        Ok(self.out)
    }
}

/// The item alone as a standalone XML document, with its `sx:sync`.
pub fn item_document(_item: &FeedItem) -> Vec<u8> {
    unimplemented!("writer")
}
