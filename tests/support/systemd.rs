//! A stand-in for systemd's notification socket: a Unix datagram socket in
//! a temporary directory, handed to the daemon as `NOTIFY_SOCKET`, that
//! collects what it is told. Binds nothing on the network.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use super::Deadline;

/// The socket and the messages received so far, one per datagram.
pub struct NotifySocket {
    _dir: tempfile::TempDir,
    path: String,
    socket: UnixDatagram,
    pub received: Vec<String>,
}

impl NotifySocket {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        Self { path: path.to_str().unwrap().to_owned(), _dir: dir, socket, received: Vec::new() }
    }

    /// What `NOTIFY_SOCKET` is set to.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Receives datagrams for `limit`, however many come.
    pub fn collect_for(&mut self, limit: Duration) {
        let deadline = Deadline::after(limit);
        while !deadline.passed() {
            self.receive_one();
        }
    }

    /// Receives until `done` holds for what was received, or `limit`
    /// passes; says which.
    pub fn wait_for(&mut self, limit: Duration, done: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Deadline::after(limit);
        while !done(&self.received) {
            if deadline.passed() {
                return false;
            }
            self.receive_one();
        }
        true
    }

    /// How many received messages hold the line `line`.
    pub fn count(&self, line: &str) -> usize {
        count(&self.received, line)
    }

    fn receive_one(&mut self) {
        let mut buffer = [0_u8; 4096];
        if let Ok(length) = self.socket.recv(&mut buffer) {
            self.received.push(String::from_utf8_lossy(&buffer[..length]).into_owned());
        }
    }
}

/// How many of `messages` hold the line `line`.
pub fn count(messages: &[String], line: &str) -> usize {
    messages.iter().filter(|message| message.lines().any(|l| l == line)).count()
}
