//! Connections held longer than `server.header_read_timeout`: the timeout
//! bounds the wait for the first request head only, never a connection
//! that is answering, streaming or receiving (issue 35). Real sockets on
//! 127.0.0.1, a 100 ms header timeout, and bounded waits.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use super::{ServeSettings, serve};
use crate::telemetry::Telemetry;

const HEAD_TIMEOUT: Duration = Duration::from_millis(100);
/// Several header timeouts: what each test holds its connection for.
const HELD: Duration = Duration::from_millis(600);

/// A server on an ephemeral loopback port with a stream route (an event
/// every 50 ms for `HELD`) and an echo route that counts the bytes of a
/// body however slowly they arrive.
async fn server() -> (SocketAddr, CancellationToken) {
    let router = Router::new()
        .route("/ping", get(|| async { "pong" }))
        .route(
            "/stream",
            get(|| async {
                let events = futures_util::stream::unfold(0u32, |n| async move {
                    if Duration::from_millis(50) * n > HELD {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Some((
                        Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {n}\n\n"))),
                        n + 1,
                    ))
                });
                ([("content-type", "text/event-stream")], Body::from_stream(events))
            }),
        )
        .route("/count", post(|body: Bytes| async move { body.len().to_string() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let telemetry = Telemetry::new("simulator").unwrap();
    let settings = ServeSettings {
        header_read_timeout: HEAD_TIMEOUT,
        idle_timeout: Duration::from_secs(5),
        max_connections: 8,
    };
    let cancel = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        router,
        None,
        settings,
        telemetry.http_series().unwrap(),
        cancel.clone(),
    ));
    (addr, cancel)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

/// Reads one answer with a `content-length` body; `None` when the server
/// closed the connection first.
fn answer(stream: &mut TcpStream) -> Option<String> {
    let mut text = Vec::new();
    let mut byte = [0u8; 1];
    while !text.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        text.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&text).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some(String::from_utf8_lossy(&body).into_owned())
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_outlives_the_header_timeout() {
    let (addr, cancel) = server().await;
    let answers = blocking(move || {
        let mut stream = connect(addr);
        let mut answers = Vec::new();
        for _ in 0..3 {
            let sent = stream.write_all(b"GET /ping HTTP/1.1\r\nhost: x\r\n\r\n").is_ok();
            answers.push(if sent { answer(&mut stream) } else { None });
            std::thread::sleep(HELD / 2);
        }
        answers
    })
    .await;
    assert_eq!(answers, vec![Some("pong".to_owned()); 3], "every request on one connection");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_runs_past_the_header_timeout() {
    let (addr, cancel) = server().await;
    let body = blocking(move || {
        let mut stream = connect(addr);
        stream.write_all(b"GET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
        let mut all = String::new();
        let _ = stream.read_to_string(&mut all);
        all
    })
    .await;
    let events = body.matches("data: ").count();
    assert!(events >= 12, "the stream was cut after {events} events:\n{body}");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_is_received_whole() {
    let (addr, cancel) = server().await;
    let counted = blocking(move || {
        let mut stream = connect(addr);
        let chunks = 12;
        let head =
            format!("POST /count HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n", chunks * 1024);
        stream.write_all(head.as_bytes()).unwrap();
        for _ in 0..chunks {
            std::thread::sleep(HELD / chunks as u32);
            if stream.write_all(&[b'x'; 1024]).is_err() {
                return None;
            }
        }
        answer(&mut stream)
    })
    .await;
    assert_eq!(counted.as_deref(), Some("12288"));
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_no_head_is_still_closed() {
    let (addr, cancel) = server().await;
    let closed = blocking(move || {
        let mut stream = connect(addr);
        stream.write_all(b"GET /ping HT").unwrap();
        let mut rest = Vec::new();
        matches!(stream.read_to_end(&mut rest), Ok(0))
    })
    .await;
    assert!(closed, "a partial head is closed after the header timeout, with no answer");
    cancel.cancel();
}
