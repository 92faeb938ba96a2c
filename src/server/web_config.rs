//! The exporter-toolkit web configuration file (`--web.config.file`,
//! `server.web_config`): its YAML shape, checked field by field, and the
//! files it names, read into one [`WebState`] that serves connections.
//!
//! Owns: the raw serde shape (unknown fields refused), validation naming
//! the field, and reading the certificate, key, CA and users. Reads files
//! and so runs only on a blocking thread. Depends on `tls` for building
//! the rustls configuration; knows nothing of HTTP routes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;

use super::tls::{self, ClientAuth, TlsError, TlsSpec, TlsVersion};
use crate::setting::{read_at_most, read_bytes_at_most};

/// Why a web configuration file cannot be used; each names the field.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: {field}: {message}")]
    Field { path: PathBuf, field: &'static str, message: String },
    #[error("{path}: {source}")]
    Tls { path: PathBuf, source: TlsError },
    /// A reload that would serve with less protection than now.
    #[error(
        "{path}: refused: the new version would turn off {lost}; the running web \
         configuration stays (only a restart with this file may serve without it)"
    )]
    Weaker { path: PathBuf, lost: &'static str },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Option<String>,
    cert_file: Option<PathBuf>,
    key: Option<String>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca: Option<String>,
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    client_allowed_sans: Vec<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    // Accepted so an operator's file works unchanged; rustls always uses
    // its own (server-ordered, modern) suites and curves.
    #[serde(default, rename = "prefer_server_cipher_suites")]
    _prefer_server_cipher_suites: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    // Accepted for compatibility; vramd serves HTTP/1.1 only.
    #[serde(default, rename = "http2")]
    _http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// PEM text, from a file (watched for changes) or written inline.
#[derive(Clone, Debug, PartialEq)]
pub enum Pem {
    File(PathBuf),
    Inline(String),
}

impl Pem {
    fn read(&self) -> Result<Vec<u8>, std::io::Error> {
        match self {
            Pem::File(path) => read_bytes_at_most(path, MAX_PEM_FILE_BYTES)?
                .ok_or_else(|| too_large(MAX_PEM_FILE_BYTES)),
            Pem::Inline(text) => Ok(text.clone().into_bytes()),
        }
    }
}

/// The headers exporter-toolkit lets an operator set; anything else could
/// break the protocol (`Content-Type`) or auth (`WWW-Authenticate`).
const SETTABLE_HEADERS: [&str; 5] = [
    "strict-transport-security",
    "x-content-type-options",
    "x-frame-options",
    "x-xss-protection",
    "content-security-policy",
];

/// Everything a connection needs, built from one good reading of the file
/// and the files it names. Replaced whole on reload, never patched.
pub struct WebState {
    /// `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Whether a request needs a client certificate the verifier checked.
    pub require_verified_cert: bool,
    /// User name to bcrypt hash; empty: no basic auth.
    pub users: BTreeMap<String, String>,
    /// Added to every answer.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The files this state was read from (the web config first), whose
    /// changes trigger a reload.
    pub watched: Vec<PathBuf>,
}

impl WebState {
    /// What `next` would turn off that this state has: TLS, client
    /// certificates or basic auth (fewer users is not less protection).
    pub fn lost_in(&self, next: &WebState) -> Option<&'static str> {
        if self.tls.is_some() && next.tls.is_none() {
            Some("TLS")
        } else if self.require_verified_cert && !next.require_verified_cert {
            Some("the client certificate requirement")
        } else if !self.users.is_empty() && next.users.is_empty() {
            Some("basic authentication")
        } else {
            None
        }
    }

    /// Whether requests other than `/healthz` need credentials.
    pub fn requires_auth(&self) -> bool {
        self.require_verified_cert || !self.users.is_empty()
    }
}

/// Highest bcrypt cost accepted: each step doubles the work, and 14 is
/// already about a second of CPU per uncached check; at 31 one check
/// takes days, so one request would hold a bcrypt slot for good.
pub const MAX_BCRYPT_COST: u32 = 14;

/// Largest web configuration file read: a few users and TLS settings are
/// kilobytes; `/dev/zero` must not fill memory. Not a key: the file
/// cannot bound its own reading.
pub const MAX_WEB_CONFIG_BYTES: u64 = 1 << 20;
/// Largest certificate, key or CA file read (a CA bundle is ~200 KiB).
pub const MAX_PEM_FILE_BYTES: u64 = 4 << 20;

/// A file read whole would be larger than `max`: refused.
fn too_large(max: u64) -> std::io::Error {
    let why = format!("larger than {max} bytes; refused");
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

/// Reads and checks the web configuration at `path` and every file it
/// names. Blocking: file reads and key parsing.
pub fn load(path: &Path) -> Result<WebState, WebConfigError> {
    let text = read_at_most(path, MAX_WEB_CONFIG_BYTES)
        .and_then(|text| text.ok_or_else(|| too_large(MAX_WEB_CONFIG_BYTES)))
        .map_err(|source| WebConfigError::Read { path: path.to_owned(), source })?;
    // An empty file is a valid configuration with nothing set.
    let raw: RawFile = if text.trim().is_empty() {
        RawFile::default()
    } else {
        yaml_serde::from_str(&text).map_err(|error| WebConfigError::Syntax {
            path: path.to_owned(),
            message: error.to_string(),
        })?
    };
    build(path, raw)
}

fn build(path: &Path, raw: RawFile) -> Result<WebState, WebConfigError> {
    let field = |field: &'static str, message: String| WebConfigError::Field {
        path: path.to_owned(),
        field,
        message,
    };
    let mut watched = vec![path.to_owned()];
    let mut users = BTreeMap::new();
    for (user, hash) in raw.basic_auth_users {
        if user.is_empty() || user.contains(':') {
            return Err(field(
                "basic_auth_users",
                format!("user name {user:?} must be non-empty and contain no ':'"),
            ));
        }
        // Parsing the hash now names a bad entry at start instead of
        // refusing that user's every request later.
        let Ok(parts) = hash.parse::<bcrypt::HashParts>() else {
            return Err(field("basic_auth_users", format!("user {user:?}: not a bcrypt hash")));
        };
        if parts.get_cost() > MAX_BCRYPT_COST {
            return Err(field(
                "basic_auth_users",
                format!(
                    "user {user:?}: bcrypt cost {} is above {MAX_BCRYPT_COST}; each check would \
                     take seconds to days of CPU (rehash with a cost of 10 to 12)",
                    parts.get_cost()
                ),
            ));
        }
        users.insert(user, hash);
    }
    let mut headers = Vec::new();
    for (name, value) in raw.http_server_config.map(|http| http.headers).unwrap_or_default() {
        let lower = name.to_ascii_lowercase();
        if !SETTABLE_HEADERS.contains(&lower.as_str()) {
            return Err(field(
                "http_server_config.headers",
                format!("{name} cannot be set; settable: {}", SETTABLE_HEADERS.join(", ")),
            ));
        }
        let name = HeaderName::from_bytes(lower.as_bytes())
            .map_err(|error| field("http_server_config.headers", format!("{name}: {error}")))?;
        let value = HeaderValue::from_str(&value)
            .map_err(|error| field("http_server_config.headers", format!("{name}: {error}")))?;
        headers.push((name, value));
    }
    let (tls, require_verified_cert) = match raw.tls_server_config {
        None => (None, false),
        Some(raw_tls) => {
            let spec = tls_spec(raw_tls, &field)?;
            for pem in
                [Some(&spec.cert), Some(&spec.key), spec.client_ca.as_ref()].into_iter().flatten()
            {
                if let Pem::File(file) = pem {
                    watched.push(file.clone());
                }
            }
            let require = spec.client_auth.verifies();
            let config = tls::server_config(&spec, &|pem: &Pem| pem.read())
                .map_err(|source| WebConfigError::Tls { path: path.to_owned(), source })?;
            (Some(Arc::new(config)), require)
        }
    };
    Ok(WebState { tls, require_verified_cert, users, headers, watched })
}

fn tls_spec(
    raw: RawTls,
    field: &dyn Fn(&'static str, String) -> WebConfigError,
) -> Result<TlsSpec, WebConfigError> {
    let pem =
        |file: Option<PathBuf>, inline: Option<String>, name: &'static str| match (file, inline) {
            (Some(_), Some(_)) => {
                Err(field(name, format!("set either {name} or its inline form, not both")))
            }
            (Some(file), None) => Ok(Some(Pem::File(file))),
            (None, Some(text)) => Ok(Some(Pem::Inline(text))),
            (None, None) => Ok(None),
        };
    let cert = pem(raw.cert_file, raw.cert, "tls_server_config.cert_file")?.ok_or_else(|| {
        field("tls_server_config.cert_file", "required with tls_server_config".into())
    })?;
    let key = pem(raw.key_file, raw.key, "tls_server_config.key_file")?.ok_or_else(|| {
        field("tls_server_config.key_file", "required with tls_server_config".into())
    })?;
    let client_ca = pem(raw.client_ca_file, raw.client_ca, "tls_server_config.client_ca_file")?;
    let client_auth = match raw.client_auth_type.as_deref() {
        None | Some("" | "NoClientCert") => ClientAuth::None,
        Some("RequestClientCert") => ClientAuth::Request,
        Some("RequireAnyClientCert" | "RequireClientCert") => ClientAuth::RequireAny,
        Some("VerifyClientCertIfGiven") => ClientAuth::VerifyIfGiven,
        Some("RequireAndVerifyClientCert") => ClientAuth::RequireAndVerify,
        Some(other) => {
            return Err(field(
                "tls_server_config.client_auth_type",
                format!(
                    "{other:?} is none of NoClientCert, RequestClientCert, RequireAnyClientCert, \
                     VerifyClientCertIfGiven, RequireAndVerifyClientCert"
                ),
            ));
        }
    };
    if client_auth.verifies() && client_ca.is_none() {
        return Err(field(
            "tls_server_config.client_ca_file",
            "required when client_auth_type verifies client certificates".into(),
        ));
    }
    if !client_auth.verifies() && client_ca.is_some() {
        return Err(field(
            "tls_server_config.client_ca_file",
            "set, but client_auth_type does not verify client certificates".into(),
        ));
    }
    if !raw.client_allowed_sans.is_empty() && !client_auth.verifies() {
        return Err(field(
            "tls_server_config.client_allowed_sans",
            "needs client_auth_type RequireAndVerifyClientCert or VerifyClientCertIfGiven".into(),
        ));
    }
    let version =
        |text: Option<String>, name: &'static str, default: TlsVersion| match text.as_deref() {
            None | Some("") => Ok(default),
            Some("TLS12") => Ok(TlsVersion::Tls12),
            Some("TLS13") => Ok(TlsVersion::Tls13),
            Some(other @ ("TLS10" | "TLS11")) => {
                Err(field(name, format!("{other} is not supported; TLS12 or TLS13")))
            }
            Some(other) => Err(field(name, format!("{other:?} is not TLS12 or TLS13"))),
        };
    let min_version = version(raw.min_version, "tls_server_config.min_version", TlsVersion::Tls12)?;
    let max_version = version(raw.max_version, "tls_server_config.max_version", TlsVersion::Tls13)?;
    if min_version > max_version {
        return Err(field("tls_server_config.max_version", "below min_version".into()));
    }
    Ok(TlsSpec {
        cert,
        key,
        client_auth,
        client_ca,
        allowed_sans: raw.client_allowed_sans,
        min_version,
        max_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebState, WebConfigError> {
        let dir = tempfile::tempdir()
            .map_err(|source| WebConfigError::Read { path: PathBuf::new(), source })?;
        let path = dir.path().join("web.yml");
        std::fs::write(&path, text)
            .map_err(|source| WebConfigError::Read { path: path.clone(), source })?;
        load(&path)
    }

    fn message(text: &str) -> String {
        match parse(text) {
            Ok(_) => String::from("accepted"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn an_empty_file_changes_nothing() {
        let state = parse("").ok();
        assert!(state.as_ref().is_some_and(|state| !state.requires_auth() && state.tls.is_none()));
    }

    #[test]
    fn errors_name_the_field() {
        assert!(message("tls_server_config:\n  cert_file: a\n  bogus: 1\n").contains("bogus"));
        assert!(message("nonsense: 1\n").contains("nonsense"));
        assert!(
            message("tls_server_config:\n  key_file: k\n").contains("tls_server_config.cert_file")
        );
        assert!(
            message(
                "tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: Sometimes\n"
            )
            .contains("tls_server_config.client_auth_type")
        );
        assert!(
            message("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: RequireAndVerifyClientCert\n")
                .contains("tls_server_config.client_ca_file")
        );
        assert!(
            message("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS10\n")
                .contains("tls_server_config.min_version")
        );
        assert!(message("basic_auth_users:\n  alice: plaintext\n").contains("not a bcrypt hash"));
        let Ok(costly) = bcrypt::hash("secret", 4).map(|hash| hash.replacen("$04$", "$31$", 1))
        else {
            panic!("bcrypt hashes")
        };
        let text = format!("basic_auth_users:\n  alice: \"{costly}\"\n");
        assert!(message(&text).contains("bcrypt cost 31 is above 14"), "{}", message(&text));
        assert!(
            message("http_server_config:\n  headers:\n    Content-Type: text/html\n")
                .contains("http_server_config.headers")
        );
        assert!(
            message("tls_server_config:\n  cert_file: /nonexistent/c.pem\n  key_file: /nonexistent/k.pem\n")
                .contains("cert_file")
        );
    }

    #[test]
    fn users_and_headers_are_read() {
        let Ok(hash) = bcrypt::hash("secret", 4) else {
            return;
        };
        let state = parse(&format!(
            "basic_auth_users:\n  alice: {hash}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"
        ));
        let state = state.ok();
        assert!(state.as_ref().is_some_and(|state| state.requires_auth()
            && state.users.contains_key("alice")
            && state.headers.len() == 1));
    }
}
