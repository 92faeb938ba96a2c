//! A connection's writes that make no progress for `server.write_stall_timeout`
//! end the connection: a client that stops reading an answer (a stream, a
//! snapshot download, a history answer) would otherwise hold its
//! connection, its slot and the answer's buffers for ever. A slow reader
//! that keeps taking bytes is never cut: each write that lands restarts
//! the clock.
//!
//! Owns only the wrapper; depends on nothing in the crate.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `inner`, whose writes fail with `TimedOut` once one has waited `limit`.
pub struct StallGuard<I> {
    inner: I,
    limit: Duration,
    /// Set when a write first waits; cleared when any write lands.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> StallGuard<I> {
    pub fn new(inner: I, limit: Duration) -> Self {
        Self { inner, limit, stalled: None }
    }

    fn waited<T>(
        &mut self,
        attempt: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        if attempt.is_ready() {
            self.stalled = None;
            return attempt;
        }
        let limit = self.limit;
        let stall = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stall.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for server.write_stall_timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for StallGuard<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for StallGuard<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let attempt = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.waited(attempt, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let attempt = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.waited(attempt, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let attempt = Pin::new(&mut this.inner).poll_flush(cx);
        this.waited(attempt, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let attempt = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.waited(attempt, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_reader_that_stops_ends_the_writes_and_one_that_reads_does_not() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut guarded = StallGuard::new(near, Duration::from_millis(200));
        // The far end reads slowly but keeps reading: never cut.
        let reader = tokio::spawn(async move {
            let mut sink = vec![0u8; 256];
            for _ in 0..32 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                tokio::io::AsyncReadExt::read_exact(&mut far, &mut sink).await.unwrap();
            }
            far
        });
        guarded.write_all(&[7u8; 8 * 1024]).await.expect("a slow reader is served");
        let far = reader.await.unwrap();
        // Now it stops reading: the buffer fills and the write gives up.
        let started = tokio::time::Instant::now();
        let error = guarded.write_all(&[7u8; 64 * 1024]).await.expect_err("a stalled write ends");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));
        drop(far);
    }
}
