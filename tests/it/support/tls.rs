//! HTTPS for test upstreams: a certificate for 127.0.0.1 made for the test, which the
//! `tributary` binary trusts when its `SSL_CERT_FILE` names the PEM file (rustls-native-certs
//! reads it in place of the system's store). The fetcher in process keeps trusting only the
//! system's store, so these serve the binary only.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::upstream::Tls;

/// A self-signed certificate for 127.0.0.1, written to `pem` for the client to trust, and the
/// server side of it, stalling each connection `stall` before the handshake.
pub(crate) fn localhost(pem: &Path, stall: Duration) -> Tls {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    std::fs::write(pem, cert.pem()).unwrap();
    let key = tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    Tls { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), stall }
}
