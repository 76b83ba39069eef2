//! Helpers shared by the integration tests. Each test binary uses a subset.
#![allow(dead_code, unreachable_pub)]

pub mod harness;
pub mod http;
pub(crate) mod publish;
pub mod rs;
pub(crate) mod service;
pub(crate) mod sim;
pub mod upstream;
pub(crate) mod zipkit;
