"""The reporter against the real vramd binary (simulated GPUs), so the wire format cannot drift.

The binary is VRAMD_BIN when set (scripts/test.sh sets it after `cargo test`
has built it; then a missing binary fails), else <repo>/target/debug/vramd
when it exists; without either these tests are skipped.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import urllib.request

import pytest
from conftest import CLIENT, WAIT, wait_for

import vramd_reporter

REPO = CLIENT.parent.parent


def _binary():
    configured = os.environ.get("VRAMD_BIN")
    if configured:
        path = pathlib.Path(configured)
        if not path.is_absolute():
            path = REPO / path
        assert path.is_file(), "VRAMD_BIN=%s does not exist" % configured
        return path
    path = REPO / "target" / "debug" / "vramd"
    if not path.is_file():
        pytest.skip("no vramd binary (build it with cargo, or set VRAMD_BIN)")
    return path


def _get(url):
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def real_vramd(tmp_path):
    """vramd --simulate on 127.0.0.1 with built-in defaults; yields its base URL."""
    binary = _binary()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMD_")}
    log = open(str(tmp_path / "vramd.log"), "w")
    process = subprocess.Popen(
        [str(binary), "--simulate", "steady-inference", "--gpus", "2", "--listen", "127.0.0.1:%d" % port],
        cwd=str(tmp_path),  # no ./config/vramd.toml: built-in defaults
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = "http://127.0.0.1:%d" % port

    def ready():
        if process.poll() is not None:
            return True
        try:
            return bool(_get(url + "/api/v1/devices")["devices"])
        except Exception:
            return False

    try:
        assert wait_for(ready, timeout=WAIT, step=0.05)
        assert process.poll() is None, (tmp_path / "vramd.log").read_text()
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=WAIT)
        log.close()


def _use_simulated_uuids(fake_torch, url):
    """The fake torch's devices get the simulated GPUs' UUIDs, without the prefix (as torch gives them)."""
    uuids = [d["uuid"] for d in sorted(_get(url + "/api/v1/devices")["devices"], key=lambda d: d["index"])]
    assert len(uuids) == 2 and all(u.startswith("GPU-") for u in uuids)
    for device, nvml_uuid in zip(fake_torch.state.devices, uuids):
        device["uuid"] = nvml_uuid[len("GPU-"):]
    return uuids


def _ours(url):
    return [r for r in _get(url + "/api/v1/allocator-reports")["reports"] if r["reporter"]["pid"] == os.getpid()]


def test_reporter_reports_are_accepted_by_vramd(fake_torch, no_pod_env, real_vramd):
    uuids = _use_simulated_uuids(fake_torch, real_vramd)
    reporter = vramd_reporter.start(url=real_vramd, interval=0.2, snapshot_interval=1.0)
    assert wait_for(lambda: reporter.reports_sent >= 2 or reporter.reports_failed > 0)
    assert reporter.reports_failed == 0 and reporter.last_status == 202
    assert wait_for(lambda: len(_ours(real_vramd)) == 2, step=0.1)
    reports = sorted(_ours(real_vramd), key=lambda r: r["index"])
    assert [(r["index"], r["uuid"]) for r in reports] == [(0, uuids[0]), (1, uuids[1])]
    assert reports[0]["stats"]["reserved_bytes"] == 22 * 1024 * 1024
    assert reports[0]["stats"]["allocated_bytes"] == 13 * 1024 * 1024


def test_cli_send_is_accepted_by_vramd(subprocess_env, real_vramd):
    result = subprocess.run(
        [sys.executable, "-m", "vramd_reporter", "--send", "--snapshot", "--url", real_vramd],
        cwd=str(CLIENT),
        env=subprocess_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "202 Accepted"


def test_vramd_rejection_is_logged_once(fake_torch, real_vramd, caplog):
    _use_simulated_uuids(fake_torch, real_vramd)
    del fake_torch.state.devices[0]["stats"]["num_ooms"]  # vramd requires it
    reporter = vramd_reporter.start(url=real_vramd, interval=0.2)  # under ingest.rate_limit (10/s)
    assert wait_for(lambda: reporter.reports_failed >= 3)
    assert reporter.last_status == 400 and reporter.reports_sent == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "vramd_reporter" and r.levelname == "WARNING"]
    assert len(warnings) == 1 and "HTTP 400" in warnings[0] and "num_ooms" in warnings[0]
