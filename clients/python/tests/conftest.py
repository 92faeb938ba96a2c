"""Fixtures: the fake torch, a recording vramd stand-in on 127.0.0.1, bounded waits."""

import email.message
import http.server
import importlib.util
import os
import pathlib
import queue
import socket
import sys
import threading
import time
from typing import Callable, List, NamedTuple, Optional, Tuple

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
CLIENT = TESTS.parent
SRC = CLIENT / "src"
FAKE_TORCH_DIR = TESTS / "fake_torch"

if str(SRC) not in sys.path:  # also set by pyproject's pythonpath; kept for other runners
    sys.path.insert(0, str(SRC))

import vramd_reporter  # noqa: E402
from vramd_reporter import _reporter  # noqa: E402

# Every wait in these tests is bounded by this (seconds).
WAIT = 10.0


def _load_fake_torch():
    path = FAKE_TORCH_DIR / "torch" / "__init__.py"
    spec = importlib.util.spec_from_file_location("torch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_FAKE_TORCH = _load_fake_torch()


@pytest.fixture
def fake_torch(monkeypatch):
    """The fake torch in sys.modules, reset to its defaults (two devices)."""
    monkeypatch.delenv("FAKE_TORCH_CUDA_AVAILABLE", raising=False)
    _FAKE_TORCH.reset()
    monkeypatch.setitem(sys.modules, "torch", _FAKE_TORCH)
    return _FAKE_TORCH


@pytest.fixture
def no_pod_env(monkeypatch):
    for variable in ("POD_NAME", "POD_NAMESPACE", "VRAMD_CONTAINER_NAME", "CONTAINER_NAME"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture(autouse=True)
def _no_reporter_left_running():
    yield
    assert vramd_reporter.stop(timeout=WAIT), "the reporter thread did not stop"
    with _reporter._lock:
        _reporter._current = None


def wait_for(predicate: Callable[[], bool], timeout: float = WAIT, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


class Received(NamedTuple):
    method: str
    path: str
    headers: email.message.Message
    body: bytes
    at: float  # time.monotonic() on arrival


class Vramd:
    """A stand-in for vramd: records every request, answers from a script of responses."""

    def __init__(self) -> None:
        self.received: "queue.Queue[Received]" = queue.Queue()
        self.count = 0
        # (status, headers, body) answered in turn; the last one repeats.
        self.responses: List[Tuple[int, dict, bytes]] = [(202, {}, b'{"accepted":true}')]
        # While set, handlers wait (bounded) on `release` before answering.
        self.hold = False
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.server: Optional[http.server.ThreadingHTTPServer] = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return "http://%s:%d" % (host, port)

    def next_response(self) -> Tuple[int, dict, bytes]:
        with self._lock:
            self.count += 1
            if len(self.responses) > 1:
                return self.responses.pop(0)
            return self.responses[0]

    def get(self, timeout: float = WAIT) -> Received:
        return self.received.get(timeout=timeout)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        vramd: Vramd = self.server.vramd  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        vramd.received.put(Received("POST", self.path, self.headers, body, time.monotonic()))
        status, headers, payload = vramd.next_response()
        if vramd.hold:
            vramd.release.wait(WAIT)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format, *args):  # noqa: A002 - keep the test output quiet
        pass


@pytest.fixture
def vramd():
    """A recording HTTP server on 127.0.0.1 (an ephemeral port)."""
    stand_in = Vramd()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.vramd = stand_in  # type: ignore[attr-defined]
    stand_in.server = server
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        stand_in.release.set()
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


@pytest.fixture
def refused_url():
    """A URL on 127.0.0.1 where nothing listens: the port is bound, never listened on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield "http://127.0.0.1:%d" % sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture
def subprocess_env(no_pod_env):
    """Environment for `python -m vramd_reporter` with the fake torch importable."""
    env = dict(os.environ)
    for variable in ("POD_NAME", "POD_NAMESPACE", "VRAMD_CONTAINER_NAME", "CONTAINER_NAME", "FAKE_TORCH_CUDA_AVAILABLE"):
        env.pop(variable, None)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(FAKE_TORCH_DIR)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(proxy, None)
    return env
