//! The secure HTTP surface against real clients: the vramd binary on a
//! simulated host with an exporter-toolkit web configuration, talked to by
//! curl (OpenSSL) over TLS, with basic auth and with client certificates
//! of each `client_auth_type`; certificates made here with rcgen, none
//! checked in; SIGHUP reloads of it, and a flood of wrong passwords.
//! The hostile clients over plain TCP are in `tests/hostile_clients.rs`.
//!
//! Needs `curl`. Every wait is bounded; every daemon is killed at the end.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Real processes and sockets: wall-clock waits are what this test measures.
#![allow(clippy::disallowed_types)]

#[path = "support/pki.rs"]
mod pki;
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};

use pki::Pki;
use support::{Deadline, Process, SERVE, WAIT, pause, run};

const PASSWORD: &str = "correct horse";

/// What curl saw: the HTTP status (0: no HTTP answer), headers and body,
/// and its verbose log (the TLS handshake).
#[derive(Debug)]
struct Curl {
    status: u16,
    headers: String,
    body: String,
    log: String,
}

fn curl(pki: &Pki, url: &str, extra: &[&str]) -> Curl {
    let headers = pki.path("curl-headers");
    let _ = std::fs::remove_file(&headers);
    let output = Command::new("curl")
        .args(["-sS", "-v", "--max-time", "10", "--cacert"])
        .arg(pki.path("ca.pem"))
        .arg("-D")
        .arg(&headers)
        .args(["-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("curl runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    Curl {
        status: status.trim().parse().unwrap_or(0),
        headers: std::fs::read_to_string(&headers).unwrap_or_default().to_ascii_lowercase(),
        body: body.to_owned(),
        log: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn client(pki: &Pki, name: &str) -> Vec<String> {
    vec![
        "--cert".into(),
        pki.path(&format!("{name}.pem")).display().to_string(),
        "--key".into(),
        pki.path(&format!("{name}-key.pem")).display().to_string(),
    ]
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Starts vramd with `web` and extra flags; returns it and `https://…`.
fn start(web: &Path, extra: &[&str]) -> (Process, SocketAddr) {
    start_with(web, extra, &[])
}

/// [`start`] with more environment variables.
fn start_with(web: &Path, extra: &[&str], env: &[(&str, &str)]) -> (Process, SocketAddr) {
    let mut args =
        vec!["--simulate", "steady-inference", "--web.config.file", web.to_str().unwrap()];
    args.extend(SERVE);
    args.extend(extra);
    let mut variables = vec![("VRAMD_SERVER__WEB_CONFIG_POLL_INTERVAL", "1s")];
    variables.extend(env);
    let mut daemon = Process::spawn(&args, &variables);
    let addr = daemon.listening();
    (daemon, addr)
}

/// Waits until the daemon has logged `count` reloads of the web config
/// (successful or not, as `message` says).
fn wait_log(daemon: &Process, message: &str, count: usize) {
    let deadline = Deadline::after(WAIT);
    while daemon.log().iter().filter(|line| line["message"] == message).count() < count {
        assert!(
            !deadline.passed(),
            "no {count}x `{message}` within {WAIT:?}:\n{}",
            daemon.stderr()
        );
        pause();
    }
}

#[test]
fn tls_with_basic_auth_guards_everything_but_healthz() {
    let pki = Pki::new();
    pki.leaf("server", &["localhost", "127.0.0.1"], false, false);
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let web = pki.web_config(&format!(
        "{}basic_auth_users:\n  prometheus: {hash}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n",
        pki.tls("server", "NoClientCert")
    ));
    let (daemon, addr) = start(&web, &[]);
    let base = format!("https://localhost:{}", addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", addr.port());
    let get = |path: &str, extra: &[&str]| {
        let mut args = vec!["--resolve", resolve.as_str()];
        args.extend(extra);
        curl(&pki, &format!("{base}{path}"), &args)
    };

    let health = get("/healthz", &[]);
    assert_eq!(health.status, 200, "a probe needs no credentials: {health:?}");

    let anonymous = get("/metrics", &[]);
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    assert!(anonymous.headers.contains("www-authenticate: basic"), "{anonymous:?}");
    assert!(anonymous.body.contains("\"code\":\"unauthorized\""), "{anonymous:?}");

    let wrong = get("/api/v1/devices", &["-u", "prometheus:wrong"]);
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let user = format!("prometheus:{PASSWORD}");
    let right = get("/metrics", &["-u", &user, "-H", "Accept-Encoding: gzip", "-o", "/dev/null"]);
    assert_eq!(right.status, 200, "{right:?}");
    assert!(right.headers.contains("content-encoding: gzip"), "{right:?}");
    assert!(right.headers.contains("x-frame-options: deny"), "{right:?}");
    let cached = get("/api/v1/devices", &["-u", &user]);
    assert_eq!(cached.status, 200, "{cached:?}");

    // Plain HTTP to the TLS port: a readable JSON answer, not a reset.
    let plain = curl(&pki, &format!("http://127.0.0.1:{}/metrics", addr.port()), &[]);
    assert_eq!(plain.status, 400, "{plain:?}");
    assert!(plain.body.contains("tls_required"), "{plain:?}");

    // Rotation: a new certificate (new subject) is served by the next
    // handshake, with no restart.
    pki.leaf("rotated", &["localhost", "127.0.0.1"], false, false);
    std::fs::copy(pki.path("rotated.pem"), pki.path("server.pem")).unwrap();
    std::fs::copy(pki.path("rotated-key.pem"), pki.path("server-key.pem")).unwrap();
    let deadline = Deadline::after(WAIT);
    loop {
        let after = get("/healthz", &[]);
        if after.status == 200 && after.log.contains("CN=rotated") {
            break;
        }
        assert!(!deadline.passed(), "the rotated certificate was never served: {after:?}");
        pause();
    }

    // A file that goes bad keeps the last good configuration.
    std::fs::write(pki.path("server-key.pem"), "not a key").unwrap();
    wait_log(&daemon, "web configuration not reloaded; keeping the last good one", 1);
    let still = get("/metrics", &["-u", &user, "-o", "/dev/null"]);
    assert_eq!(still.status, 200, "{still:?}");
    let metrics = get("/metrics", &["-u", &user]);
    assert!(metrics.body.contains("vramd_web_config_reload_errors_total 1"), "{}", metrics.body);
    assert!(metrics.body.contains("vramd_http_connections_open"), "{}", metrics.body);
}

#[test]
fn a_reporter_s_bearer_token_opens_every_ingest_write_route_under_basic_auth() {
    // A reporter on another host holds ingest.token_file's token, not the
    // web configuration's passwords: reports, OOM events and snapshot
    // uploads all take it; a wrong one is refused; reads still need the
    // passwords.
    let pki = Pki::new();
    pki.leaf("server", &["localhost", "127.0.0.1"], false, false);
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let web = pki.web_config(&format!(
        "{}basic_auth_users:\n  prometheus: {hash}\n",
        pki.tls("server", "NoClientCert")
    ));
    let token_file = pki.path("ingest-token");
    std::fs::write(&token_file, "reporter secret\n").unwrap();
    let env = [("VRAMD_INGEST__TOKEN_FILE", token_file.to_str().unwrap())];
    let (_daemon, addr) = start_with(&web, &[], &env);
    let url = |path: &str| format!("https://127.0.0.1:{}{path}", addr.port());
    let send = |method: &str, path: &str, token: &str| {
        let bearer = format!("Authorization: Bearer {token}");
        let args =
            ["-X", method, "-H", &bearer, "-H", "Content-Type: application/json", "-d", "{}"];
        curl(&pki, &url(path), &args)
    };
    for (method, path) in [
        ("POST", "/api/v1/allocator-reports"),
        ("POST", "/api/v1/oom-events"),
        ("PUT", "/api/v1/oom-events/1/snapshot"),
    ] {
        let right = send(method, path, "reporter secret");
        assert_ne!(right.status, 401, "{method} {path}: {right:?}");
        assert!(!right.body.contains("unauthorized"), "{method} {path}: {right:?}");
        let wrong = send(method, path, "guessed");
        assert_eq!(wrong.status, 401, "{method} {path}: {wrong:?}");
        assert!(wrong.body.contains("bad_token"), "{method} {path}: {wrong:?}");
    }
    let read =
        curl(&pki, &url("/api/v1/oom-events"), &["-H", "Authorization: Bearer reporter secret"]);
    assert_eq!(read.status, 401, "reads need the web configuration's credentials: {read:?}");
}

#[test]
fn each_client_auth_type_is_enforced() {
    let pki = Pki::new();
    pki.leaf("server", &["localhost", "127.0.0.1"], false, false);
    pki.leaf("client", &["client.vramd.test"], false, false);
    pki.leaf("stranger", &["stranger.vramd.test"], true, false);
    let web = pki.web_config(&pki.tls("server", "RequireAndVerifyClientCert"));
    let (daemon, addr) = start(&web, &[]);
    let url = |path: &str| format!("https://127.0.0.1:{}{path}", addr.port());
    let good = client(&pki, "client");
    let stranger = client(&pki, "stranger");
    let status = |path: &str, extra: &[String]| curl(&pki, &url(path), &refs(extra)).status;

    // RequireAndVerifyClientCert: no certificate, or one from another CA,
    // never completes a handshake.
    assert_eq!(status("/metrics", &good), 200);
    assert_eq!(status("/healthz", &[]), 0);
    assert_eq!(status("/metrics", &stranger), 0);

    // client_allowed_sans: the CA's certificate must also carry a listed name.
    pki.web_config(&format!(
        "{}  client_allowed_sans: [other.vramd.test]\n",
        pki.tls("server", "RequireAndVerifyClientCert")
    ));
    wait_log(&daemon, "web configuration reloaded", 1);
    assert_eq!(status("/metrics", &good), 0);

    // VerifyClientCertIfGiven: no certificate reaches /healthz only.
    pki.web_config(&pki.tls("server", "VerifyClientCertIfGiven"));
    wait_log(&daemon, "web configuration reloaded", 2);
    assert_eq!(status("/metrics", &good), 200);
    assert_eq!(status("/healthz", &[]), 200);
    assert_eq!(status("/metrics", &[]), 401);
    assert_eq!(status("/metrics", &stranger), 0);

    // RequireAnyClientCert checks no certificate, so it authenticates
    // nobody: a reload to it would drop the verified-certificate
    // requirement and is refused; the running policy stays.
    pki.web_config(&pki.tls("server", "RequireAnyClientCert"));
    wait_log(&daemon, "web configuration not reloaded; keeping the last good one", 1);
    assert!(daemon.stderr().contains("would turn off the client certificate requirement"));
    assert_eq!(status("/metrics", &[]), 401);
    drop(daemon);

    // Started with it, any certificate completes the handshake and
    // nothing else is asked.
    let (daemon, addr) = start(&web, &[]);
    let url = |path: &str| format!("https://127.0.0.1:{}{path}", addr.port());
    let status = |path: &str, extra: &[String]| curl(&pki, &url(path), &refs(extra)).status;
    assert_eq!(status("/metrics", &stranger), 200);
    assert_eq!(status("/metrics", &[]), 0);

    // RequestClientCert and NoClientCert: none needed (reloads that keep
    // the same protection).
    pki.web_config(&pki.tls("server", "RequestClientCert"));
    wait_log(&daemon, "web configuration reloaded", 1);
    assert_eq!(status("/metrics", &[]), 200);
    assert_eq!(status("/metrics", &stranger), 200);
    pki.web_config(&pki.tls("server", "NoClientCert"));
    wait_log(&daemon, "web configuration reloaded", 2);
    assert_eq!(status("/metrics", &[]), 200);
}

#[test]
fn an_expired_certificate_fails_the_client_check() {
    let pki = Pki::new();
    pki.leaf("server", &["localhost", "127.0.0.1"], false, true);
    let web = pki.web_config(&pki.tls("server", "NoClientCert"));
    let (_daemon, addr) = start(&web, &[]);
    let answer = curl(&pki, &format!("https://127.0.0.1:{}/healthz", addr.port()), &[]);
    assert_eq!(answer.status, 0, "{answer:?}");
    assert!(answer.log.contains("expired"), "{answer:?}");
}

#[test]
fn a_bad_web_config_stops_start_up_naming_the_field() {
    let pki = Pki::new();
    let web = pki.web_config(
        "tls_server_config:\n  cert_file: /nonexistent.pem\n  key_file: k.pem\n  client_auth_type: Sometimes\n",
    );
    let web = web.to_str().unwrap();
    for args in [
        vec!["--simulate", "steady-inference", "--web.config.file", web, "--listen", "127.0.0.1:0"],
        vec!["check-config", "--web.config.file", web],
    ] {
        let output = run(&args, &[]);
        assert_eq!(output.status.code(), Some(2), "{}", output.stderr);
        assert!(output.stderr.contains("tls_server_config.client_auth_type"), "{}", output.stderr);
    }
    let unknown = pki.web_config("basic_auth_users: {}\nrate_limit: {}\n");
    let output = run(&["check-config", "--web.config.file", unknown.to_str().unwrap()], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", output.stderr);
    assert!(output.stderr.contains("rate_limit"), "{}", output.stderr);
}

/// SIGHUP reads the web configuration again even when its poll would not
/// look for an hour: a new password works at once and the old one stops;
/// a web configuration that no longer loads refuses the whole reload and
/// the users in force stay.
#[test]
fn sighup_reloads_the_web_config_and_refuses_a_bad_one() {
    let pki = Pki::new();
    pki.leaf("server", &["localhost", "127.0.0.1"], false, false);
    let users = |password: &str| {
        let hash = bcrypt::hash(password, 4).unwrap();
        format!("{}basic_auth_users:\n  prometheus: {hash}\n", pki.tls("server", "NoClientCert"))
    };
    let web = pki.web_config(&users("first password"));
    let mut args =
        vec!["--simulate", "steady-inference", "--web.config.file", web.to_str().unwrap()];
    args.extend(SERVE);
    let mut daemon = Process::spawn(&args, &[("VRAMD_SERVER__WEB_CONFIG_POLL_INTERVAL", "1h")]);
    let addr = daemon.listening();
    let status = |password: &str| {
        let user = format!("prometheus:{password}");
        let url = format!("https://127.0.0.1:{}/metrics", addr.port());
        curl(&pki, &url, &["-u", &user, "-o", "/dev/null"]).status
    };
    assert_eq!(status("first password"), 200);

    pki.web_config(&users("second password"));
    daemon.signal("HUP");
    wait_log(&daemon, "configuration reloaded", 1);
    assert_eq!(status("second password"), 200, "{}", daemon.stderr());
    assert_eq!(status("first password"), 401, "{}", daemon.stderr());

    pki.web_config("tls_server_config:\n  cert_file: /nonexistent.pem\n");
    daemon.signal("HUP");
    wait_log(&daemon, "invalid configuration: reload refused, the running configuration stays", 1);
    assert_eq!(status("second password"), 200, "{}", daemon.stderr());

    // An emptied file (an editor saving in two steps) would serve plain
    // HTTP with no auth: refused, TLS and the users stay.
    std::fs::write(&web, "").unwrap();
    daemon.signal("HUP");
    wait_log(&daemon, "invalid configuration: reload refused, the running configuration stays", 2);
    assert!(daemon.stderr().contains("would turn off TLS"), "{}", daemon.stderr());
    assert_eq!(status("second password"), 200, "{}", daemon.stderr());
    assert_eq!(status("wrong password"), 401, "{}", daemon.stderr());
}

/// The status of one plain-HTTP GET, with basic credentials when given.
fn status_with(addr: SocketAddr, path: &str, credentials: Option<&str>) -> u16 {
    use base64::Engine as _;
    let Ok(mut stream) = TcpStream::connect(addr) else { return 0 };
    let _ = stream.set_read_timeout(Some(WAIT));
    let auth = credentials.map_or(String::new(), |pair| {
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        format!("authorization: Basic {encoded}\r\n")
    });
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0)
}

/// A flood of wrong passwords (issue 35, item 2) costs the cached scraper
/// and the liveness probe nothing: bcrypt is never queued in a request
/// slot, and past `server.auth_failure_budget` the flooding address is
/// refused without a check.
#[test]
fn a_wrong_password_flood_costs_scrapes_and_probes_nothing() {
    let pki = Pki::new();
    let hash = bcrypt::hash("right", 10).unwrap();
    let web = pki.web_config(&format!("basic_auth_users:\n  prometheus: {hash}\n"));
    let (daemon, addr) = start(&web, &[]);
    assert_eq!(status_with(addr, "/metrics", Some("prometheus:right")), 200);

    let flood: Vec<_> = (0..4)
        .map(|thread| {
            std::thread::spawn(move || {
                (0..25)
                    .map(|n| {
                        let guess = format!("prometheus:wrong-{thread}-{n}");
                        status_with(addr, "/metrics", Some(&guess))
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    let mut legitimate = Vec::new();
    for _ in 0..20 {
        legitimate.push(("/healthz", status_with(addr, "/healthz", None)));
        legitimate.push(("/metrics", status_with(addr, "/metrics", Some("prometheus:right"))));
        pause();
    }
    let refused: Vec<u16> = flood.into_iter().flat_map(|thread| thread.join().unwrap()).collect();
    assert!(
        legitimate.iter().all(|(_, status)| *status == 200),
        "{legitimate:?}\n{}",
        daemon.stderr()
    );
    assert!(refused.iter().all(|status| [401, 429, 503].contains(status)), "{refused:?}");
    assert!(refused.contains(&429), "the budget of 10 failures was never spent: {refused:?}");
    let checked = refused.iter().filter(|status| **status == 401).count();
    assert!(checked <= 10, "{checked} wrong passwords were checked, beyond the budget of 10");
}
