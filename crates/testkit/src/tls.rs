//! Throwaway TLS material for the test servers, and the client side that trusts it.
//!
//! At server start the kit makes a fresh CA and a server certificate for `127.0.0.1` and
//! `localhost` (ECDSA P-256, via `rcgen`), writes them as PEM files into the server's
//! scratch dir, and keeps the CA certificate so [`crate::Human`] (or the code under test,
//! through [`crate::IrcServer::ca_pem_path`]) can verify the server. rustls runs with the
//! aws-lc-rs crypto provider, passed explicitly so the process-wide default does not matter.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};

/// File names inside the server's scratch dir.
const CA_FILE: &str = "ca.pem";
const CERT_FILE: &str = "server-cert.pem";
const KEY_FILE: &str = "server-key.pem";
const DH_FILE: &str = "dhparams.pem";

/// RFC 7919 `ffdhe2048`, so GnuTLS servers never generate DH parameters at start-up
/// (ngIRCd does that when `DHFile` is unset, which costs 0.1-0.4 s per start).
const FFDHE2048_PEM: &str = include_str!("../irc/ffdhe2048.pem");

/// PEM files of one server's TLS setup, plus the CA in DER for the client side.
#[derive(Debug, Clone)]
pub(crate) struct TlsFiles {
    pub(crate) ca_pem: PathBuf,
    pub(crate) cert_pem: PathBuf,
    pub(crate) key_pem: PathBuf,
    pub(crate) dh_pem: PathBuf,
    pub(crate) ca_der: CertificateDer<'static>,
}

impl TlsFiles {
    /// Generates a CA and a server certificate for `127.0.0.1`/`localhost` and writes
    /// them (and the DH parameters) into `dir`.
    pub(crate) fn generate(dir: &Path) -> TlsFiles {
        let ca_key = KeyPair::generate().expect("generate CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "switchboard-testkit throwaway CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).expect("self-sign CA");
        let issuer = Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate().expect("generate server key");
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .expect("server cert params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer).expect("sign server cert");

        let files = TlsFiles {
            ca_pem: dir.join(CA_FILE),
            cert_pem: dir.join(CERT_FILE),
            key_pem: dir.join(KEY_FILE),
            dh_pem: dir.join(DH_FILE),
            ca_der: ca_cert.der().clone(),
        };
        write(&files.ca_pem, &ca_cert.pem());
        write(&files.cert_pem, &cert.pem());
        write(&files.key_pem, &key.serialize_pem());
        write(&files.dh_pem, FFDHE2048_PEM);
        files
    }
}

fn write(path: &Path, contents: &str) {
    std::fs::write(path, contents)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// A TLS connector that trusts exactly `ca` (and no system roots).
pub(crate) fn connector(ca: &CertificateDer<'static>) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).expect("add test CA to root store");
    let config =
        ClientConfig::builder_with_provider(Arc::new(crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("rustls protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}
