"""OOM capture against a fake torch: one event per OOM, bounded snapshot
files, nothing raised when vramd is down, no CUDA initialisation."""

import json
import os
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, HTTPServer

from vramd_reporter._oom import OomCapture


class FakeTorch(types.ModuleType):
    def __init__(self):
        super().__init__("torch")
        self.observers = []
        self.cuda_initialised = False
        self.history = None
        memory = types.SimpleNamespace(
            _record_memory_history=self._record,
            _snapshot=lambda: {"segments": [{"device": 0, "total_size": 8 << 30, "allocated_size": 6 << 30,
                                              "blocks": [{"state": "inactive", "size": 256 << 20},
                                                         {"state": "active_allocated", "size": 6 << 30}]}]},
            _dump_snapshot=lambda path: open(path, "wb").write(b"x" * 1000),
        )
        self.cuda = types.SimpleNamespace(
            memory=memory,
            get_device_properties=lambda i: types.SimpleNamespace(uuid="8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"),
            memory_stats=lambda i: {"allocated_bytes.all.current": 6 << 30, "reserved_bytes.all.current": 8 << 30,
                                    "active_bytes.all.current": 6 << 30, "inactive_split_bytes.all.current": 1 << 30,
                                    "num_alloc_retries": 2, "num_ooms": 1},
            init=self._init,
        )
        self._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=self.observers.append)

    def _record(self, max_entries):
        self.history = max_entries

    def _init(self):
        self.cuda_initialised = True

    def oom(self, size=1 << 30):
        for observer in self.observers:
            observer(0, size, 8 << 30, 100 << 20)


def serve(put_status=201):
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, json.loads(body)))
            answer = json.dumps({"status": "accepted", "id": 7}).encode()
            self.send_response(202)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def do_PUT(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, body))
            self.send_response(put_status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


def wait_for(condition, seconds=5.0):
    event = threading.Event()
    for _ in range(int(seconds / 0.02)):
        if condition():
            return True
        event.wait(0.02)
    return condition()


def install(monkeypatch):
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def test_one_event_per_oom_with_the_numbers_and_a_bounded_snapshot_dir(monkeypatch, tmp_path):
    torch = install(monkeypatch)
    server, received = serve()
    try:
        capture = OomCapture("http://127.0.0.1:%d" % server.server_port, record_history=1000,
                             snapshot_dir=str(tmp_path), max_snapshots=2, max_snapshot_bytes=10_000)
        assert capture.attach()
        assert torch.history == 1000
        torch.oom()
        torch.oom()  # the observer fired again for the same OOM
        assert wait_for(lambda: len(received) == 1)
        path, event = received[0]
        assert path == "/api/v1/oom-events"
        assert event["requested_bytes"] == 1 << 30 and event["device_free_bytes"] == 100 << 20
        assert event["uuid"].startswith("GPU-")
        assert event["snapshot"]["largest_free_block_bytes"] == 256 << 20
        assert os.path.exists(event["snapshot_path"])
        for size in (2 << 30, 3 << 30, 4 << 30):  # three more OOMs, other sizes
            torch.oom(size)
        assert wait_for(lambda: len(received) == 4)
        assert len(os.listdir(tmp_path)) <= 2
        assert not torch.cuda_initialised
    finally:
        server.shutdown()


def test_nothing_raises_when_vramd_is_down(monkeypatch, tmp_path):
    torch = install(monkeypatch)
    capture = OomCapture("http://127.0.0.1:9", timeout=0.5)
    assert capture.attach()
    torch.oom()
    assert wait_for(lambda: capture.events_failed == 1)
    assert capture.events_sent == 0


def test_without_torch_imported_nothing_is_attached(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert not OomCapture("http://127.0.0.1:9").attach()
    assert "torch" not in sys.modules


def test_start_with_oom_capture_attaches_the_observer(monkeypatch):
    import vramd_reporter

    torch = install(monkeypatch)
    vramd_reporter.stop()
    reporter = vramd_reporter.start("http://127.0.0.1:9", interval=60, oom_capture=True, timeout=0.5)
    try:
        assert reporter.oom is not None and len(torch.observers) == 1
        torch.oom()
        assert wait_for(lambda: reporter.oom.events_failed == 1)
    finally:
        vramd_reporter.stop()


def test_the_dumped_snapshot_is_uploaded_to_its_event_when_asked(monkeypatch, tmp_path):
    torch = install(monkeypatch)
    server, received = serve()
    try:
        capture = OomCapture("http://127.0.0.1:%d" % server.server_port, record_history=100,
                             snapshot_dir=str(tmp_path), upload_snapshot=True)
        assert capture.attach()
        torch.oom()
        assert wait_for(lambda: capture.snapshots_uploaded == 1)
        (post_path, event), (put_path, uploaded) = received
        assert post_path == "/api/v1/oom-events"
        assert put_path == "/api/v1/oom-events/7/snapshot", "to the id vramd answered"
        with open(event["snapshot_path"], "rb") as dumped:
            assert uploaded == dumped.read()
        assert not torch.cuda_initialised
    finally:
        server.shutdown()


def test_a_refused_upload_is_counted_and_raises_nothing(monkeypatch, tmp_path):
    torch = install(monkeypatch)
    server, received = serve(put_status=404)  # vramd without ingest.snapshot_dir
    try:
        capture = OomCapture("http://127.0.0.1:%d" % server.server_port, record_history=100,
                             snapshot_dir=str(tmp_path), upload_snapshot=True, timeout=1.0)
        assert capture.attach()
        torch.oom()
        assert wait_for(lambda: capture.snapshots_failed == 1)
        assert capture.events_sent == 1 and capture.snapshots_uploaded == 0
    finally:
        server.shutdown()


def test_no_upload_unless_asked(monkeypatch, tmp_path):
    torch = install(monkeypatch)
    server, received = serve()
    try:
        capture = OomCapture("http://127.0.0.1:%d" % server.server_port, record_history=100,
                             snapshot_dir=str(tmp_path))
        assert capture.attach()
        torch.oom()
        assert wait_for(lambda: capture.events_sent == 1)
        assert [path for path, _ in received] == ["/api/v1/oom-events"]
    finally:
        server.shutdown()
