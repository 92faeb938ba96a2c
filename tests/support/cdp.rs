//! A headless Chromium driven over the Chrome DevTools Protocol, for the
//! live page's browser test (tests/ui.rs).
//!
//! Chromium is started with `--remote-debugging-port=0`; the port it picked
//! is read from its stderr, the page target's WebSocket from `/json/list`.
//! The WebSocket client is the few lines CDP needs (masked text frames out,
//! unmasked text frames in) rather than a dependency. The protocol rather
//! than `--headless --dump-dom --virtual-time-budget`: virtual time waits
//! for pending fetches, so with the alert stream open the dump never came,
//! and console errors, waiting for an alert and resizing need it anyway.
//! Every read has a
//! deadline; Chromium is killed when the [`Browser`] is dropped.
#![allow(clippy::disallowed_types)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Deadline;

/// Where the Debian package `chromium` puts the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";

const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A running headless Chromium.
pub struct Browser {
    child: Child,
    pub devtools: SocketAddr,
}

impl Browser {
    /// Starts Chromium with its profile in `profile` and `extra` flags.
    pub fn launch(profile: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1280,900",
            ])
            .args(extra)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run {CHROMIUM}: {error}; scripts/test.sh installs it (Debian package \
                     `chromium`)"
                )
            });
        let stderr = child.stderr.take().expect("piped stderr");
        let (sender, receiver) = std::sync::mpsc::channel();
        // Keeps draining stderr after the port is found so Chromium never
        // blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("DevTools listening on ws://").nth(1) {
                    let _ = sender.send(rest.split('/').next().unwrap_or_default().to_owned());
                }
            }
        });
        let port = receiver.recv_timeout(IO_TIMEOUT);
        let mut browser = Self { child, devtools: "127.0.0.1:0".parse().unwrap() };
        let address =
            port.unwrap_or_else(|_| panic!("Chromium did not announce its DevTools port"));
        browser.devtools = address.parse().unwrap();
        browser
    }

    /// The first page tab.
    pub fn page(&self) -> Page {
        let deadline = Deadline::after(IO_TIMEOUT);
        loop {
            let listed = targets(self.devtools);
            let page = listed.as_ref().and_then(Value::as_array).and_then(|targets| {
                targets
                    .iter()
                    .find(|target| target["type"] == "page")
                    .and_then(|target| target["webSocketDebuggerUrl"].as_str())
            });
            if let Some(url) = page {
                return Page::connect(self.devtools, url);
            }
            assert!(!deadline.passed(), "Chromium lists no page target");
            crate::support::pause();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /json/list`: Chromium writes its headers without a space after
/// the colon, which the tests' HTTP helper does not read.
fn targets(devtools: SocketAddr) -> Option<Value> {
    let mut stream = TcpStream::connect_timeout(&devtools, IO_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
    let request =
        format!("GET /json/list HTTP/1.1\r\nHost: {devtools}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).ok()?;
        raw.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&raw);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            if read == 0 {
                return None;
            }
            continue;
        };
        let length = head
            .lines()
            .find_map(|line| {
                line.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|n| n.trim().parse::<usize>())
            })
            .and_then(Result::ok);
        if read == 0 || length.is_some_and(|length| body.len() >= length) {
            return serde_json::from_str(body).ok();
        }
    }
}

/// One tab, spoken to over its WebSocket.
pub struct Page {
    stream: TcpStream,
    next_id: u64,
    /// Every event received so far, in order.
    pub events: Vec<Value>,
    /// What to answer an HTTP authentication challenge with.
    credentials: Option<(String, String)>,
}

impl Page {
    fn connect(devtools: SocketAddr, url: &str) -> Self {
        let path = url.split_once("//").and_then(|(_, rest)| rest.find('/').map(|at| &rest[at..]));
        let path = path.expect("a WebSocket URL with a path");
        let mut stream = TcpStream::connect_timeout(&devtools, IO_TIMEOUT).unwrap();
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let handshake = format!(
            "GET {path} HTTP/1.1\r\nHost: {devtools}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dnJhbWQtbGl2ZS1wYWdlLQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(handshake.as_bytes()).unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
            assert!(head.len() < 8192, "endless handshake answer");
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "WebSocket refused: {head}");
        Self { stream, next_id: 0, events: Vec::new(), credentials: None }
    }

    /// Answers every HTTP authentication challenge with these credentials,
    /// as a user typing them into the browser's prompt would.
    pub fn authenticate(&mut self, user: &str, password: &str) {
        self.credentials = Some((user.to_owned(), password.to_owned()));
        self.call("Fetch.enable", json!({"handleAuthRequests": true}));
    }

    /// Sends a command without waiting for its answer; its id.
    fn post(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let message = json!({"id": self.next_id, "method": method, "params": params}).to_string();
        self.send(message.as_bytes());
        self.next_id
    }

    /// Lets a request the Fetch domain paused go on, with the credentials
    /// when it paused on a challenge.
    fn resume(&mut self, event: &Value) {
        let request = event["params"]["requestId"].clone();
        match (event["method"].as_str(), &self.credentials) {
            (Some("Fetch.requestPaused"), _) => {
                self.post("Fetch.continueRequest", json!({"requestId": request}));
            }
            (Some("Fetch.authRequired"), Some((user, password))) => {
                let answer = json!({"response": "ProvideCredentials", "username": user, "password": password});
                self.post(
                    "Fetch.continueWithAuth",
                    json!({"requestId": request, "authChallengeResponse": answer}),
                );
            }
            _ => {}
        }
    }

    /// Sends a command and waits for its answer, keeping events met on the way.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.post(method, params);
        loop {
            let message: Value = serde_json::from_slice(&self.receive()).unwrap();
            if message["id"] == id {
                assert!(message.get("error").is_none(), "{method} failed: {message}");
                return message["result"].clone();
            }
            if message.get("method").is_some() {
                self.resume(&message);
                self.events.push(message);
            }
        }
    }

    /// Evaluates `expression` in the page, awaiting a promise; its value.
    pub fn evaluate(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(result.get("exceptionDetails").is_none(), "{expression} threw: {result}");
        result["result"]["value"].clone()
    }

    /// Polls `expression` until it is `true` or `limit` passes.
    pub fn wait_for(&mut self, expression: &str, limit: Duration) -> bool {
        let deadline = Deadline::after(limit);
        loop {
            if self.evaluate(expression) == Value::Bool(true) {
                return true;
            }
            if deadline.passed() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the page at the current viewport width, full height.
    pub fn screenshot(&mut self) -> Vec<u8> {
        let result = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        base64_decode(result["data"].as_str().expect("screenshot data"))
    }

    /// The console errors, uncaught exceptions and error log entries
    /// (CSP violations, failed loads) seen so far.
    pub fn errors(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|event| match event["method"].as_str() {
                Some("Runtime.consoleAPICalled") => event["params"]["type"] == "error",
                Some("Runtime.exceptionThrown") => true,
                Some("Log.entryAdded") => event["params"]["entry"]["level"] == "error",
                _ => false,
            })
            .collect()
    }

    fn send(&mut self, payload: &[u8]) {
        // Client frames must be masked; the key's value does not matter.
        let mask = [0x37, 0x5a, 0x0c, 0x91];
        let mut frame = vec![0x81];
        match payload.len() {
            length @ 0..=125 => frame.push(0x80 | length as u8),
            length @ 126..=0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(length as u16).to_be_bytes());
            }
            length => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(length as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(at, byte)| byte ^ mask[at % 4]));
        self.stream.write_all(&frame).unwrap();
    }

    /// One whole message (continuation frames joined; pings skipped).
    fn receive(&mut self) -> Vec<u8> {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.stream.read_exact(&mut head).expect("a WebSocket frame from Chromium");
            let length = match head[1] & 0x7f {
                126 => {
                    let mut bytes = [0u8; 2];
                    self.stream.read_exact(&mut bytes).unwrap();
                    u64::from(u16::from_be_bytes(bytes))
                }
                127 => {
                    let mut bytes = [0u8; 8];
                    self.stream.read_exact(&mut bytes).unwrap();
                    u64::from_be_bytes(bytes)
                }
                short => u64::from(short),
            };
            let mut payload = vec![0u8; usize::try_from(length).unwrap()];
            self.stream.read_exact(&mut payload).unwrap();
            match head[0] & 0x0f {
                0x8 => panic!("Chromium closed the DevTools connection"),
                0x9 | 0xa => continue,
                _ => message.extend_from_slice(&payload),
            }
            if head[0] & 0x80 != 0 {
                return message;
            }
        }
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |byte: u8| match byte {
        b'A'..=b'Z' => byte - b'A',
        b'a'..=b'z' => byte - b'a' + 26,
        b'0'..=b'9' => byte - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {byte}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|byte| *byte != b'=').map(value).collect();
    digits
        .chunks(4)
        .flat_map(|chunk| {
            let bits = chunk.iter().fold(0u32, |bits, digit| (bits << 6) | u32::from(*digit))
                << (6 * (4 - chunk.len()));
            let bytes = bits.to_be_bytes();
            bytes[1..chunk.len()].to_vec()
        })
        .collect()
}
