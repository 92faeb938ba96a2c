//! A tiny blocking HTTP/1.1 GET client over `std::net::TcpStream`: enough to
//! talk to the daemon over a real socket without an HTTP client crate.
//!
//! Sends `Connection: close` and reads to the end of the stream; decodes
//! `Transfer-Encoding: chunked` and honours `Content-Length`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Connect, read and write deadline of one request.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(key, _)| *key == name).map(|(_, value)| value.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics (fails the test) with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        match serde_json::from_slice(&self.body) {
            Ok(value) => value,
            Err(error) => panic!("response body is not JSON ({error}): {}", self.text()),
        }
    }
}

/// `GET path` from the server at `addr`.
pub fn get(addr: SocketAddr, path: &str) -> Result<Response, String> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .map_err(|error| format!("connect {addr}: {error}"))?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(|error| error.to_string())?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(|error| error.to_string())?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: vramd-e2e\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(|error| format!("send GET {path}: {error}"))?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|error| format!("read GET {path}: {error}"))?;
    parse(&raw).map_err(|error| format!("GET {path}: {error}"))
}

/// `POST path` with a JSON `body` to the server at `addr`.
pub fn post(addr: SocketAddr, path: &str, body: &str) -> Result<Response, String> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .map_err(|error| format!("connect {addr}: {error}"))?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(|error| error.to_string())?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(|error| error.to_string())?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: vramd-e2e\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).map_err(|error| format!("send POST {path}: {error}"))?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|error| format!("read POST {path}: {error}"))?;
    parse(&raw).map_err(|error| format!("POST {path}: {error}"))
}

/// `PUT path` with a binary `body` to the server at `addr`.
pub fn put(addr: SocketAddr, path: &str, body: &[u8]) -> Result<Response, String> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .map_err(|error| format!("connect {addr}: {error}"))?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(|error| error.to_string())?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(|error| error.to_string())?;
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: vramd-e2e\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    // A refused upload may be answered and closed before all of it is sent.
    let _sent = stream.write_all(&request);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|error| format!("read PUT {path}: {error}"))?;
    parse(&raw).map_err(|error| format!("PUT {path}: {error}"))
}

fn parse(raw: &[u8]) -> Result<Response, String> {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {} bytes", raw.len()))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|error| error.to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let mut response = Response { status, headers, body: raw[split + 4..].to_vec() };
    if response.header("transfer-encoding").is_some_and(|value| value.contains("chunked")) {
        response.body = dechunk(&response.body)?;
    } else if let Some(length) = response.header("content-length") {
        let length: usize = length.parse().map_err(|_| format!("bad content-length {length}"))?;
        if response.body.len() < length {
            return Err(format!("body cut short: {} of {length} bytes", response.body.len()));
        }
        response.body.truncate(length);
    }
    Ok(response)
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let end = rest
            .windows(2)
            .position(|window| window == b"\r\n")
            .ok_or("chunk size line not terminated")?;
        let size_line = std::str::from_utf8(&rest[..end]).map_err(|error| error.to_string())?;
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_line:?}"))?;
        rest = &rest[end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err("chunk cut short".to_owned());
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[test]
fn http_parser_reads_content_length_and_chunked_bodies() {
    let plain =
        parse(b"HTTP/1.1 404 Not Found\r\nContent-Type: a/b\r\nContent-Length: 2\r\n\r\nhi")
            .unwrap();
    assert_eq!(
        (plain.status, plain.header("content-type"), plain.text().as_str()),
        (404, Some("a/b"), "hi")
    );
    let chunked = parse(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
    )
    .unwrap();
    assert_eq!(chunked.text(), "abcde");
    assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab").is_err());
}
