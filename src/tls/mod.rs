//! TLS material and settings for both sides of the proxy: the certificate clients are offered
//! (`[tls]`), and TLS to the shards, chosen per shard URL the way libpq chooses it
//! (`?sslmode=verify-full&sslrootcert=…`, docs/behaviour.md "TLS to shards").

mod end_point;
mod postgres;
mod verify;

use std::fmt;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, pki_types, ClientConfig, RootCertStore};

pub use end_point::server_end_point;
pub use postgres::PostgresTls;

/// Where the operating system keeps its trusted certificate authorities (Debian's
/// ca-certificates); `SSL_CERT_FILE` names another file, as for OpenSSL.
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The one cryptography provider of the process.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file, in order.
pub fn load_certs(path: &Path) -> Result<Vec<pki_types::CertificateDer<'static>>, String> {
    let certs = rustls_pemfile::certs(&mut open(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", path.display()));
    }
    Ok(certs)
}

/// The first private key in a PEM file.
pub fn load_key(path: &Path) -> Result<pki_types::PrivateKeyDer<'static>, String> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .ok_or_else(|| format!("{}: no private key found", path.display()))
}

fn open(path: &Path) -> Result<BufReader<std::fs::File>, String> {
    std::fs::File::open(path)
        .map(BufReader::new)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// libpq's `sslmode`, less `allow` (plaintext first, TLS only if the server insists), which
/// protects nothing a proxy could rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Plaintext. The default, unlike libpq's `prefer`: a proxy that silently fell back to
    /// plaintext would hide that the shards' traffic is readable.
    #[default]
    Disable,
    /// TLS when the server offers it, plaintext when it answers that it has none.
    Prefer,
    /// TLS or nothing; the certificate is checked only if `sslrootcert` is given.
    Require,
    /// TLS with a certificate that chains to `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host of the URL.
    VerifyFull,
}

impl SslMode {
    pub fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err("sslmode=allow is not supported: use prefer, require, \
                            verify-ca or verify-full"
                    .into())
            }
            other => {
                return Err(format!(
                    "invalid sslmode \"{other}\": use disable, prefer, require, verify-ca \
                     or verify-full"
                ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a server without TLS is refused.
    pub fn requires_tls(self) -> bool {
        match self {
            SslMode::Disable | SslMode::Prefer => false,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => true,
        }
    }
}

/// The certificate authorities a shard's certificate must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCerts {
    File(PathBuf),
    /// `sslrootcert=system`: the operating system's trusted authorities.
    System,
}

/// TLS to one server as its URL asks for it (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardTlsSettings {
    pub mode: SslMode,
    pub root_certs: Option<RootCerts>,
    /// A client certificate and its key, for servers that authenticate by certificate.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl ShardTlsSettings {
    /// Checks what the settings say, without reading any file.
    pub fn check(&self) -> Result<(), String> {
        if self.cert.is_some() != self.key.is_some() {
            return Err("sslcert and sslkey go together: give both or neither".into());
        }
        match (&self.root_certs, self.mode) {
            (None, SslMode::VerifyCa | SslMode::VerifyFull) => Err(format!(
                "sslmode={} needs sslrootcert: the file of the certificate authority that \
                 signed the server's certificate (or sslrootcert=system)",
                self.mode.as_str()
            )),
            // As libpq: the system's authorities vouch for names, so only verify-full means
            // anything with them.
            (Some(RootCerts::System), mode) if mode != SslMode::VerifyFull => Err(format!(
                "sslrootcert=system needs sslmode=verify-full, not {}",
                mode.as_str()
            )),
            _ => Ok(()),
        }
    }
}

/// TLS to one server, its files read: what connections to it are opened with.
#[derive(Clone)]
pub struct ShardTls {
    settings: ShardTlsSettings,
    config: Arc<ClientConfig>,
}

impl ShardTls {
    /// Reads the files the settings name. None for `sslmode=disable`.
    pub fn new(settings: ShardTlsSettings) -> Result<Option<ShardTls>, String> {
        settings.check()?;
        if settings.mode == SslMode::Disable {
            return Ok(None);
        }
        let roots = match &settings.root_certs {
            None => None,
            Some(RootCerts::File(path)) => Some(root_store(&load_certs(path)?, path)?),
            Some(RootCerts::System) => {
                let path = std::env::var_os("SSL_CERT_FILE")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from(SYSTEM_ROOTS));
                Some(root_store(&load_certs(&path)?, &path)?)
            }
        };
        let provider = provider();
        let verifier = verify::ShardVerifier::new(
            roots,
            settings.mode == SslMode::VerifyFull,
            provider.clone(),
        )?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier));
        let config = match (&settings.cert, &settings.key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
                .map_err(|e| format!("{}: {e}", cert.display()))?,
            _ => builder.with_no_client_auth(),
        };
        Ok(Some(ShardTls {
            settings,
            config: Arc::new(config),
        }))
    }

    pub fn mode(&self) -> SslMode {
        self.settings.mode
    }

    /// The TLS handshake with `host` over a connection whose server agreed to TLS.
    pub async fn handshake(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = server_name(host)?;
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
    }
}

impl PartialEq for ShardTls {
    fn eq(&self, other: &ShardTls) -> bool {
        self.settings == other.settings
    }
}

impl Eq for ShardTls {}

impl fmt::Debug for ShardTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}

fn root_store(
    certs: &[pki_types::CertificateDer<'static>],
    path: &Path,
) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs.iter().cloned());
    if added == 0 {
        return Err(format!(
            "{}: no usable certificate authority in the file",
            path.display()
        ));
    }
    Ok(roots)
}

/// The name a server's certificate is checked against: a DNS name or an IP address (which
/// rustls does not send as SNI, as libpq does not).
fn server_name(host: &str) -> std::io::Result<pki_types::ServerName<'static>> {
    pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("\"{host}\" cannot be checked against a certificate: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifying_modes_need_a_root_certificate() {
        let mut s = ShardTlsSettings {
            mode: SslMode::VerifyFull,
            ..Default::default()
        };
        assert!(s.check().unwrap_err().contains("needs sslrootcert"));
        s.root_certs = Some(RootCerts::System);
        assert!(s.check().is_ok());
        s.mode = SslMode::Require;
        assert!(s.check().unwrap_err().contains("needs sslmode=verify-full"));
        s.root_certs = None;
        s.cert = Some("c.pem".into());
        assert!(s.check().unwrap_err().contains("go together"));
    }

    #[test]
    fn sslmode_values_are_libpqs() {
        assert!(SslMode::parse("allow").is_err());
        assert!(SslMode::parse("verify_full").is_err());
        assert_eq!(SslMode::parse("verify-full"), Ok(SslMode::VerifyFull));
        assert!(!SslMode::Prefer.requires_tls() && SslMode::VerifyCa.requires_tls());
    }
}
