//! Connections held longer than `server.header_read_timeout`: the timeout
//! bounds the wait for the first request head only, never a connection
//! that is answering, streaming or receiving (issue 35). Clients holding
//! every connection, idle or streaming, do not starve `/healthz` (issue 35,
//! item 5). Real sockets on 127.0.0.1, small caps, and bounded waits.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use super::{ServeSettings, serve};
use crate::telemetry::{HttpSeries, Telemetry};

const HEAD_TIMEOUT: Duration = Duration::from_millis(100);
/// Several header timeouts: what each test holds its connection for.
const HELD: Duration = Duration::from_millis(600);

/// A server on an ephemeral loopback port with a stream route (an event
/// every 50 ms for `HELD`) and an echo route that counts the bytes of a
/// body however slowly they arrive.
async fn server() -> (SocketAddr, CancellationToken) {
    server_with(ServeSettings {
        header_read_timeout: HEAD_TIMEOUT,
        idle_timeout: Duration::from_secs(5),
        max_connections: 8,
        reserved_connections: 2,
        write_stall_timeout: Duration::from_secs(5),
    })
    .await
}

async fn server_with(settings: ServeSettings) -> (SocketAddr, CancellationToken) {
    let (addr, cancel, _) = counted_server(settings).await;
    (addr, cancel)
}

/// [`server_with`], and its telemetry (the connection counters).
async fn counted_server(settings: ServeSettings) -> (SocketAddr, CancellationToken, HttpSeries) {
    let router = Router::new()
        .route("/ping", get(|| async { "pong" }))
        .route("/healthz", get(|| async { "ok" }))
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
        .route(
            "/long",
            get(|| async {
                // Until the client goes, at most 10 s.
                let events = futures_util::stream::unfold(0u32, |n| async move {
                    if n >= 200 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Some((Ok::<_, std::convert::Infallible>(Bytes::from("data: x\n\n")), n + 1))
                });
                ([("content-type", "text/event-stream")], Body::from_stream(events))
            }),
        )
        .route(
            "/big",
            get(|| async {
                // 16 MiB, far more than the socket buffers hold.
                let parts = futures_util::stream::iter((0..256).map(|_| {
                    Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; 64 * 1024]))
                }));
                Body::from_stream(parts)
            }),
        )
        .route("/count", post(|body: Bytes| async move { body.len().to_string() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let series = Telemetry::new("simulator").unwrap().http_series().unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(serve(listener, router, None, settings, series.clone(), cancel.clone()));
    (addr, cancel, series)
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

/// Caps of 8 connections and 2 reserved, and a header timeout long enough
/// that only eviction frees a silent connection's slot.
const CAPPED: ServeSettings = ServeSettings {
    header_read_timeout: Duration::from_secs(5),
    idle_timeout: Duration::from_secs(5),
    max_connections: 8,
    reserved_connections: 2,
    write_stall_timeout: Duration::from_secs(5),
};

async fn capped_server() -> (SocketAddr, CancellationToken) {
    server_with(CAPPED).await
}

/// One request on a new connection; `None` when it was closed unanswered.
fn get_once(addr: SocketAddr, path: &str) -> Option<(String, String)> {
    let mut stream = connect(addr);
    let head = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    let mut all = String::new();
    stream.read_to_string(&mut all).ok()?;
    let (head, body) = all.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.to_owned();
    Some((status, body.to_owned()))
}

fn probes(addr: SocketAddr, count: usize) -> usize {
    (0..count)
        .filter(|_| get_once(addr, "/healthz").is_some_and(|(status, _)| status == "200"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_that_reopen_when_closed_do_not_starve_healthz() {
    let (addr, cancel, series) = counted_server(CAPPED).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // 10 silent holders for 8 + 2 slots, each reopening 10 ms after the
    // server closes it.
    let holders: Vec<_> = (0..10)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut reopened = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && reopened < 500 {
                    let Ok(mut stream) = TcpStream::connect(addr) else { continue };
                    stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
                    let mut byte = [0u8; 1];
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        match stream.read(&mut byte) {
                            Ok(_) => break,
                            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => break,
                        }
                    }
                    reopened += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered = blocking(move || probes(addr, 10)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for holder in holders {
        blocking(move || holder.join().unwrap()).await;
    }
    assert_eq!(answered, 10, "/healthz answered {answered} of 10 probes");
    assert!(series.evicted.get() > 0, "the idle connections closed to make room are counted");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_holding_every_connection_leave_healthz_a_reserved_one() {
    let (addr, cancel) = capped_server().await;
    let (answered, other) = blocking(move || {
        let streams: Vec<TcpStream> = (0..8)
            .map(|_| {
                let mut stream = connect(addr);
                stream.write_all(b"GET /long HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
                let mut first = [0u8; 64];
                let _ = stream.read(&mut first).unwrap();
                stream
            })
            .collect();
        let answered = probes(addr, 5);
        let other = get_once(addr, "/ping");
        drop(streams);
        (answered, other)
    })
    .await;
    assert_eq!(answered, 5, "/healthz answered {answered} of 5 probes");
    let (status, body) = other.expect("a reserved connection answers, not closes");
    assert_eq!(status, "503", "{body}");
    assert!(body.contains("server.reserved_connections"), "{body}");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_silent_connection_goes_before_a_kept_alive_one() {
    let (addr, cancel) = capped_server().await;
    let (again, newcomer) = blocking(move || {
        let mut kept = connect(addr);
        kept.write_all(b"GET /ping HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        assert_eq!(answer(&mut kept).as_deref(), Some("pong"));
        std::thread::sleep(Duration::from_millis(50));
        // 7 silent ones, newer than the kept-alive connection's last answer.
        let silent: Vec<TcpStream> = (0..7).map(|_| connect(addr)).collect();
        std::thread::sleep(Duration::from_millis(50));
        let newcomer = get_once(addr, "/ping");
        let again = kept.write_all(b"GET /ping HTTP/1.1\r\nhost: x\r\n\r\n").is_ok();
        let again = if again { answer(&mut kept) } else { None };
        drop(silent);
        (again, newcomer)
    })
    .await;
    assert_eq!(newcomer.map(|(status, _)| status).as_deref(), Some("200"));
    assert_eq!(again.as_deref(), Some("pong"), "the kept-alive connection was evicted");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_connection_streaming_and_the_reserve_busy_a_new_one_is_closed_and_counted() {
    let (addr, cancel, series) = counted_server(ServeSettings {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        max_connections: 2,
        reserved_connections: 0,
        write_stall_timeout: Duration::from_secs(5),
    })
    .await;
    let (refused, probe) = blocking(move || {
        let streams: Vec<TcpStream> = (0..2)
            .map(|_| {
                let mut stream = connect(addr);
                stream.write_all(b"GET /long HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
                let _ = stream.read(&mut [0u8; 64]).unwrap();
                stream
            })
            .collect();
        let probe = get_once(addr, "/healthz");
        drop(streams);
        (probe.is_none(), probe)
    })
    .await;
    assert!(refused, "answered with no slot free: {probe:?}");
    assert_eq!(series.rejected.get(), 1, "the refused connection is counted");
    cancel.cancel();
}

/// A client that asks for a large answer and stops reading it loses the
/// connection after `server.write_stall_timeout`, instead of holding it,
/// its slot and the answer's buffers for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_an_answer_loses_the_connection() {
    let (addr, cancel) = server_with(ServeSettings {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        max_connections: 8,
        reserved_connections: 2,
        write_stall_timeout: Duration::from_millis(300),
    })
    .await;
    let received = blocking(move || {
        let mut client = TcpStream::connect(addr).unwrap();
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        client.write_all(b"GET /big HTTP/1.1\r\nhost: t\r\n\r\n").unwrap();
        // Reads nothing for several stall timeouts, then everything left.
        std::thread::sleep(Duration::from_millis(1500));
        let mut received = 0usize;
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match client.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => received += read,
            }
        }
        received
    })
    .await;
    assert!(received < 16 * 1024 * 1024, "the answer was cut: {received} bytes of 16 MiB");
    cancel.cancel();
}
