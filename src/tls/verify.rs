//! How a shard's certificate is checked: as libpq does for the URL's `sslmode`.

use std::sync::Arc;

use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::{self, CryptoProvider};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme,
};

/// Checks the chain when there are root certificates (verify-ca, verify-full, and require or
/// prefer given `sslrootcert`, as libpq), the name only for verify-full. The handshake's
/// signatures are always checked: they prove the server holds the certificate's key.
#[derive(Debug)]
pub(super) struct ShardVerifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl ShardVerifier {
    pub(super) fn new(
        roots: Option<RootCertStore>,
        check_name: bool,
        provider: Arc<CryptoProvider>,
    ) -> Result<ShardVerifier, String> {
        let chain = match roots {
            Some(roots) => Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        Ok(ShardVerifier {
            chain,
            check_name,
            provider,
        })
    }
}

impl ServerCertVerifier for ShardVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // webpki checks the chain before the name, so a name error means the chain held.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
