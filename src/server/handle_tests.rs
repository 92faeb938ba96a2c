//! A reload that would lower protection is refused (issue 35, item 3): an
//! emptied or half-written web configuration keeps the running one. A
//! wrong-password flood costs one bcrypt per distinct guess, up to the
//! client's failure budget, and nothing to anyone else (item 2).

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use super::ServerConfig;
use super::handle::{Verdict, WebConfigHandle};
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
    let handle = WebConfigHandle::load(&path, &ServerConfig::default()).unwrap();

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
    let handle = WebConfigHandle::load(&path, &ServerConfig::default()).unwrap();
    write(&path, "# nothing yet\n");
    assert_eq!(refused(&handle), Some("TLS"));
    assert!(handle.current().tls.is_some());
}

#[test]
fn a_start_with_an_empty_file_serves_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    write(&path, "");
    let handle = WebConfigHandle::load(&path, &ServerConfig::default()).unwrap();
    assert!(handle.current().tls.is_none() && !handle.current().requires_auth());
}

#[test]
fn a_file_that_never_ends_is_refused_not_read_into_memory() {
    let error =
        WebConfigHandle::load(Path::new("/dev/zero"), &ServerConfig::default()).err().unwrap();
    assert!(error.to_string().contains("larger than"), "{error}");
}

const DEADLINE: Duration = Duration::from_secs(10);

fn with_users(budget: u32) -> (tempfile::TempDir, WebConfigHandle) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    write(&path, &users(&["alice"]));
    let server = ServerConfig { auth_failure_budget: budget, ..ServerConfig::default() };
    let handle = WebConfigHandle::load(&path, &server).unwrap();
    (dir, handle)
}

#[tokio::test]
async fn a_peer_past_its_failure_budget_is_refused_unchecked_and_others_are_not() {
    let (_dir, handle) = with_users(3);
    let state = handle.current();
    let attacker = Some(IpAddr::from([10, 0, 0, 66]));
    let scraper = Some(IpAddr::from([10, 0, 0, 1]));
    for guess in ["a", "b", "c"] {
        let verdict = handle.verify(&state, attacker, "alice", guess, DEADLINE).await;
        assert_eq!(verdict, Verdict::Refused, "{guess}");
    }
    // Spent: even the right password (not yet checked for anyone) is
    // refused unchecked from there.
    assert_eq!(handle.verify(&state, attacker, "alice", "d", DEADLINE).await, Verdict::Limited);
    assert_eq!(
        handle.verify(&state, attacker, "alice", "secret", DEADLINE).await,
        Verdict::Limited
    );
    // Unknown users count too (no user enumeration for free).
    let prober = Some(IpAddr::from([10, 0, 0, 67]));
    for _ in 0..3 {
        assert_eq!(handle.verify(&state, prober, "mallory", "x", DEADLINE).await, Verdict::Refused);
    }
    assert_eq!(handle.verify(&state, prober, "alice", "x", DEADLINE).await, Verdict::Limited);
    // Everyone else is untouched; once checked, the pair is cached for all.
    let accepted = |peer| handle.verify(&state, peer, "alice", "secret", DEADLINE);
    assert_eq!(accepted(scraper).await, Verdict::Accepted);
    assert_eq!(accepted(attacker).await, Verdict::Accepted);
    let other = Some(IpAddr::from([10, 0, 0, 2]));
    assert_eq!(handle.verify(&state, other, "alice", "wrong", DEADLINE).await, Verdict::Refused);
}

#[tokio::test(start_paused = true)]
async fn the_failure_budget_comes_back_after_its_window() {
    let (_dir, handle) = with_users(1);
    let state = handle.current();
    let peer = Some(IpAddr::from([10, 0, 0, 66]));
    assert_eq!(handle.verify(&state, peer, "bob", "x", DEADLINE).await, Verdict::Refused);
    assert_eq!(handle.verify(&state, peer, "alice", "secret", DEADLINE).await, Verdict::Limited);
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(handle.verify(&state, peer, "alice", "secret", DEADLINE).await, Verdict::Accepted);
}
