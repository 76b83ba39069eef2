//! Helpers shared by the integration tests. Each test binary uses a subset.
#![allow(dead_code)]

pub mod http;
pub(crate) mod sim;
