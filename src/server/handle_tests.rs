//! A reload that would lower protection is refused (issue 35, item 3): an
//! emptied or half-written web configuration keeps the running one.

use std::path::Path;

use super::handle::WebConfigHandle;
use super::web_config::WebConfigError;

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

fn users(names: &[&str]) -> String {
    let hash = bcrypt::hash("secret", 4).unwrap();
    let lines: Vec<String> = names.iter().map(|name| format!("  {name}: {hash}\n")).collect();
    format!("basic_auth_users:\n{}", lines.concat())
}

fn refused(handle: &WebConfigHandle) -> Option<&'static str> {
    match handle.prepare_reload() {
        Err(WebConfigError::Weaker { lost, .. }) => Some(lost),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(prepared) => {
            handle.install(prepared);
            None
        }
    }
}

#[test]
fn emptying_or_cutting_the_file_keeps_basic_auth_but_revoking_one_user_is_fine() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    write(&path, &users(&["alice", "bob"]));
    let handle = WebConfigHandle::load(&path, 16).unwrap();

    write(&path, "");
    assert_eq!(refused(&handle), Some("basic authentication"));
    assert_eq!(handle.current().users.len(), 2, "the running configuration stays");

    write(&path, "basic_auth_users:\n");
    assert!(handle.prepare_reload().is_err(), "a file cut after the key is refused");
    assert_eq!(handle.current().users.len(), 2);

    write(&path, &users(&["alice"]));
    assert_eq!(refused(&handle), None, "revoking a user is not lowering protection");
    assert_eq!(handle.current().users.len(), 1);
}

#[test]
fn emptying_the_file_keeps_tls() {
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    write(&cert, &certified.cert.pem());
    write(&key, &certified.signing_key.serialize_pem());
    let path = dir.path().join("web.yml");
    let tls = format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
        cert.display(),
        key.display()
    );
    write(&path, &tls);
    let handle = WebConfigHandle::load(&path, 16).unwrap();
    write(&path, "# nothing yet\n");
    assert_eq!(refused(&handle), Some("TLS"));
    assert!(handle.current().tls.is_some());
}

#[test]
fn a_start_with_an_empty_file_serves_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    write(&path, "");
    let handle = WebConfigHandle::load(&path, 16).unwrap();
    assert!(handle.current().tls.is_none() && !handle.current().requires_auth());
}

#[test]
fn a_file_that_never_ends_is_refused_not_read_into_memory() {
    let error = WebConfigHandle::load(Path::new("/dev/zero"), 16).err().unwrap();
    assert!(error.to_string().contains("larger than"), "{error}");
}
