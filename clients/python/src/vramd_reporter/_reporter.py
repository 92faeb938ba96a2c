"""The background reporter: one daemon thread, one report in flight at most."""

from __future__ import annotations

import atexit
import logging
import math
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.parse
from typing import Any, Callable, Dict, Optional

from . import _http, _jax
from ._oom import OomCapture
from ._report import CudaUnavailable, IntervalRange, ReportBuilder

log = logging.getLogger("vramd_reporter")

DEFAULT_URL = "http://127.0.0.1:9477"


class _Failures:
    """Logs each kind of failure once (WARNING) until it recovers, then INFO once."""

    def __init__(self) -> None:
        self._active: Dict[str, str] = {}

    def fail(self, kind: str, text: str, exc_info: bool = False) -> None:
        if kind in self._active:
            return
        self._active[kind] = text
        log.warning("vramd_reporter: %s (not logged again until it recovers)", text, exc_info=exc_info)

    def recover(self, which: Callable[[str], bool], text: str) -> None:
        cleared = [kind for kind in self._active if which(kind)]
        if not cleared:
            return
        for kind in cleared:
            del self._active[kind]
        log.info("vramd_reporter: %s (recovered from: %s)", text, ", ".join(cleared))

    @property
    def active(self) -> Dict[str, str]:
        return dict(self._active)


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError("vramd_reporter: %s must be a positive number of seconds, got %r" % (name, value))
    return float(value)


def _check_url(url: Any) -> str:
    if not isinstance(url, str):
        raise TypeError("vramd_reporter: url must be a string, got %r" % (url,))
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("vramd_reporter: url must be http://HOST:PORT or https://HOST:PORT, got %r" % (url,))
    return url


def _check_token(token: Any) -> Optional[str]:
    if token is None or token == "":
        return None
    if not isinstance(token, str):
        raise TypeError("vramd_reporter: token must be a string")
    if any(c in token for c in "\r\n\0"):
        raise ValueError("vramd_reporter: token must not contain line breaks")
    return token


def _error_detail(error: urllib.error.HTTPError) -> str:
    """Up to 200 characters of an error response's body (vramd answers JSON with a message)."""
    try:
        body = error.read(512)
    except Exception:
        body = b""
    finally:
        try:
            error.close()
        except Exception:
            pass
    text = " ".join(body.decode("utf-8", "replace").split())[:200]
    return ": " + text if text else ""


class Reporter:
    """Posts a report for every visible CUDA device every ``interval`` seconds.

    Made by :func:`vramd_reporter.start`; never raises into, or blocks, the
    training loop. ``reports_sent``, ``reports_failed``, ``ticks`` and
    ``last_status`` (the last HTTP status, None before any) are for inspection.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        interval: float = 1.0,
        snapshot_interval: Optional[float] = 60.0,
        token: Optional[str] = None,
        timeout: float = 2.0,
        samples_per_interval: int = 4,
    ) -> None:
        self.url = _check_url(url)
        if isinstance(samples_per_interval, bool) or not isinstance(samples_per_interval, int):
            raise TypeError("samples_per_interval must be an int, got %r" % (samples_per_interval,))
        if not 0 <= samples_per_interval <= 100:
            raise ValueError("samples_per_interval must be within 0..100, got %r" % (samples_per_interval,))
        #: Samples of ``allocated`` and ``reserved`` taken between two reports
        #: (0: only the report's own and :meth:`step`'s).
        self.samples_per_interval = samples_per_interval
        #: The range since the last report, which each report carries.
        self.ranges = IntervalRange()
        self.interval = _seconds("interval", interval)
        self.snapshot_interval = None if snapshot_interval is None else _seconds("snapshot_interval", snapshot_interval)
        self.timeout = _seconds("timeout", timeout)
        self._token = _check_token(token)

        self.ticks = 0
        self.reports_sent = 0
        self.reports_failed = 0
        self.last_status: Optional[int] = None
        #: The OOM capture when started with ``oom_capture=True``.
        self.oom: Optional[OomCapture] = None

        self._builder = ReportBuilder()
        self._failures = _Failures()
        self._idle_reasons_said: set = set()
        self._backoff = 0.0
        self._random = random.Random()
        self._next_snapshot = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vramd-reporter", daemon=True)

    def __repr__(self) -> str:
        return "<vramd_reporter.Reporter url=%r interval=%r snapshot_interval=%r running=%r>" % (
            self.url,
            self.interval,
            self.snapshot_interval,
            self.running,
        )

    def _settings(self) -> tuple:
        return (self.url, self.interval, self.snapshot_interval, self._token, self.timeout, self.samples_per_interval)

    def step(self) -> None:
        """Record the current ``allocated`` and ``reserved`` of every visible device into the interval's range.

        Call it from the training loop (once per step, at the point of the
        step where memory is lowest or highest, or both) to make the range
        exact whatever the step's length; each call costs one
        ``torch.cuda.memory_stats`` per visible device (tens of microseconds).
        Never raises; does nothing before the workload imported torch and
        initialised CUDA.
        """
        try:
            self._sample()
        except Exception:  # never into the training loop
            pass

    def _sample(self) -> None:
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None) if torch is not None else None
        if cuda is None:
            return
        is_initialized = getattr(cuda, "is_initialized", None)
        if is_initialized is not None and not is_initialized():
            return
        self.ranges.observe_torch(cuda)

    @property
    def running(self) -> bool:
        """The thread is alive and has not been asked to stop."""
        return self._thread.is_alive() and not self._stopping.is_set()

    def _start(self) -> None:
        self._next_snapshot = time.monotonic()
        self._thread.start()

    def stop(self, timeout: Optional[float] = 5.0) -> bool:
        """Stop reporting and join the thread for at most ``timeout`` seconds.

        Returns True when the thread has ended. A POST in flight is not
        interrupted; it ends within the reporter's own HTTP ``timeout``.
        """
        self._stopping.set()
        if self._thread.ident is None or self._thread is threading.current_thread():
            return not self._thread.is_alive()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread -------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                started = time.monotonic()
                earliest = 0.0
                try:
                    earliest = self._tick()
                except Exception:  # a bug here must neither kill reporting silently nor escape
                    self._failures.fail("internal", "unexpected error in the reporter thread", exc_info=True)
                next_at = max(started + self._next_gap(), earliest)
                self._wait_sampling(next_at)
        except Exception:  # pragma: no cover - last line of defence
            pass

    def _wait_sampling(self, next_at: float) -> None:
        """Wait until ``next_at``, sampling the allocator ``samples_per_interval`` times an interval meanwhile."""
        gap = self.interval / self.samples_per_interval if self.samples_per_interval else None
        while not self._stopping.is_set():
            left = next_at - time.monotonic()
            if left <= 0.0:
                return
            if gap is None or gap >= left:
                self._stopping.wait(left)
                return
            if self._stopping.wait(gap):
                return
            try:
                self._sample()
            except Exception as error:
                self._failures.fail("torch", "sampling allocator statistics failed: %r" % (error,))

    def _next_gap(self) -> float:
        """Seconds to the next report: ``interval`` on average, drawn from 0.5 to 1.5 times it.

        A training step of exactly ``interval`` seconds, reported on a fixed
        timer, would be seen at one phase of the step only; vramd judges the
        memory floor from these values, so a fixed phase makes that floor luck.
        """
        return self.interval * self._random.uniform(0.5, 1.5)

    def _tick(self) -> float:
        """One report; returns the earliest monotonic time for the next one (0: no constraint)."""
        self.ticks += 1
        # Only a torch the workload imported itself: the reporter never imports
        # torch on its thread, and never initialises CUDA (see require_initialized).
        torch = sys.modules.get("torch")
        if torch is None or getattr(torch, "cuda", None) is None:
            return self._tick_jax()
        if not _built_with_cuda(torch):
            return self._idle(
                "torch-without-cuda",
                "this torch (%s) is built without CUDA: nothing to report" % (getattr(torch, "__version__", "?"),),
            )

        now = time.monotonic()
        snapshot_due = self.snapshot_interval is not None and now >= self._next_snapshot
        try:
            report = self._builder.build(
                torch, snapshot=snapshot_due, require_initialized=True, ranges=self.ranges
            )
        except CudaUnavailable:
            self._failures.fail("cuda-unavailable", "CUDA is not available in this process; nothing to report")
            return 0.0
        except Exception as error:
            self.reports_failed += 1
            self._failures.fail("torch", "collecting allocator statistics failed: %r" % (error,))
            return 0.0
        if report is None:
            return self._idle(
                "cuda-not-initialised",
                "CUDA is not initialised in this process (yet): reports start once the workload uses CUDA "
                "(the reporter never initialises it itself, and a machine without a GPU never will)",
            )
        if not report["devices"]:
            return 0.0  # no device with a UUID (logged by the builder)

        if snapshot_due:
            assert self.snapshot_interval is not None
            self._next_snapshot = now + self.snapshot_interval
            if self._builder.snapshot_error is not None:
                self._failures.fail(
                    "snapshot",
                    "torch.cuda.memory_snapshot() failed (%r); reports go without a snapshot summary"
                    % (self._builder.snapshot_error,),
                )
            else:
                self._failures.recover(lambda kind: kind == "snapshot", "snapshot summaries work again")

        return self._encode_and_send(report)

    def _tick_jax(self) -> float:
        """A report from a JAX the workload imported (and initialised) itself."""
        jax = sys.modules.get("jax")
        if jax is None:
            return self._idle(
                "no-framework",
                "torch is not imported in this process (nor jax): nothing to report until the workload "
                "imports it (the reporter never imports it itself)",
            )
        try:
            report = _jax.build(jax)
        except Exception as error:
            self.reports_failed += 1
            self._failures.fail("jax", "collecting JAX memory statistics failed: %r" % (error,))
            return 0.0
        if report is None or not report["devices"]:
            return 0.0
        return self._encode_and_send(report)

    def _idle(self, reason: str, text: str) -> float:
        """Nothing to report this tick: says why, once per reason, at INFO (it is no failure)."""
        if reason not in self._idle_reasons_said:
            self._idle_reasons_said.add(reason)
            log.info("vramd_reporter: %s", text)
        return 0.0

    def _encode_and_send(self, report: Dict[str, Any]) -> float:
        try:
            body = _http.encode(report)
        except (TypeError, ValueError) as error:
            self.reports_failed += 1
            self._failures.fail("encode", "a report could not be encoded as JSON: %r" % (error,))
            return 0.0
        return self._send(body)

    def _send(self, body: bytes) -> float:
        target = _http.endpoint(self.url)
        try:
            status, _reason = _http.post(self.url, body, token=self._token, timeout=self.timeout)
        except urllib.error.HTTPError as error:
            self.reports_failed += 1
            self.last_status = error.code
            detail = _error_detail(error)
            if error.code == 429:
                headers = error.headers
                retry_after = _http.retry_after_seconds(headers.get("Retry-After") if headers is not None else None)
                self._backoff = _http.backoff_seconds(retry_after, self.interval, self._backoff)
                self._failures.fail(
                    "http-429",
                    "vramd at %s is rate-limiting reports (HTTP 429); backing off %.1f s" % (target, self._backoff),
                )
                return time.monotonic() + self._backoff
            self._backoff = 0.0
            self._failures.fail(
                "http-%d" % error.code,
                "vramd at %s rejected a report: HTTP %d %s%s" % (target, error.code, error.reason, detail),
            )
            return 0.0
        except Exception as error:  # URLError, OSError, timeouts, http.client.HTTPException, …
            self.reports_failed += 1
            self._backoff = 0.0
            reason = getattr(error, "reason", None) or error
            self._failures.fail(
                "connection:" + type(reason).__name__,
                "cannot send allocator reports to %s: %s" % (target, reason),
            )
            return 0.0
        self.reports_sent += 1
        self.last_status = status
        self._backoff = 0.0
        self._failures.recover(lambda kind: kind != "snapshot", "allocator reports reach %s again" % (target,))
        return 0.0



def _built_with_cuda(torch: Any) -> bool:
    """False only for a torch that says it has no CUDA (a CPU-only build); asking initialises nothing."""
    is_built = getattr(getattr(getattr(torch, "backends", None), "cuda", None), "is_built", None)
    if is_built is None:
        return True
    try:
        return bool(is_built())
    except Exception:
        return True


_lock = threading.Lock()
_current: Optional[Reporter] = None
_atexit_registered = False


def start(
    url: str = DEFAULT_URL,
    interval: float = 1.0,
    snapshot_interval: Optional[float] = 60.0,
    token: Optional[str] = None,
    timeout: float = 2.0,
    oom_capture: bool = False,
    record_history: Optional[int] = None,
    snapshot_dir: Optional[str] = None,
    max_snapshots: int = 3,
    max_snapshot_bytes: int = 4 << 30,
    upload_snapshot: bool = False,
    samples_per_interval: int = 4,
) -> Reporter:
    """Start reporting to vramd on one daemon thread; returns the running reporter.

    With ``oom_capture`` every CUDA OOM is also posted at once as an OOM
    event (``reporter.oom``, see ``_oom.OomCapture``); ``record_history=N``
    records allocator history and dumps a snapshot to ``snapshot_dir`` at
    each OOM, keeping at most ``max_snapshots`` files and
    ``max_snapshot_bytes``. With ``upload_snapshot`` (and vramd's
    ``ingest.snapshot_dir`` set) each dumped snapshot is also PUT to the
    event on the OOM thread's posting thread, for the memory viewer.

    Between reports the thread samples ``allocated`` and ``reserved``
    ``samples_per_interval`` times an interval, and each report carries their
    range since the last (see :func:`step` for an exact one).

    A second call while a reporter runs returns that reporter (its settings
    stay). Invalid arguments raise ValueError/TypeError here, at call time;
    nothing raises later.
    """
    global _current, _atexit_registered
    with _lock:
        if _current is not None and _current.running:
            candidate = Reporter(url, interval, snapshot_interval, token, timeout, samples_per_interval)  # validates the arguments
            if candidate._settings() != _current._settings():
                log.warning(
                    "vramd_reporter: start() called again with other settings; the running reporter (%s) is kept",
                    _current.url,
                )
            return _current
        reporter = Reporter(url, interval, snapshot_interval, token, timeout, samples_per_interval)
        if oom_capture:
            reporter.oom = OomCapture(
                reporter.url,
                token,
                timeout,
                record_history,
                snapshot_dir,
                max_snapshots,
                max_snapshot_bytes,
                upload_snapshot,
            )
            reporter.oom.attach()
        reporter._start()
        _current = reporter
        if not _atexit_registered:
            atexit.register(_stop_at_exit)
            _atexit_registered = True
        return reporter


def step() -> None:
    """Record the allocator's current figures into the running reporter's interval range.

    Optional: call it once per training step (see :meth:`Reporter.step`).
    Does nothing without a running reporter; never raises.
    """
    reporter = _current
    if reporter is not None:
        reporter.step()


def stop(timeout: Optional[float] = 5.0) -> bool:
    """Stop the reporter started by :func:`start`, if any; True when no thread is left running."""
    with _lock:
        reporter = _current
    return True if reporter is None else reporter.stop(timeout)


def _after_fork_in_child() -> None:
    # The child has no reporter thread, and the lock may have been held by
    # another thread at fork time: start afresh (start() works in the child).
    global _lock, _current
    _lock = threading.Lock()
    _current = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _stop_at_exit() -> None:
    reporter = _current
    if reporter is not None:
        reporter.stop(timeout=reporter.timeout + 0.5)
