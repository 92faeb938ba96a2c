//! The rustls side of the web configuration: the server configuration
//! (certificate, key, protocol versions) and the client-certificate policy
//! of each exporter-toolkit `client_auth_type`, with `client_allowed_sans`.
//!
//! Owns: PEM decoding and the client verifiers. Pure over the bytes it is
//! handed (the caller reads files); depends on nothing else in vramd.

use std::sync::Arc;

use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::web_config::Pem;

/// The client-certificate policy, one per exporter-toolkit `client_auth_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// `NoClientCert`: none asked for.
    None,
    /// `RequestClientCert`: asked for, any (or none) accepted, not verified.
    Request,
    /// `RequireAnyClientCert`: one required, not verified against a CA.
    RequireAny,
    /// `VerifyClientCertIfGiven`: verified against `client_ca_file` if sent.
    VerifyIfGiven,
    /// `RequireAndVerifyClientCert`: required and verified.
    RequireAndVerify,
}

impl ClientAuth {
    /// Whether a certificate is checked against the client CA (only then
    /// does it authenticate anyone).
    pub fn verifies(self) -> bool {
        matches!(self, ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// A checked `tls_server_config`.
#[derive(Clone, Debug)]
pub struct TlsSpec {
    pub cert: Pem,
    pub key: Pem,
    pub client_auth: ClientAuth,
    pub client_ca: Option<Pem>,
    pub allowed_sans: Vec<String>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{field}: {message}")]
    Pem { field: &'static str, message: String },
    #[error("{field}: {source}")]
    Read { field: &'static str, source: std::io::Error },
    #[error("tls_server_config: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("tls_server_config.client_ca_file: {0}")]
    Verifier(String),
}

/// Builds the rustls server configuration; `read` turns a [`Pem`] into
/// bytes (a file read, on the caller's blocking thread).
pub fn server_config(
    spec: &TlsSpec,
    read: &dyn Fn(&Pem) -> Result<Vec<u8>, std::io::Error>,
) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = certificates(
        &read(&spec.cert)
            .map_err(|source| TlsError::Read { field: "tls_server_config.cert_file", source })?,
    )
    .map_err(|message| TlsError::Pem { field: "tls_server_config.cert_file", message })?;
    let key_bytes = read(&spec.key)
        .map_err(|source| TlsError::Read { field: "tls_server_config.key_file", source })?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|error| TlsError::Pem {
        field: "tls_server_config.key_file",
        message: format!("no usable private key: {error}"),
    })?;
    let verifier = client_verifier(spec, &provider, read)?;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(version, _)| (spec.min_version..=spec.max_version).contains(version))
    .map(|(_, version)| version)
    .collect();
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)?
        .with_client_cert_verifier(verifier)
        // Also checks that the key matches the certificate.
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn certificates(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("not PEM certificates: {error}"))?;
    if certs.is_empty() {
        return Err("no CERTIFICATE block".into());
    }
    Ok(certs)
}

fn client_verifier(
    spec: &TlsSpec,
    provider: &Arc<CryptoProvider>,
    read: &dyn Fn(&Pem) -> Result<Vec<u8>, std::io::Error>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let ca_verifier = |allow_missing: bool| -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let field = "tls_server_config.client_ca_file";
        let ca = spec.client_ca.as_ref().ok_or_else(|| TlsError::Pem {
            field,
            message: "required when client_auth_type verifies client certificates".into(),
        })?;
        let bytes = read(ca).map_err(|source| TlsError::Read { field, source })?;
        let mut roots = RootCertStore::empty();
        for cert in certificates(&bytes).map_err(|message| TlsError::Pem { field, message })? {
            roots.add(cert).map_err(|error| TlsError::Pem { field, message: error.to_string() })?;
        }
        let builder =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        let builder = if allow_missing { builder.allow_unauthenticated() } else { builder };
        builder.build().map_err(|error| TlsError::Verifier(error.to_string()))
    };
    let (ca, mandatory) = match spec.client_auth {
        ClientAuth::None => return Ok(WebPkiClientVerifier::no_client_auth()),
        ClientAuth::Request => (None, false),
        ClientAuth::RequireAny => (None, true),
        ClientAuth::VerifyIfGiven => (Some(ca_verifier(true)?), false),
        ClientAuth::RequireAndVerify => (Some(ca_verifier(false)?), true),
    };
    Ok(Arc::new(ClientCheck {
        ca,
        mandatory,
        algorithms: provider.signature_verification_algorithms,
        sans: spec.allowed_sans.clone(),
    }))
}

/// Every policy that asks for a certificate. With a client CA, webpki's
/// verifier checks it, then `client_allowed_sans` holds: the certificate
/// must be valid for at least one listed name (DNS names and IP addresses;
/// an entry that is neither never matches). Without one
/// (`RequestClientCert`, `RequireAnyClientCert`), the client proves it
/// holds the certificate's key, but the certificate itself is not checked,
/// as in exporter-toolkit; such a certificate authenticates nobody.
/// Signatures are checked with the provider's algorithms either way, as
/// webpki's verifier checks them.
#[derive(Debug)]
struct ClientCheck {
    ca: Option<Arc<dyn ClientCertVerifier>>,
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
    sans: Vec<String>,
}

impl ClientCertVerifier for ClientCheck {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.ca.as_ref().map_or(&[], |ca| ca.root_hint_subjects())
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let Some(ca) = &self.ca else { return Ok(ClientCertVerified::assertion()) };
        let verified = ca.verify_client_cert(end_entity, intermediates, now)?;
        if self.sans.is_empty() {
            return Ok(verified);
        }
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        let allowed = self.sans.iter().any(|san| {
            ServerName::try_from(san.as_str())
                .is_ok_and(|name| cert.verify_is_valid_for_subject_name(&name).is_ok())
        });
        if allowed {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
