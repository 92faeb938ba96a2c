"""The report itself: exact payloads, UUIDs, stats filtering, reporter fields, snapshot summaries."""

import datetime as dt
import json
import logging
import os
import re
import socket
import uuid

import pytest

import vramd_reporter
from vramd_reporter import _http
from vramd_reporter._report import (
    ReportBuilder,
    filter_stats,
    normalise_uuid,
    summarise_snapshot,
    utc_timestamp,
)

MiB = 1024 * 1024
NOW = dt.datetime(2026, 11, 21, 1, 0, 0, 123456, tzinfo=dt.timezone.utc)

STATS_0 = {
    "active.all.current": 14,
    "active_bytes.all.current": 13 * MiB,
    "allocated_bytes.all.current": 13 * MiB,
    "allocated_bytes.all.peak": 20 * MiB,
    "inactive_split_bytes.all.current": 8 * MiB + 512 * 1024,
    "max_split_size": -1,
    "num_alloc_retries": 1,
    "num_device_alloc": 2,
    "num_ooms": 0,
    "requested_bytes.all.current": 13 * MiB - 4096,
    "reserved_bytes.all.current": 22 * MiB,
    "segment.all.current": 2,
}
STATS_1 = {
    "active_bytes.all.current": 2 * MiB,
    "allocated_bytes.all.current": 2 * MiB,
    "inactive_split_bytes.all.current": 0,
    "num_alloc_retries": 0,
    "num_ooms": 0,
    "reserved_bytes.all.current": 2 * MiB,
}


def golden(snapshot: bool, reporter: dict) -> dict:
    """The exact report for the fake torch's two default devices."""
    device_0 = {"uuid": "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20", "index": 0, "memory_stats": STATS_0}
    device_1 = {"uuid": "GPU-3c1d9a7b-1111-4e2f-8a3b-5d7e9f1a2b3c", "index": 1, "memory_stats": STATS_1}
    if snapshot:
        device_0["snapshot"] = {
            "segments": 2,
            "total_bytes": 22 * MiB,
            "allocated_bytes": 13 * MiB,
            "largest_free_block_bytes": 8 * MiB,
        }
        device_1["snapshot"] = {
            "segments": 1,
            "total_bytes": 2 * MiB,
            "allocated_bytes": 2 * MiB,
            "largest_free_block_bytes": 0,
        }
    return {
        "version": 1,
        "reporter": reporter,
        "at": "2026-11-21T01:00:00.123Z",
        "devices": [device_0, device_1],
    }


@pytest.fixture
def node_1(monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "node-1")


def test_golden_payload_two_devices_without_snapshot(fake_torch, no_pod_env, node_1):
    report = vramd_reporter.build_report(now=NOW)
    assert report == golden(False, {"pid": os.getpid(), "hostname": "node-1"})
    # The JSON is what goes on the wire: same structure back, key order kept.
    assert json.loads(_http.encode(report)) == report
    assert list(report) == ["version", "reporter", "at", "devices"]
    assert list(report["devices"][0]) == ["uuid", "index", "memory_stats"]
    assert fake_torch.state.calls.get("memory_snapshot", 0) == 0


def test_golden_payload_two_devices_with_snapshot(fake_torch, monkeypatch, node_1):
    monkeypatch.setenv("POD_NAME", "train-0")
    monkeypatch.setenv("POD_NAMESPACE", "ml")
    monkeypatch.setenv("VRAMD_CONTAINER_NAME", "trainer")
    report = vramd_reporter.build_report(snapshot=True, now=NOW)
    assert report == golden(
        True,
        {"pid": os.getpid(), "hostname": "node-1", "pod": "train-0", "namespace": "ml", "container": "trainer"},
    )
    assert list(report["devices"][0]) == ["uuid", "index", "memory_stats", "snapshot"]
    assert fake_torch.state.calls["memory_snapshot"] == 1  # one snapshot for all devices


@pytest.mark.parametrize(
    "raw, expected",
    [
        (uuid.UUID("8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"), "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"),
        ("8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20", "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"),
        ("GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20", "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"),
        ("MIG-5e0b3c1a-2222-4f5d-9c1e-7a9b1c3d5e7f", "MIG-5e0b3c1a-2222-4f5d-9c1e-7a9b1c3d5e7f"),
        (" 8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20\n", "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"),
        (
            uuid.UUID("8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20").bytes,
            "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20",
        ),
        (None, None),
        ("", None),
    ],
)
def test_uuid_normalisation(raw, expected):
    assert normalise_uuid(raw) == expected


def test_uuid_normalisation_in_the_report(fake_torch):
    fake_torch.state.devices[0]["uuid"] = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"
    fake_torch.state.devices[1]["uuid"] = "MIG-5e0b3c1a-2222-4f5d-9c1e-7a9b1c3d5e7f"
    report = vramd_reporter.build_report()
    assert [d["uuid"] for d in report["devices"]] == [
        "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20",
        "MIG-5e0b3c1a-2222-4f5d-9c1e-7a9b1c3d5e7f",
    ]


@pytest.mark.parametrize("missing", ["attribute", "none", "empty"])
def test_device_without_uuid_is_skipped_and_logged_once(fake_torch, caplog, missing):
    if missing == "attribute":
        del fake_torch.state.devices[0]["uuid"]
    else:
        fake_torch.state.devices[0]["uuid"] = None if missing == "none" else ""
    builder = ReportBuilder()
    with caplog.at_level(logging.WARNING, logger="vramd_reporter"):
        for _ in range(3):
            report = builder.build(fake_torch, snapshot=True)
            assert [d["index"] for d in report["devices"]] == [1]
            assert report["devices"][0]["uuid"] == "GPU-3c1d9a7b-1111-4e2f-8a3b-5d7e9f1a2b3c"
    warnings = [r for r in caplog.records if r.name == "vramd_reporter" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "device 0 has no UUID" in warnings[0].getMessage()
    # Properties are asked once per device, not every tick.
    assert fake_torch.state.calls["get_device_properties"] == 2


def test_non_numeric_and_non_finite_stats_are_dropped(fake_torch):
    fake_torch.state.devices[1]["stats"] = {
        "allocated_bytes.all.current": 7,
        "reserved_bytes.all.current": 9.0,
        "ratio": 0.25,
        "huge": 2**70,
        "nan": float("nan"),
        "inf": float("inf"),
        "-inf": float("-inf"),
        "flag": True,
        "text": "12",
        "none": None,
        "list": [1, 2],
        "nested": {"a": 1},
        3: 4,
    }
    report = vramd_reporter.build_report()
    stats = report["devices"][1]["memory_stats"]
    assert stats == {"allocated_bytes.all.current": 7, "reserved_bytes.all.current": 9.0, "ratio": 0.25, "huge": 2**70}
    assert isinstance(stats["allocated_bytes.all.current"], int)
    assert isinstance(stats["reserved_bytes.all.current"], float)
    body = _http.encode(report).decode()
    assert "NaN" not in body and "Infinity" not in body


def test_filter_stats_keeps_int_subclasses_as_plain_ints():
    class Count(int):
        pass

    kept = filter_stats({"a": Count(3), "b": False})
    assert kept == {"a": 3} and type(kept["a"]) is int


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, {}),
        ({"POD_NAME": "train-0"}, {"pod": "train-0"}),
        (
            {"POD_NAME": "train-0", "POD_NAMESPACE": "ml", "VRAMD_CONTAINER_NAME": "trainer"},
            {"pod": "train-0", "namespace": "ml", "container": "trainer"},
        ),
        ({"POD_NAME": "", "POD_NAMESPACE": "ml", "VRAMD_CONTAINER_NAME": ""}, {"namespace": "ml"}),
        # A generic CONTAINER_NAME (set by images and tools for their own use)
        # is not the Kubernetes container: only vramd's own variable counts.
        ({"POD_NAME": "train-0", "CONTAINER_NAME": "web"}, {"pod": "train-0"}),
    ],
)
def test_reporter_fields_from_environment(fake_torch, no_pod_env, node_1, monkeypatch, env, expected):
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    reporter = vramd_reporter.build_report()["reporter"]
    assert reporter == dict({"pid": os.getpid(), "hostname": "node-1"}, **expected)
    assert None not in reporter.values()


def test_timestamp_is_rfc3339_utc_with_milliseconds():
    assert utc_timestamp(NOW) == "2026-11-21T01:00:00.123Z"
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert utc_timestamp(dt.datetime(2026, 11, 21, 3, 0, 0, 999999, tzinfo=plus_two)) == "2026-11-21T01:00:00.999Z"
    assert utc_timestamp(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05.000Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", utc_timestamp())


def test_snapshot_summary_per_device():
    segments = [
        {"device": 0, "total_size": 100, "allocated_size": 10, "blocks": [{"size": 90, "state": "inactive"}]},
        {"device": 0, "total_size": 50, "allocated_size": 50, "blocks": [{"size": 50, "state": "active_allocated"}]},
        {
            "device": 3,
            "total_size": 30,
            "allocated_size": 0,
            "blocks": [{"size": 20, "state": "active_pending_free"}, {"size": 10, "state": "inactive"}],
        },
        {"device": 3, "total_size": 8, "allocated_size": 0, "blocks": []},
    ]
    assert summarise_snapshot(segments) == {
        0: {"segments": 2, "total_bytes": 150, "allocated_bytes": 60, "largest_free_block_bytes": 90},
        3: {"segments": 2, "total_bytes": 38, "allocated_bytes": 0, "largest_free_block_bytes": 10},
    }


def test_device_without_segments_gets_an_empty_snapshot(fake_torch):
    fake_torch.state.snapshot = [s for s in fake_torch.state.snapshot if s["device"] == 0]
    report = vramd_reporter.build_report(snapshot=True)
    assert report["devices"][1]["snapshot"] == {
        "segments": 0,
        "total_bytes": 0,
        "allocated_bytes": 0,
        "largest_free_block_bytes": 0,
    }


@pytest.mark.parametrize("broken", ["raises", "malformed"])
def test_failed_snapshot_leaves_it_out_but_keeps_the_stats(fake_torch, broken):
    if broken == "raises":
        fake_torch.state.fail["memory_snapshot"] = RuntimeError("snapshot exploded")
    else:
        del fake_torch.state.snapshot[0]["total_size"]
    builder = ReportBuilder()
    report = builder.build(fake_torch, snapshot=True)
    assert [list(d) for d in report["devices"]] == [["uuid", "index", "memory_stats"]] * 2
    assert builder.snapshot_error is not None
    builder.build(fake_torch, snapshot=False)
    assert builder.snapshot_error is None


def test_cuda_unavailable_raises_for_build_report(fake_torch):
    fake_torch.state.available = False
    with pytest.raises(vramd_reporter.CudaUnavailable):
        vramd_reporter.build_report()


def test_uninitialised_cuda_is_not_touched_by_the_reporter(fake_torch):
    fake_torch.state.initialized = False
    assert ReportBuilder().build(fake_torch, require_initialized=True) is None
    assert "get_device_properties" not in fake_torch.state.calls
    assert "memory_stats" not in fake_torch.state.calls
    # Without the requirement (the CLI), it reports anyway.
    assert len(ReportBuilder().build(fake_torch)["devices"]) == 2


def test_build_report_without_torch_raises_import_error(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch", None)
    with pytest.raises(ImportError):
        vramd_reporter.build_report()
