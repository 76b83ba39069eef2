//! The errors that stop reading a document, each with the document's name and position.

use std::io;

use super::position::Position;

/// A document could not be read (as opposed to a [`Diagnostic`](super::Diagnostic), which is
/// reported while reading goes on).
///
/// Its message names the document, the position and the kind of failure on one line
/// (`list.xml:3:7: malformed XML: … (byte 92)`), so its `source()` is the kind's own cause,
/// not the kind again.
#[derive(Debug)]
pub struct ReadError {
    /// URL or path of the document.
    pub document: String,
    /// Where reading stopped.
    pub position: Position,
    /// What went wrong.
    pub kind: ReadErrorKind,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {} (byte {})", self.document, self.position, self.kind, self.position.offset)
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.kind)
    }
}

/// What stopped reading a document.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadErrorKind {
    /// The underlying reader failed.
    #[error("read failed")]
    Io(#[source] io::Error),
    /// The XML is not well-formed.
    #[error("malformed XML: {0}")]
    Malformed(String),
    /// The input ended before the root element closed.
    #[error("document is truncated: input ended with {depth} element(s) still open{}", detail_suffix(.detail))]
    Truncated {
        /// Parser detail, if any.
        detail: Option<String>,
        /// How many elements were open.
        depth: usize,
    },
    /// There is no root element at all.
    #[error("empty document: no root element")]
    Empty,
    /// Something other than whitespace, comments or PIs precedes the root.
    #[error("unexpected content before the root element")]
    ContentBeforeRoot,
    /// Something other than whitespace, comments or PIs follows the root.
    #[error("unexpected content after the root element closed")]
    ContentAfterRoot,
    /// A DOCTYPE declaration (refused: external entities and entity expansion attacks).
    #[error(
        "DOCTYPE declarations are not allowed in ResourceSync documents (refused to guard against XXE and entity expansion)"
    )]
    Doctype,
    /// An entity reference other than the five predefined ones or a character reference.
    #[error("undefined entity reference {0} (only &lt; &gt; &amp; &apos; &quot; and character references are allowed)")]
    UndefinedEntity(String),
    /// The root element is not `<urlset>` or `<sitemapindex>`.
    #[error("root element <{0}> is not a Sitemap <urlset> or <sitemapindex>")]
    NotSitemap(String),
    /// The root element is not in the Sitemap namespace.
    #[error("<{element}> is in namespace {} but must be in http://www.sitemaps.org/schemas/sitemap/0.9", .found.as_deref().unwrap_or("(none)"))]
    WrongNamespace {
        /// The root element's local name.
        element: &'static str,
        /// The namespace it was in.
        found: Option<String>,
    },
    /// More bytes than allowed.
    #[error("document exceeds the limit of {0} bytes")]
    TooLarge(u64),
    /// More entries than allowed.
    #[error("document has more than {0} entries")]
    TooManyEntries(usize),
    /// Elements nested deeper than allowed.
    #[error("elements nested deeper than {0} levels")]
    TooDeep(usize),
}

fn detail_suffix(detail: &Option<String>) -> String {
    detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default()
}
