//! The web layer's error type and its mapping to HTTP. Library errors stay typed up to here;
//! this is the one place that decides a status code and what a client is told. Store and
//! internal failures are logged once, here, and answered with a generic 500 so no internal
//! detail (paths, database messages) leaks to clients.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::publish::PublishError;
use crate::store::StoreError;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum WebError {
    /// Nothing is served at this URI.
    #[error("{0}")]
    NotFound(String),
    /// The resource existed and was deleted.
    #[error("{0}")]
    Gone(String),
    /// The request itself is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// Only GET and HEAD are served.
    #[error("method not allowed; use GET or HEAD")]
    MethodNotAllowed,
    /// Producing the answer failed.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// Reading the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A blocking task panicked or was cancelled.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<tokio::task::JoinError> for WebError {
    fn from(e: tokio::task::JoinError) -> Self {
        WebError::Internal(e.to_string())
    }
}

impl WebError {
    fn status(&self) -> StatusCode {
        match self {
            WebError::NotFound(_) | WebError::Publish(PublishError::UnknownSet(_) | PublishError::DumpsOff) => {
                StatusCode::NOT_FOUND
            }
            WebError::Gone(_) => StatusCode::GONE,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// `r` with `Connection: close`, for an answer sent before the request's body was read whole:
/// the server closes the connection after it, and the header tells a client that pools
/// connections not to send its next request down this one (it would meet a broken pipe).
pub(super) fn closing(mut r: Response) -> Response {
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = if status.is_server_error() {
            tracing::error!(error = %crate::error::chain(&self), "request failed");
            "internal error; the details are in the server log".to_owned()
        } else {
            self.to_string()
        };
        let mut r = (status, format!("{message}\n")).into_response();
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        if status == StatusCode::METHOD_NOT_ALLOWED {
            h.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        r
    }
}
