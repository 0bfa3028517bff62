//! TLS client settings shared by everything that speaks HTTPS to a
//! configured endpoint (scraping inputs, the `elasticsearch` output):
//! Elastic's `ssl.certificate_authorities` and `ssl.verification_mode`.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;

/// `ssl.verification_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verification {
    /// Chain and host name (default).
    #[default]
    Full,
    /// Chain only.
    Certificate,
    /// Nothing: the connection is encrypted but not authenticated.
    None,
}

impl Verification {
    /// The mode named `name` as Elastic spells it (`strict` is `full`).
    pub fn from_name(name: &str) -> Option<Verification> {
        match name {
            "full" | "strict" => Some(Verification::Full),
            "certificate" => Some(Verification::Certificate),
            "none" => Some(Verification::None),
            _ => None,
        }
    }
}

/// A rustls client configuration trusting the system's roots plus the PEM
/// files in `certificate_authorities`. Errors name the file that cannot be
/// used.
pub fn client_config(
    certificate_authorities: &[PathBuf],
    verification: Verification,
) -> Result<rustls::ClientConfig, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    for path in certificate_authorities {
        let mut any = false;
        let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
            format!(
                "ssl.certificate_authorities: cannot read {}: {e}",
                path.display()
            )
        })?;
        for cert in certs {
            let cert =
                cert.map_err(|e| format!("ssl.certificate_authorities: {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("ssl.certificate_authorities: {}: {e}", path.display()))?;
            any = true;
        }
        if !any {
            return Err(format!(
                "ssl.certificate_authorities: {} holds no PEM certificate",
                path.display()
            ));
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let roots = Arc::new(roots);
    Ok(match verification {
        Verification::Full => builder.with_root_certificates(roots).with_no_client_auth(),
        Verification::Certificate | Verification::None => {
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
                roots,
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("ssl.certificate_authorities: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Relaxed {
                    inner,
                    check_chain: verification == Verification::Certificate,
                    provider,
                }))
                .with_no_client_auth()
        }
    })
}

/// An HTTP/1.1 connector for `http://` and `https://` URLs with `config`
/// (HTTP/2 instead, by ALPN, when `http2`).
pub fn https_connector(
    config: rustls::ClientConfig,
    http2: bool,
) -> hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector> {
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http();
    if http2 {
        builder.enable_http2().build()
    } else {
        builder.enable_http1().build()
    }
}

/// An error with its chain of causes, `a: b: c`, for messages that must
/// say why a connection failed (refused, TLS, DNS).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Verification for `certificate` (chain, any name) and `none` (nothing).
#[derive(Debug)]
struct Relaxed {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    check_chain: bool,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Relaxed {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.check_chain {
            return Ok(ServerCertVerified::assertion());
        }
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Ok(v) => Ok(v),
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
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
