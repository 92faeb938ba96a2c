//! systemd's service notification protocol, spoken to a `Type=notify`
//! unit's manager: `READY=1` once sampling is live, `WATCHDOG=1` only while
//! it keeps up, `STATUS=` lines saying why not, `RELOADING=1` … `READY=1`
//! around a configuration reload (so `systemctl reload` waits for it and
//! the unit's status says how it ended), and `STOPPING=1` on shutdown, so
//! systemd restarts a daemon whose sampler has wedged.
//!
//! Owns: reading `NOTIFY_SOCKET` (a path, or an abstract name written with
//! a leading `@`), `WATCHDOG_USEC` and `WATCHDOG_PID`; sending datagrams;
//! the loop that turns a readiness check into those messages. A side path:
//! a datagram is sent without blocking, one that cannot be sent is dropped
//! (the first failure logged, the rest counted in the log at `debug`), and
//! nothing here can stop or slow sampling or serving.
//!
//! Depends on nothing else in the crate: the readiness check is a closure
//! the wiring hands in (the same one `/readyz` answers).

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// How often readiness is checked before the first `READY=1`, and between
/// status checks when the manager asked for no watchdog.
const CHECK_PERIOD: Duration = Duration::from_millis(250);

/// The manager's socket, when the daemon runs under one that asked for
/// notifications.
pub struct Notifier {
    socket: UnixDatagram,
    address: SocketAddr,
    failed: AtomicBool,
    /// `READY=1` has been sent: only then may a reload say `RELOADING=1`
    /// and end with `READY=1` (before it, `READY=1` would claim sampling
    /// that has not started).
    announced: AtomicBool,
}

impl Notifier {
    /// The manager's socket from `NOTIFY_SOCKET`; `None` when it is not set
    /// (not started by systemd, or not `Type=notify`) or cannot be used
    /// (logged).
    pub fn from_env() -> Option<Self> {
        let named = std::env::var_os("NOTIFY_SOCKET")?;
        match Self::open(&named.to_string_lossy()) {
            Ok(notifier) => Some(notifier),
            Err(error) => {
                warn!(socket = %named.to_string_lossy(), error = %error, "cannot use NOTIFY_SOCKET; systemd will not hear from vramd");
                None
            }
        }
    }

    /// A notifier for the socket named as `NOTIFY_SOCKET` names it.
    pub fn open(named: &str) -> std::io::Result<Self> {
        let address = match named.strip_prefix('@') {
            Some(abstract_name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(abstract_name.as_bytes())?
            }
            None if named.starts_with('/') => SocketAddr::from_pathname(named)?,
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "neither an absolute path nor an abstract name starting with @",
                ));
            }
        };
        let socket = UnixDatagram::unbound()?;
        // A manager whose queue is full must not hold a task: the message
        // is dropped instead.
        socket.set_nonblocking(true)?;
        Ok(Self {
            socket,
            address,
            failed: AtomicBool::new(false),
            announced: AtomicBool::new(false),
        })
    }

    /// Sends one message (newline-separated `KEY=value` lines); never
    /// blocks, never fails the caller.
    pub fn send(&self, message: &str) {
        if let Err(error) = self.socket.send_to_addr(message.as_bytes(), &self.address) {
            if self.failed.swap(true, Ordering::Relaxed) {
                debug!(error = %error, "systemd notification dropped");
            } else {
                warn!(error = %error, "cannot notify systemd; dropping notifications that fail (logged once)");
            }
        }
    }

    /// Says a configuration reload has begun, stamped with the monotonic
    /// clock as `Type=notify-reload` units require; returns whether it was
    /// said, which is whether [`Notifier::reloaded`] must follow. Nothing
    /// is said before the daemon was first announced ready.
    pub fn reloading(&self) -> bool {
        if !self.announced.load(Ordering::Acquire) {
            return false;
        }
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let micros = u64::try_from(now.tv_sec).unwrap_or(0).saturating_mul(1_000_000)
            + u64::try_from(now.tv_nsec / 1_000).unwrap_or(0);
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={micros}\nSTATUS=reloading the configuration\n"
        ));
        true
    }

    /// Ends a reload [`Notifier::reloading`] announced: `READY=1` and a
    /// status line that keeps the outcome visible in `systemctl status`
    /// (until readiness next changes).
    pub fn reloaded(&self, refusal: Option<&str>) {
        let status = match refusal {
            None => "sampling; configuration reloaded".to_owned(),
            Some(reason) => {
                format!("sampling; reload refused, running configuration kept: {reason}")
            }
        };
        self.send(&format!("READY=1\nSTATUS={status}\n"));
    }
}

/// How often to feed the watchdog: half the manager's `WATCHDOG_USEC`, as
/// systemd advises, when that watchdog is meant for this process
/// (`WATCHDOG_PID` unset or this process's id).
pub fn watchdog_interval_from_env() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.trim().parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Tells the manager about readiness until `cancel`: `READY=1` the first
/// time `ready` answers `Ok`, then every `watchdog` interval `WATCHDOG=1`
/// if it still does; each change of answer is a `STATUS=` line. A wedged
/// sampler thus starves the watchdog, and systemd restarts the daemon.
pub async fn run(
    notifier: &Notifier,
    ready: impl Fn() -> Result<(), String>,
    watchdog: Option<Duration>,
    cancel: CancellationToken,
) {
    let mut announced = false;
    let mut last_status: Option<String> = None;
    loop {
        let answer = ready();
        let status = match &answer {
            Ok(()) => "sampling".to_owned(),
            Err(reason) => format!("not ready: {reason}"),
        };
        let mut message = String::new();
        if last_status.as_deref() != Some(status.as_str()) {
            message.push_str(&format!("STATUS={status}\n"));
            last_status = Some(status);
        }
        if answer.is_ok() {
            if !announced {
                announced = true;
                notifier.announced.store(true, Ordering::Release);
                message.push_str("READY=1\n");
                info!(watchdog = ?watchdog, "told systemd the daemon is ready");
            }
            if watchdog.is_some() {
                message.push_str("WATCHDOG=1\n");
            }
        }
        if !message.is_empty() {
            notifier.send(&message);
        }
        let period = match watchdog {
            Some(interval) if announced => interval,
            Some(interval) => interval.min(CHECK_PERIOD),
            None => CHECK_PERIOD,
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> (tempfile::TempDir, UnixDatagram, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (dir, socket, path.to_string_lossy().into_owned())
    }

    fn receive(socket: &UnixDatagram) -> String {
        let mut buffer = [0_u8; 4096];
        let length = socket.recv(&mut buffer).unwrap();
        String::from_utf8_lossy(&buffer[..length]).into_owned()
    }

    #[test]
    fn a_relative_or_empty_socket_name_is_refused() {
        assert!(Notifier::open("relative/notify").is_err());
        assert!(Notifier::open("").is_err());
    }

    #[test]
    fn a_socket_nobody_listens_on_fails_quietly() {
        let notifier = Notifier::open("/nonexistent/vramd-notify").unwrap();
        notifier.send("READY=1");
        notifier.send("READY=1");
        assert!(notifier.failed.load(Ordering::Relaxed));
    }

    #[test]
    fn an_abstract_socket_is_reached_by_its_at_name() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("vramd-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&address).unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Notifier::open(&format!("@{name}")).unwrap().send("STOPPING=1");
        assert_eq!(receive(&socket), "STOPPING=1");
    }

    #[tokio::test]
    async fn ready_comes_once_and_the_watchdog_only_while_ready() {
        let (_dir, socket, path) = listener();
        let notifier = Notifier::open(&path).unwrap();
        let cancel = CancellationToken::new();
        let answers = std::sync::Mutex::new(
            vec![Err("warming up".to_owned()), Ok(()), Ok(()), Err("behind".to_owned()), Ok(())]
                .into_iter(),
        );
        let ready = || answers.lock().unwrap().next().unwrap_or(Ok(()));
        let stop = cancel.clone();
        let received = tokio::task::spawn_blocking(move || {
            let messages: Vec<String> = (0..5).map(|_| receive(&socket)).collect();
            stop.cancel();
            messages
        });
        run(&notifier, ready, Some(Duration::from_millis(10)), cancel).await;
        let messages = received.await.unwrap();
        assert_eq!(
            messages,
            [
                "STATUS=not ready: warming up\n",
                "STATUS=sampling\nREADY=1\nWATCHDOG=1\n",
                "WATCHDOG=1\n",
                "STATUS=not ready: behind\n",
                "STATUS=sampling\nWATCHDOG=1\n",
            ]
        );
        assert!(notifier.announced.load(Ordering::Acquire));
    }

    #[test]
    fn a_reload_is_announced_only_after_ready_and_ends_ready_with_its_outcome() {
        let (_dir, socket, path) = listener();
        let notifier = Notifier::open(&path).unwrap();
        assert!(!notifier.reloading(), "before READY=1 nothing is said");
        notifier.announced.store(true, Ordering::Release);
        assert!(notifier.reloading());
        let begun = receive(&socket);
        let stamp: u64 = begun
            .lines()
            .find_map(|line| line.strip_prefix("MONOTONIC_USEC="))
            .unwrap()
            .parse()
            .unwrap();
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let now_micros = u64::try_from(now.tv_sec).unwrap() * 1_000_000;
        assert!(
            stamp <= now_micros + 1_000_000 && stamp + 5_000_000 > now_micros,
            "{stamp} vs {now_micros}"
        );
        assert!(begun.starts_with("RELOADING=1\n"), "{begun}");
        notifier.reloaded(Some("alerts.evaluation_interval: must be positive"));
        assert_eq!(
            receive(&socket),
            "READY=1\nSTATUS=sampling; reload refused, running configuration kept: alerts.evaluation_interval: must be positive\n"
        );
    }
}
