"""The reporter thread against a real HTTP server on 127.0.0.1: delivery, failures, back-off, lifecycle."""

import datetime as dt
import email.utils
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from conftest import WAIT, wait_for

import vramd_reporter
from vramd_reporter import _http

# Short intervals keep the tests quick; every wait is bounded by WAIT.
FAST = 0.05


def reporter_logs(caplog, level):
    return [r for r in caplog.records if r.name == "vramd_reporter" and r.levelno == level]


def test_posts_reports_with_headers_and_body(fake_torch, no_pod_env, vramd):
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST, snapshot_interval=None)
    request = vramd.get()
    assert request.method == "POST"
    assert request.path == "/api/v1/allocator-reports"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Authorization"] is None
    assert request.headers["User-Agent"] == "vramd-reporter/" + vramd_reporter.__version__
    assert int(request.headers["Content-Length"]) == len(request.body)
    report = json.loads(request.body.decode("utf-8"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", report.pop("at"))
    assert report["version"] == 1
    assert report["reporter"] == {"pid": os.getpid(), "hostname": __import__("socket").gethostname()}
    assert [(d["index"], d["uuid"]) for d in report["devices"]] == [
        (0, "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"),
        (1, "GPU-3c1d9a7b-1111-4e2f-8a3b-5d7e9f1a2b3c"),
    ]
    assert all("snapshot" not in d for d in report["devices"])
    assert report["devices"][0]["memory_stats"]["reserved_bytes.all.current"] == 22 * 1024 * 1024
    # And it keeps reporting, one request after another.
    vramd.get()
    assert wait_for(lambda: reporter.reports_sent >= 2)
    assert reporter.last_status == 202


def test_bearer_token_and_trailing_slash(fake_torch, vramd):
    vramd_reporter.start(url=vramd.url + "/", interval=FAST, token="s3cret-token")
    request = vramd.get()
    assert request.path == "/api/v1/allocator-reports"
    assert request.headers["Authorization"] == "Bearer s3cret-token"


def test_snapshot_only_every_snapshot_interval(fake_torch, vramd):
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST, snapshot_interval=3600)
    bodies = [json.loads(vramd.get().body) for _ in range(4)]
    assert [all("snapshot" in d for d in b["devices"]) for b in bodies] == [True, False, False, False]
    assert bodies[0]["devices"][0]["snapshot"]["largest_free_block_bytes"] == 8 * 1024 * 1024
    assert fake_torch.state.calls["memory_snapshot"] == 1
    reporter.stop()


def test_snapshot_again_after_its_interval(fake_torch, vramd):
    vramd_reporter.start(url=vramd.url, interval=FAST, snapshot_interval=0.3)
    first = vramd.get()
    assert all("snapshot" in d for d in json.loads(first.body)["devices"])
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        request = vramd.get()
        if all("snapshot" in d for d in json.loads(request.body)["devices"]):
            assert request.at - first.at >= 0.25
            break
    else:
        pytest.fail("no second snapshot")


def test_snapshot_interval_none_disables_snapshots(fake_torch, vramd):
    vramd_reporter.start(url=vramd.url, interval=FAST, snapshot_interval=None)
    for _ in range(3):
        assert all("snapshot" not in d for d in json.loads(vramd.get().body)["devices"])
    assert "memory_snapshot" not in fake_torch.state.calls


def test_refused_connection_does_not_raise_and_is_logged_once(fake_torch, refused_url, caplog):
    caplog.set_level(logging.INFO, logger="vramd_reporter")
    reporter = vramd_reporter.start(url=refused_url, interval=0.02)
    assert wait_for(lambda: reporter.reports_failed >= 5)
    assert reporter.running and reporter.reports_sent == 0
    warnings = reporter_logs(caplog, logging.WARNING)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "cannot send allocator reports to %s/api/v1/allocator-reports" % refused_url in warnings[0].getMessage()
    assert "refused" in warnings[0].getMessage().lower()


def test_http_500_is_logged_once_then_recovery_once(fake_torch, vramd, caplog):
    caplog.set_level(logging.INFO, logger="vramd_reporter")
    error = (500, {}, b'{"code":"internal","message":"boom"}')
    vramd.responses = [error] * 4 + [(202, {}, b"{}")]
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST)
    assert wait_for(lambda: reporter.reports_sent >= 3)
    assert reporter.reports_failed == 4
    warnings = reporter_logs(caplog, logging.WARNING)
    infos = reporter_logs(caplog, logging.INFO)
    assert len(warnings) == 1 and len(infos) == 1, [r.getMessage() for r in caplog.records]
    assert "HTTP 500" in warnings[0].getMessage() and "boom" in warnings[0].getMessage()
    assert "reach" in infos[0].getMessage() and "http-500" in infos[0].getMessage()
    assert warnings[0].created <= infos[0].created


def test_each_kind_of_failure_is_logged_once(fake_torch, vramd, caplog):
    caplog.set_level(logging.INFO, logger="vramd_reporter")
    vramd.responses = [(500, {}, b""), (400, {}, b""), (500, {}, b""), (400, {}, b""), (202, {}, b"")]
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST)
    assert wait_for(lambda: reporter.reports_sent >= 1)
    messages = [r.getMessage() for r in reporter_logs(caplog, logging.WARNING)]
    assert len(messages) == 2
    assert "HTTP 500" in messages[0] and "HTTP 400" in messages[1]
    # The recovery is logged just after the count goes up, on the reporter thread.
    assert wait_for(lambda: len(reporter_logs(caplog, logging.INFO)) == 1)


def test_torch_errors_do_not_raise_and_are_logged_once(fake_torch, vramd, caplog):
    caplog.set_level(logging.INFO, logger="vramd_reporter")
    fake_torch.state.fail["memory_stats"] = RuntimeError("CUDA error: an illegal memory access")
    reporter = vramd_reporter.start(url=vramd.url, interval=0.02)
    assert wait_for(lambda: reporter.reports_failed >= 5)
    assert reporter.running and vramd.count == 0
    warnings = reporter_logs(caplog, logging.WARNING)
    assert len(warnings) == 1 and "illegal memory access" in warnings[0].getMessage()
    del fake_torch.state.fail["memory_stats"]
    assert wait_for(lambda: reporter.reports_sent >= 1)
    assert wait_for(lambda: len(reporter_logs(caplog, logging.INFO)) == 1)


def test_failing_snapshot_still_sends_stats(fake_torch, vramd, caplog):
    caplog.set_level(logging.INFO, logger="vramd_reporter")
    fake_torch.state.fail["memory_snapshot"] = RuntimeError("no snapshot today")
    vramd_reporter.start(url=vramd.url, interval=FAST, snapshot_interval=0.1)
    for _ in range(4):
        assert all("snapshot" not in d for d in json.loads(vramd.get().body)["devices"])
    assert fake_torch.state.calls["memory_snapshot"] >= 2
    warnings = reporter_logs(caplog, logging.WARNING)
    assert len(warnings) == 1 and "memory_snapshot" in warnings[0].getMessage()


def test_nothing_is_sent_before_cuda_is_initialised(fake_torch, vramd):
    fake_torch.state.initialized = False
    reporter = vramd_reporter.start(url=vramd.url, interval=0.02)
    assert wait_for(lambda: reporter.ticks >= 5)
    assert vramd.count == 0 and reporter.reports_failed == 0
    assert "get_device_properties" not in fake_torch.state.calls
    fake_torch.state.initialized = True
    assert vramd.get().path == "/api/v1/allocator-reports"


def test_nothing_is_sent_without_torch_imported(monkeypatch, vramd, caplog):
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    reporter = vramd_reporter.start(url=vramd.url, interval=0.02)
    assert wait_for(lambda: reporter.ticks >= 5)
    assert vramd.count == 0 and reporter.running
    assert not reporter_logs(caplog, logging.WARNING)


def test_missing_torch_is_said_once_at_info(monkeypatch, vramd, caplog):
    caplog.set_level(logging.DEBUG, logger="vramd_reporter")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    reporter = vramd_reporter.start(url=vramd.url, interval=0.02)
    assert wait_for(lambda: reporter.ticks >= 5)
    infos = [r.getMessage() for r in reporter_logs(caplog, logging.INFO)]
    assert len(infos) == 1 and "torch is not imported" in infos[0], infos
    assert not reporter_logs(caplog, logging.WARNING)


def test_cuda_never_initialised_is_said_once_at_info(fake_torch, vramd, caplog):
    caplog.set_level(logging.DEBUG, logger="vramd_reporter")
    fake_torch.state.initialized = False
    reporter = vramd_reporter.start(url=vramd.url, interval=0.02)
    assert wait_for(lambda: reporter.ticks >= 5)
    infos = [r.getMessage() for r in reporter_logs(caplog, logging.INFO)]
    assert len(infos) == 1 and "CUDA is not initialised" in infos[0], infos
    assert not reporter_logs(caplog, logging.WARNING)
    assert "is_available" not in fake_torch.state.calls  # asking would initialise CUDA


def test_torch_without_cuda_is_said_once_at_info(fake_torch, vramd, caplog):
    caplog.set_level(logging.DEBUG, logger="vramd_reporter")
    fake_torch.state.built_with_cuda = False
    fake_torch.state.initialized = False
    reporter = vramd_reporter.start(url=vramd.url, interval=0.02)
    assert wait_for(lambda: reporter.ticks >= 5)
    infos = [r.getMessage() for r in reporter_logs(caplog, logging.INFO)]
    assert len(infos) == 1 and "built without CUDA" in infos[0], infos
    assert vramd.count == 0 and not reporter_logs(caplog, logging.WARNING)


def test_cuda_unavailable_is_logged_once_and_nothing_sent(fake_torch, vramd, caplog):
    fake_torch.state.available = False
    reporter = vramd_reporter.start(url=vramd.url, interval=0.02)
    assert wait_for(lambda: reporter.ticks >= 5)
    assert vramd.count == 0
    warnings = reporter_logs(caplog, logging.WARNING)
    assert len(warnings) == 1 and "CUDA is not available" in warnings[0].getMessage()


def test_429_with_retry_after_backs_off(fake_torch, vramd, caplog):
    caplog.set_level(logging.INFO, logger="vramd_reporter")
    vramd.responses = [(429, {"Retry-After": "1"}, b'{"code":"rate_limited"}'), (202, {}, b"{}")]
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST)
    first = vramd.get()
    second = vramd.get(timeout=WAIT)
    gap = second.at - first.at
    assert 0.9 <= gap < 5.0, gap  # Retry-After: 1, not the 0.05 s interval
    third = vramd.get()
    assert third.at - second.at < 0.9  # back to the normal interval once accepted
    assert wait_for(lambda: reporter.reports_sent >= 2)
    warnings = reporter_logs(caplog, logging.WARNING)
    assert len(warnings) == 1 and "429" in warnings[0].getMessage()
    assert wait_for(lambda: len(reporter_logs(caplog, logging.INFO)) == 1)


def test_429_without_retry_after_doubles_the_interval(fake_torch, vramd):
    vramd.responses = [(429, {}, b""), (429, {}, b""), (202, {}, b"")]
    vramd_reporter.start(url=vramd.url, interval=0.2)
    arrivals = [vramd.get().at for _ in range(3)]
    assert arrivals[1] - arrivals[0] >= 0.35  # 2 × interval
    assert arrivals[2] - arrivals[1] >= 0.75  # 4 × interval


@pytest.mark.parametrize(
    "header, expected",
    [
        (None, None),
        ("", None),
        ("soon", None),
        ("7", 7.0),
        ("2.5", 2.5),
        ("-3", 0.0),
        ("nan", None),
        ("Sat, 21 Nov 2026 01:00:30 GMT", 30.0),
        ("Sat, 21 Nov 2026 00:59:00 GMT", 0.0),
    ],
)
def test_retry_after_parsing(header, expected):
    now = dt.datetime(2026, 11, 21, 1, 0, 0, tzinfo=dt.timezone.utc)
    assert _http.retry_after_seconds(header, now=now) == expected


def test_backoff_is_bounded_to_60_seconds():
    assert _http.backoff_seconds(3600.0, interval=5.0, previous=0.0) == 60.0
    assert _http.backoff_seconds(7.0, interval=5.0, previous=0.0) == 7.0
    assert _http.backoff_seconds(None, interval=5.0, previous=0.0) == 10.0
    assert _http.backoff_seconds(None, interval=5.0, previous=40.0) == 60.0
    # A far HTTP date is bounded too.
    later = email.utils.format_datetime(dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2), usegmt=True)
    assert _http.backoff_seconds(_http.retry_after_seconds(later), 5.0, 0.0) == 60.0


def test_start_twice_returns_the_same_reporter(fake_torch, vramd, caplog):
    first = vramd_reporter.start(url=vramd.url, interval=FAST)
    assert vramd_reporter.start(url=vramd.url, interval=FAST) is first
    assert not reporter_logs(caplog, logging.WARNING)
    assert vramd_reporter.start(url="http://127.0.0.1:1", interval=9) is first
    assert len(reporter_logs(caplog, logging.WARNING)) == 1  # other settings: kept, and said so
    reporter_threads = [t for t in threading.enumerate() if t.name == "vramd-reporter"]
    assert len(reporter_threads) == 1 and reporter_threads[0].daemon
    assert first.stop(timeout=WAIT)
    second = vramd_reporter.start(url=vramd.url, interval=FAST)
    assert second is not first and second.running


def test_stop_joins_within_its_timeout(fake_torch, vramd):
    reporter = vramd_reporter.start(url=vramd.url, interval=3600)
    vramd.get()  # the first report went out; the thread now waits an hour
    started = time.monotonic()
    assert reporter.stop(timeout=2.0) is True
    assert time.monotonic() - started < 1.0
    assert not reporter.running
    assert not any(t.name == "vramd-reporter" and t.is_alive() for t in threading.enumerate())
    assert reporter.stop(timeout=1.0) is True  # idempotent


def test_stop_is_bounded_while_a_post_hangs(fake_torch, vramd):
    vramd.hold = True
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST, timeout=5.0)
    vramd.get()  # the server holds this request
    started = time.monotonic()
    assert reporter.stop(timeout=0.3) is False
    assert time.monotonic() - started < 1.5
    vramd.release.set()
    assert reporter.stop(timeout=WAIT) is True


def test_http_timeout_is_a_failure_not_a_hang(fake_torch, vramd, caplog):
    vramd.hold = True
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST, timeout=0.2)
    assert wait_for(lambda: reporter.reports_failed >= 2)
    warnings = reporter_logs(caplog, logging.WARNING)
    assert len(warnings) == 1 and "timed out" in warnings[0].getMessage()


def test_redirects_are_not_followed(fake_torch, vramd, caplog):
    vramd.responses = [(307, {"Location": "/elsewhere"}, b"")]
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST)
    assert wait_for(lambda: reporter.reports_failed >= 3)
    paths = set()
    while not vramd.received.empty():
        paths.add(vramd.get().path)
    assert paths == {"/api/v1/allocator-reports"}
    warnings = reporter_logs(caplog, logging.WARNING)
    assert len(warnings) == 1 and "HTTP 307" in warnings[0].getMessage()


def test_proxy_environment_is_ignored(fake_torch, vramd, refused_url, monkeypatch):
    for variable in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(variable, refused_url)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    reporter = vramd_reporter.start(url=vramd.url, interval=FAST)
    assert vramd.get().path == "/api/v1/allocator-reports"
    assert wait_for(lambda: reporter.reports_sent >= 1)


FORK_SCRIPT = """
import os, sys, time, warnings
import torch, vramd_reporter
parent = vramd_reporter.start(url=sys.argv[1], interval=0.05)
deadline = time.monotonic() + 10
while parent.reports_sent < 1 and time.monotonic() < deadline:
    time.sleep(0.01)
assert parent.reports_sent >= 1
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()"
    pid = os.fork()
if pid == 0:  # the child has no reporter thread; start() makes a new one
    code = 3
    try:
        child = vramd_reporter.start(url=sys.argv[1], interval=0.05)
        code = 0 if (child is not parent and child.running and child.stop(timeout=5)) else 2
    finally:
        os._exit(code)
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.01)
else:
    os.kill(pid, 9)
    sys.exit("the forked child did not finish")
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
assert parent.running and vramd_reporter.start(url=sys.argv[1], interval=0.05) is parent
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_can_start_its_own_reporter(subprocess_env, vramd):
    result = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, vramd.url],
        env=subprocess_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=WAIT + 20,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"url": "127.0.0.1:9477"},
        {"url": "ftp://127.0.0.1:9477"},
        {"url": 9477},
        {"interval": 0},
        {"interval": float("nan")},
        {"interval": True},
        {"snapshot_interval": -1},
        {"timeout": float("inf")},
        {"token": "a\r\nX-Evil: 1"},
    ],
)
def test_invalid_arguments_raise_at_start(kwargs):
    with pytest.raises((ValueError, TypeError)):
        vramd_reporter.start(**kwargs)
    assert not any(t.name == "vramd-reporter" for t in threading.enumerate())


def test_report_gaps_vary_around_the_interval_so_every_step_phase_is_seen():
    # A 1 s training step, reported on a fixed 1 s timer, is seen at one
    # phase forever: the phases of 400 gaps drawn as the thread draws them
    # cover the whole step, and their mean stays the interval.
    reporter = vramd_reporter._reporter.Reporter(interval=1.0)
    reporter._random.seed(7)
    gaps = [reporter._next_gap() for _ in range(400)]
    assert all(0.5 <= gap <= 1.5 for gap in gaps)
    assert abs(sum(gaps) / len(gaps) - 1.0) < 0.05
    phases = set()
    at = 0.0
    for gap in gaps:
        at += gap
        phases.add(int((at % 1.0) * 10))
    assert phases == set(range(10))
