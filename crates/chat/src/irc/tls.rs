//! Dialling the server: TCP, or TLS with rustls (system roots, or a CA file
//! for a private network).

use std::{path::Path, sync::Arc, time::Duration};

use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};
use tokio_rustls::{TlsConnector, rustls};

/// A byte stream to the server, plain or TLS.
pub(super) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// TLS settings built once and shared by every connection.
#[derive(Clone)]
pub struct Tls {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// TLS could not be set up from the configuration (the caller names the
/// key, `chat.irc.ca_file`).
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("{path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("no usable system root certificates; give the server's CA certificate (PEM) here")]
    NoRoots,
}

impl Tls {
    /// Trusts the certificates in `ca_file` (PEM), or the system's roots.
    pub fn new(ca_file: Option<&Path>) -> Result<Self, TlsSetupError> {
        let mut roots = rustls::RootCertStore::empty();
        match ca_file {
            Some(path) => {
                let shown = path.display().to_string();
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                    .map_err(|e| TlsSetupError::CaFile {
                        path: shown.clone(),
                        reason: e.to_string(),
                    })?
                    .collect::<Result<_, _>>()
                    .map_err(|e| TlsSetupError::CaFile {
                        path: shown.clone(),
                        reason: e.to_string(),
                    })?;
                if certs.is_empty() {
                    return Err(TlsSetupError::CaFile {
                        path: shown,
                        reason: "no PEM certificates in the file".into(),
                    });
                }
                for cert in certs {
                    roots.add(cert).map_err(|e| TlsSetupError::CaFile {
                        path: shown.clone(),
                        reason: e.to_string(),
                    })?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                for cert in native.certs {
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(TlsSetupError::NoRoots);
                }
            }
        }
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

/// Connects to `host:port`, with TLS when `tls` is set.
pub(super) async fn dial(
    host: &str,
    port: u16,
    tls: Option<&Tls>,
    timeout: Duration,
) -> std::io::Result<Box<dyn Stream>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let timed_out = |what: &str| std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_owned());
    let tcp = tokio::time::timeout_at(deadline, TcpStream::connect((host, port)))
        .await
        .map_err(|_| timed_out("connect timed out"))??;
    tcp.set_nodelay(true)?;
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let stream = tokio::time::timeout_at(
        deadline,
        TlsConnector::from(tls.config.clone()).connect(name, tcp),
    )
    .await
    // A plain-text port waits for the client to speak first, so the
    // handshake never ends.
    .map_err(|_| {
        timed_out(
            "connected, but the TLS handshake timed out: is this port plain text? (check chat.irc.tls and chat.irc.port)",
        )
    })?
    .map_err(|e| refused_certificate(e, host))?;
    Ok(Box::new(stream))
}

/// Says why the server's certificate was refused and what to change, in
/// place of rustls's variant name (`invalid peer certificate: UnknownIssuer`).
fn refused_certificate(e: std::io::Error, host: &str) -> std::io::Error {
    use rustls::CertificateError as Cert;
    let Some(rustls::Error::InvalidCertificate(cert)) =
        e.get_ref().and_then(|inner| inner.downcast_ref())
    else {
        return e;
    };
    let why = match cert {
        Cert::UnknownIssuer => "it is not signed by an authority this host trusts; if the server uses a private CA, give that CA's certificate (PEM) in chat.irc.ca_file".to_owned(),
        Cert::NotValidForName | Cert::NotValidForNameContext { .. } => {
            format!("it is not made out to {host}; set chat.irc.host to a name the certificate carries")
        }
        Cert::Expired | Cert::ExpiredContext { .. } => {
            "it has expired; the server's operator must renew it".to_owned()
        }
        Cert::NotValidYet | Cert::NotValidYetContext { .. } => {
            "it is not valid yet; check this host's clock".to_owned()
        }
        Cert::Revoked => "it has been revoked".to_owned(),
        other => format!("{other:?}"),
    };
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("the IRC server's TLS certificate was refused: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IRC port without TLS says nothing until the client does: dialling
    /// it with TLS says the handshake is what timed out, and where to look.
    #[tokio::test]
    async fn tls_to_a_plain_text_port_names_the_setting() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let silent = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(socket);
        });
        // No roots needed: the handshake never gets as far as the certificate.
        let tls = Tls {
            config: Arc::new(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            ),
        };
        let Err(e) = dial("127.0.0.1", port, Some(&tls), Duration::from_millis(300)).await else {
            panic!("a TLS handshake with a silent server succeeded");
        };
        let message = e.to_string();
        assert!(
            message.contains("TLS handshake timed out") && message.contains("chat.irc.tls"),
            "{message}"
        );
        silent.abort();
    }

    /// rustls's verdicts on a certificate become what to change, naming the
    /// setting; other errors pass through as they were.
    #[test]
    fn a_refused_certificate_names_what_to_change() {
        let refused = |cert| {
            let e = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(cert),
            );
            refused_certificate(e, "irc.example.org").to_string()
        };
        let unknown = refused(rustls::CertificateError::UnknownIssuer);
        assert!(
            unknown.contains("not signed by an authority") && unknown.contains("chat.irc.ca_file"),
            "{unknown}"
        );
        let name = refused(rustls::CertificateError::NotValidForName);
        assert!(
            name.contains("not made out to irc.example.org") && name.contains("chat.irc.host"),
            "{name}"
        );
        assert!(refused(rustls::CertificateError::Expired).contains("expired"));
        let other = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(refused_certificate(other, "h").to_string(), "reset");
    }
}
