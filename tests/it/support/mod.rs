//! What the tests share: servers that play upstreams, Tributary's own server and process, a
//! harvester in process, stores in temporary directories, documents written as text. One
//! copy of each, so a fix to a helper reaches every test that uses it.

pub(crate) mod cli;
pub(crate) mod digest;
pub(crate) mod feeds;
pub(crate) mod fetcher;
pub(crate) mod harness;
pub(crate) mod http;
pub(crate) mod net;
pub(crate) mod oai;
pub(crate) mod powercut;
pub(crate) mod publish;
pub(crate) mod push;
pub(crate) mod rng;
pub(crate) mod rs;
pub(crate) mod s3;
pub(crate) mod service;
pub(crate) mod sim;
pub(crate) mod store;
pub(crate) mod subscriber;
pub(crate) mod tls;
pub(crate) mod tools;
pub(crate) mod upstream;
pub(crate) mod zipkit;
