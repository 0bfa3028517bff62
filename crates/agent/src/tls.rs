//! TLS client settings shared by everything that speaks HTTPS to a
//! configured endpoint (scraping inputs, the `elasticsearch` output):
//! Elastic's `ssl.certificate_authorities`, `ssl.verification_mode` and
//! `ssl.ca_trusted_fingerprint`.

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

/// `ssl.ca_trusted_fingerprint`: the SHA-256 of a CA certificate that is
/// trusted when a server presents it in its chain (how Elastic's manifests
/// trust a self-managed cluster's CA without shipping the file).
pub type Fingerprint = [u8; 32];

/// A fingerprint as Elastic documents it: 64 hexadecimal digits, any case,
/// colons allowed (as `openssl x509 -fingerprint -sha256` prints it).
pub fn parse_fingerprint(text: &str) -> Result<Fingerprint, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| *b != b':').collect();
    let bad = || {
        format!(
            "expected the SHA-256 of the CA certificate as 64 hexadecimal digits (e.g. from `openssl x509 -noout -fingerprint -sha256 -in ca.crt`), got {} characters",
            text.len()
        )
    };
    if digits.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks(2).enumerate() {
        let hex = std::str::from_utf8(pair).map_err(|_| bad())?;
        out[i] = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// A rustls client configuration trusting the system's roots plus the PEM
/// files in `certificate_authorities`. Errors name the file that cannot be
/// used.
pub fn client_config(
    certificate_authorities: &[PathBuf],
    verification: Verification,
) -> Result<rustls::ClientConfig, String> {
    client_config_pinned(certificate_authorities, verification, None)
}

/// As [`client_config`], also trusting the CA whose SHA-256 is `pinned`
/// when a server presents it in its chain. A server that does not present
/// it is verified against the other roots alone.
pub fn client_config_pinned(
    certificate_authorities: &[PathBuf],
    verification: Verification,
    pinned: Option<Fingerprint>,
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
    let Some(fingerprint) = pinned else {
        return Ok(match verification {
            Verification::Full => builder.with_root_certificates(roots).with_no_client_auth(),
            Verification::Certificate | Verification::None => builder
                .dangerous()
                .with_custom_certificate_verifier(verifier(roots, verification, &provider)?)
                .with_no_client_auth(),
        });
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(pinned_verifier(
            roots,
            verification,
            fingerprint,
            provider,
        )?)
        .with_no_client_auth())
}

/// The verifier of `verification` against `roots` that also trusts the CA
/// of `fingerprint` when a server presents it.
fn pinned_verifier(
    roots: Arc<rustls::RootCertStore>,
    verification: Verification,
    fingerprint: Fingerprint,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let unpinned = verifier(Arc::clone(&roots), verification, &provider)?;
    Ok(Arc::new(Pinned {
        roots,
        fingerprint,
        verification,
        provider,
        unpinned,
    }))
}

/// The verifier of `verification` against `roots`.
fn verifier(
    roots: Arc<rustls::RootCertStore>,
    verification: Verification,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    if roots.is_empty() {
        // No system roots (a minimal image) and no CA file: only a pinned
        // CA, if any, can make a chain trusted.
        return Ok(Arc::new(Relaxed {
            inner: None,
            check_chain: verification != Verification::None,
            provider: provider.clone(),
        }));
    }
    let inner =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| format!("ssl.certificate_authorities: {e}"))?;
    Ok(match verification {
        Verification::Full => inner,
        Verification::Certificate | Verification::None => Arc::new(Relaxed {
            inner: Some(inner),
            check_chain: verification == Verification::Certificate,
            provider: provider.clone(),
        }),
    })
}

/// Trusts the CA of `fingerprint` too, for the handshake of a server that
/// presents it: the chain is then verified with it among the roots (and
/// the host name as `verification` says). Without it in the chain, the
/// `unpinned` verifier decides.
#[derive(Debug)]
struct Pinned {
    roots: Arc<rustls::RootCertStore>,
    fingerprint: Fingerprint,
    verification: Verification,
    provider: Arc<rustls::crypto::CryptoProvider>,
    unpinned: Arc<dyn ServerCertVerifier>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = std::iter::once(end_entity).chain(intermediates);
        let pinned = presented
            .into_iter()
            .find(|c| ring::digest::digest(&ring::digest::SHA256, c).as_ref() == self.fingerprint);
        let Some(ca) = pinned else {
            return self.unpinned.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp,
                now,
            );
        };
        let mut roots = (*self.roots).clone();
        roots.add(ca.clone().into_owned()).map_err(|e| {
            rustls::Error::General(format!(
                "the certificate of ssl.ca_trusted_fingerprint cannot be a trust anchor: {e}"
            ))
        })?;
        verifier(Arc::new(roots), self.verification, &self.provider)
            .map_err(rustls::Error::General)?
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.unpinned.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.unpinned.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.unpinned.supported_verify_schemes()
    }
}

/// The HTTP client of every output, input and command: one type, so
/// hyper's client code (pool, connection, HTTP/2) is in the binary once.
pub type HttpClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Full<bytes::Bytes>,
>;

/// A client for `http://` URLs only: it trusts no root, so an `https://`
/// URL fails its handshake.
pub fn plain_http_client() -> HttpClient {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https_connector(config, false))
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

/// Verification for `certificate` (chain, any name) and `none` (nothing);
/// without `inner` (no roots at all) every chain is of an unknown issuer.
#[derive(Debug)]
struct Relaxed {
    inner: Option<Arc<rustls::client::WebPkiServerVerifier>>,
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
        let Some(inner) = &self.inner else {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ));
        };
        match inner.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a `localhost` server certificate it signed, made by the
    /// `openssl` command as a cluster's tooling would: (leaf, CA) in DER.
    fn chain(dir: &std::path::Path) -> (CertificateDer<'static>, CertificateDer<'static>) {
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("the openssl command");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=test-ca",
        ]);
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=localhost",
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.crt",
        ]);
        let der = |name: &str| CertificateDer::from_pem_file(dir.join(name)).unwrap();
        (der("leaf.crt"), der("ca.crt"))
    }

    fn sha256(c: &CertificateDer<'_>) -> Fingerprint {
        let mut out = [0u8; 32];
        out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, c).as_ref());
        out
    }

    type Verifier = Arc<dyn ServerCertVerifier>;

    fn verify(
        v: &Verifier,
        leaf: &CertificateDer<'_>,
        presented: &[CertificateDer<'_>],
    ) -> Result<ServerCertVerified, rustls::Error> {
        v.verify_server_cert(
            leaf,
            presented,
            &ServerName::try_from("localhost").unwrap(),
            &[],
            UnixTime::now(),
        )
    }

    #[test]
    fn a_pinned_ca_is_trusted_when_the_server_presents_it_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let (leaf, ca) = chain(dir.path());
        // No system roots: only what the test trusts.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(rustls::RootCertStore::empty());
        let pinned = |pin: Option<Fingerprint>, mode| -> Verifier {
            match pin {
                Some(p) => pinned_verifier(roots.clone(), mode, p, provider.clone()).unwrap(),
                None => verifier(roots.clone(), mode, &provider).unwrap(),
            }
        };
        let with_ca = std::slice::from_ref(&ca);
        // The CA is in no root store: without the pin the chain is unknown.
        assert!(verify(&pinned(None, Verification::Full), &leaf, with_ca).is_err());
        // Pinned and presented: trusted, host name checked.
        assert!(
            verify(
                &pinned(Some(sha256(&ca)), Verification::Full),
                &leaf,
                with_ca
            )
            .is_ok()
        );
        // Pinned but not presented, or another fingerprint: not trusted.
        assert!(verify(&pinned(Some(sha256(&ca)), Verification::Full), &leaf, &[]).is_err());
        let mut other = sha256(&ca);
        other[0] ^= 1;
        assert!(verify(&pinned(Some(other), Verification::Full), &leaf, with_ca).is_err());
        // The pin names a CA: the server's own certificate is no anchor.
        assert!(
            verify(
                &pinned(Some(sha256(&leaf)), Verification::Full),
                &leaf,
                with_ca
            )
            .is_err()
        );
        // With `certificate`, the chain counts and the name does not.
        let config = pinned(Some(sha256(&ca)), Verification::Certificate);
        let elsewhere = config.verify_server_cert(
            &leaf,
            with_ca,
            &ServerName::try_from("elsewhere.example").unwrap(),
            &[],
            UnixTime::now(),
        );
        assert!(elsewhere.is_ok());
        let strict = pinned(Some(sha256(&ca)), Verification::Full);
        let elsewhere = strict.verify_server_cert(
            &leaf,
            with_ca,
            &ServerName::try_from("elsewhere.example").unwrap(),
            &[],
            UnixTime::now(),
        );
        assert!(elsewhere.is_err());
    }

    #[test]
    fn fingerprints_read_as_elastic_and_openssl_write_them() {
        let hex = "3B:24:D3:38:44:D7:77:F8:BC:05:38:A8:A6:EA:5C:BA:1B:B7:D7:B0:AD:7D:6A:3C:7E:5F:8E:1B:76:E1:AB:3C";
        let a = parse_fingerprint(hex).unwrap();
        let b = parse_fingerprint(&hex.replace(':', "").to_lowercase()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0], 0x3b);
        assert_eq!(a[31], 0x3c);
        for bad in ["", "3b24", &"zz".repeat(32), &"ab".repeat(33)] {
            let e = parse_fingerprint(bad).unwrap_err();
            assert!(e.contains("64 hexadecimal digits"), "{e}");
        }
    }
}
