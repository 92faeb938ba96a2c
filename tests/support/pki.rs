//! A test PKI made with rcgen (nothing checked in): a CA, leaf
//! certificates it signed (or self-signed, or expired), and the
//! exporter-toolkit web configuration files that name them.

// Test code: a panic here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tempfile::TempDir;

/// A CA, and leaf certificates it signed, written as PEM files in `dir`.
pub struct Pki {
    dir: TempDir,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "vramd test CA");
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        Self { dir, issuer: Issuer::new(params, key) }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `<name>.pem` and `<name>-key.pem`: a leaf for `sans`, signed
    /// by this CA (or by itself), valid now unless `expired`.
    pub fn leaf(&self, name: &str, sans: &[&str], self_signed: bool, expired: bool) {
        let mut params =
            CertificateParams::new(sans.iter().map(|san| (*san).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 2);
        }
        let key = KeyPair::generate().unwrap();
        let cert = if self_signed {
            params.self_signed(&key).unwrap()
        } else {
            params.signed_by(&key, &self.issuer).unwrap()
        };
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{name}-key.pem")), key.serialize_pem()).unwrap();
    }

    /// Writes `web.yml` atomically (a rename), so a poll never reads half.
    pub fn web_config(&self, text: &str) -> PathBuf {
        let path = self.path("web.yml");
        let staged = self.path("web.yml.new");
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        path
    }

    pub fn tls(&self, server: &str, client_auth: &str) -> String {
        let dir = self.dir.path().display();
        let mut text = format!(
            "tls_server_config:\n  cert_file: {dir}/{server}.pem\n  key_file: {dir}/{server}-key.pem\n  client_auth_type: {client_auth}\n"
        );
        if client_auth.contains("Verify") {
            text.push_str(&format!("  client_ca_file: {dir}/ca.pem\n"));
        }
        text
    }
}
