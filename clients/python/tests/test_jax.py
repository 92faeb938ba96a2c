"""JAX reports against a fake jax: the mapping of memory_stats, UUIDs from
CUDA_VISIBLE_DEVICES, nothing before JAX's backends exist (no CUDA
initialisation), and a report posted by the running reporter."""

import json
import sys
import types

import vramd_reporter
from vramd_reporter import _jax

GIB = 1 << 30
UUID = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"


class FakeJax(types.ModuleType):
    """Just what the reporter reads: local_devices() and whether backends exist."""

    def __init__(self, stats, initialised=True):
        super().__init__("jax")
        self.listed = 0
        backends = {"cuda": object()} if initialised else {}
        self._src = types.SimpleNamespace(xla_bridge=types.SimpleNamespace(_backends=backends))
        self.device = types.SimpleNamespace(platform="gpu", id=0, local_hardware_id=0, memory_stats=lambda: stats)

    def local_devices(self):
        self.listed += 1  # on real JAX this would initialise the backends
        return [self.device, types.SimpleNamespace(platform="cpu", id=1, memory_stats=lambda: None)]


def preallocated():
    # JAX's default: 75 % of an 80 GiB GPU taken as its pool, 2 GiB live.
    return {"bytes_in_use": 2 * GIB, "pool_bytes": 60 * GIB, "bytes_limit": 60 * GIB,
            "peak_bytes_in_use": 3 * GIB, "largest_free_block_bytes": 58 * GIB, "num_allocs": 1234}


def test_memory_stats_map_onto_the_report(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUID)
    report = _jax.build(FakeJax(preallocated()))
    [device] = report["devices"]
    assert device["uuid"] == UUID and device["index"] == 0
    stats = device["memory_stats"]
    assert stats["allocated_bytes.all.current"] == 2 * GIB == stats["active_bytes.all.current"]
    assert stats["reserved_bytes.all.current"] == 60 * GIB
    assert stats["inactive_split_bytes.all.current"] == 0
    for key in ("largest_free_block_bytes", "bytes_limit", "peak_bytes_in_use", "num_allocs"):
        assert stats[key] == preallocated()[key]
    assert device["snapshot"] == {"segments": 1, "total_bytes": 60 * GIB, "allocated_bytes": 2 * GIB,
                                  "largest_free_block_bytes": 58 * GIB}


def test_bytes_reserved_is_preferred_and_reserved_never_below_in_use(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUID)
    stats = dict(preallocated(), bytes_reserved=40 * GIB)
    assert _jax.map_stats(stats)["memory_stats"]["reserved_bytes.all.current"] == 40 * GIB
    odd = {"bytes_in_use": 5 * GIB, "pool_bytes": 4 * GIB}
    mapped = _jax.map_stats(odd)["memory_stats"]
    assert mapped["reserved_bytes.all.current"] == 5 * GIB
    assert "snapshot" not in _jax.map_stats(odd)
    assert _jax.map_stats({"num_allocs": 3}) is None


def test_nothing_is_listed_before_jax_has_initialised_its_backends(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUID)
    jax = FakeJax(preallocated(), initialised=False)
    assert _jax.build(jax) is None
    assert jax.listed == 0, "listing devices would initialise CUDA"


def test_a_device_without_a_uuid_is_left_out(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert _jax.build(FakeJax(preallocated()))["devices"] == []


def test_the_reporter_posts_jax_reports(monkeypatch, vramd):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUID)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setitem(sys.modules, "jax", FakeJax(preallocated()))
    vramd_reporter.start(vramd.url, interval=0.05)
    try:
        received = vramd.get()
    finally:
        vramd_reporter.stop()
    body = json.loads(received.body)
    assert received.path == "/api/v1/allocator-reports"
    assert body["devices"][0]["memory_stats"]["bytes_limit"] == 60 * GIB
    assert "torch" not in sys.modules
