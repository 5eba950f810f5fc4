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

/// TLS could not be set up from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("chat.irc.ca_file {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("no usable system root certificates; set chat.irc.ca_file")]
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
    let connect = async {
        let tcp = TcpStream::connect((host, port)).await?;
        tcp.set_nodelay(true)?;
        match tls {
            None => Ok(Box::new(tcp) as Box<dyn Stream>),
            Some(tls) => {
                let name = ServerName::try_from(host.to_owned())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                let stream = TlsConnector::from(tls.config.clone())
                    .connect(name, tcp)
                    .await?;
                Ok(Box::new(stream) as Box<dyn Stream>)
            }
        }
    };
    tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))?
}
