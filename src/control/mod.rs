//! The control channel: how the command line steers a running `tributary run` or `serve`.
//!
//! The store admits one process, so while the service runs, every command that reads or
//! changes the store asks the service to do it instead, over a Unix socket in the data
//! directory (`control.sock`). The CLI stays the one interface: `tributary failures` prints
//! the same text, JSON and exit status whether it read a stopped store itself or had the
//! running service read it — both run the same function in [`commands`], writing to an [`Out`].
//! Only what needs a harvester (`poll`, `pause`, `resume`, `reload`) exists online only.
//!
//! # Architecture
//! - `wire`: the request line and the answer's frames (pure `std::io`).
//! - `server`: the socket, made owner-only without a window, and a thread per command.
//! - `client`: finding the service of a data directory and relaying its answer.
//! - [`commands`]: the commands' bodies, shared by both ends.
//! - `service`: the service's [`Handler`](server::Handler), over its store, harvester and
//!   publisher; the reload of the configuration lives here.
//!
//! Sits above `harvest`, `publish` and `web` (it steers them) and below `main`.

pub mod client;
pub mod commands;
mod server;
mod service;
pub mod wire;

use std::path::PathBuf;

pub use commands::{CommandError, Console, Out};
pub use server::{ControlSocket, Handler, Reply};
pub use service::{ReloadFrom, Service};

/// Why the control channel could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The service could not make its socket.
    #[error("cannot make the control socket {}", path.display())]
    Bind {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A command could not reach the service.
    #[error("cannot talk to the running service through {}", path.display())]
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The service closed the connection before the command ended: it was stopped.
    #[error("the service stopped before the command finished ({})", path.display())]
    Cut {
        /// The socket's path.
        path: PathBuf,
    },
    /// The command's output could not be written here.
    #[error("cannot write the output: {0}")]
    Output(String),
}
