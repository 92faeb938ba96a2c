"""`python -m vramd_reporter` in a subprocess with the fake torch on PYTHONPATH; import without torch; atexit."""

import json
import os
import subprocess
import sys
import time

from conftest import CLIENT, WAIT

GPU0 = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"
GPU1 = "GPU-3c1d9a7b-1111-4e2f-8a3b-5d7e9f1a2b3c"


def run(args, env, timeout=30):
    return subprocess.run(
        [sys.executable, *args],
        cwd=str(CLIENT),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=timeout,
    )


def test_once_prints_the_report(subprocess_env):
    subprocess_env.update(POD_NAME="train-0", POD_NAMESPACE="ml")
    result = run(["-m", "vramd_reporter", "--once"], subprocess_env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == 1  # compact: exactly the body that would be posted
    report = json.loads(lines[0])
    assert report["version"] == 1
    assert report["reporter"]["pod"] == "train-0" and report["reporter"]["namespace"] == "ml"
    assert "container" not in report["reporter"]
    assert isinstance(report["reporter"]["pid"], int) and report["reporter"]["pid"] != os.getpid()
    assert [(d["index"], d["uuid"]) for d in report["devices"]] == [(0, GPU0), (1, GPU1)]
    assert all("snapshot" not in d for d in report["devices"])


def test_once_with_snapshot_and_pretty(subprocess_env):
    result = run(["-m", "vramd_reporter", "--once", "--snapshot", "--pretty"], subprocess_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("{\n  ")
    report = json.loads(result.stdout)
    assert [d["snapshot"] for d in report["devices"]] == [
        {"segments": 2, "total_bytes": 22 << 20, "allocated_bytes": 13 << 20, "largest_free_block_bytes": 8 << 20},
        {"segments": 1, "total_bytes": 2 << 20, "allocated_bytes": 2 << 20, "largest_free_block_bytes": 0},
    ]


def test_once_without_cuda_exits_1(subprocess_env):
    subprocess_env["FAKE_TORCH_CUDA_AVAILABLE"] = "0"
    result = run(["-m", "vramd_reporter", "--once"], subprocess_env)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "CUDA is not available" in result.stderr


def test_import_and_cli_without_torch(subprocess_env):
    # Only the package on the path, and torch made unimportable even if installed.
    subprocess_env["PYTHONPATH"] = str(CLIENT / "src")
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import vramd_reporter\n"
        "assert sys.modules['torch'] is None\n"
        "r = vramd_reporter.start(url='http://127.0.0.1:9', interval=0.01)\n"
        "import time; time.sleep(0.1)\n"
        "assert r.running and r.reports_sent == 0\n"
        "assert r.stop(timeout=5)\n"
        "import runpy; sys.argv = ['vramd_reporter', '--once']\n"
        "runpy.run_module('vramd_reporter', run_name='__main__')\n"
    )
    result = run(["-c", code], subprocess_env)
    assert result.returncode == 1, result.stderr
    assert "cannot import torch" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_action_is_a_usage_error(subprocess_env):
    result = run(["-m", "vramd_reporter"], subprocess_env)
    assert result.returncode == 2
    assert "--once" in result.stderr


def test_send_posts_once_with_token(subprocess_env, vramd):
    result = run(["-m", "vramd_reporter", "--send", "--snapshot", "--url", vramd.url, "--token", "T0k"], subprocess_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "202 Accepted"
    request = vramd.get()
    assert request.headers["Authorization"] == "Bearer T0k"
    assert request.headers["Content-Type"] == "application/json"
    report = json.loads(request.body)
    assert [d["uuid"] for d in report["devices"]] == [GPU0, GPU1]
    assert all("snapshot" in d for d in report["devices"])
    assert vramd.received.empty()  # exactly once


def test_send_rejected_exits_1(subprocess_env, vramd):
    vramd.responses = [(401, {}, b'{"code":"unauthorized","message":"a token is required"}')]
    result = run(["-m", "vramd_reporter", "--send", "--url", vramd.url], subprocess_env)
    assert result.returncode == 1
    assert result.stdout.strip() == "401 Unauthorized"
    assert "a token is required" in result.stderr


def test_send_refused_exits_1(subprocess_env, refused_url):
    result = run(["-m", "vramd_reporter", "--send", "--url", refused_url], subprocess_env)
    assert result.returncode == 1
    assert "cannot reach %s/api/v1/allocator-reports" % refused_url in result.stderr
    assert "Traceback" not in result.stderr


def test_atexit_stops_the_reporter(subprocess_env, vramd):
    code = (
        "import atexit, threading, torch, vramd_reporter\n"
        "def check():\n"
        "    alive = [t for t in threading.enumerate() if t.name == 'vramd-reporter']\n"
        "    print('after atexit: running=%%s threads=%%d' %% (r.running, len(alive)), flush=True)\n"
        "atexit.register(check)  # registered first, so it runs after vramd_reporter's own hook\n"
        "r = vramd_reporter.start(url=%r, interval=0.05)\n"
        "import time\n"
        "deadline = time.monotonic() + 10\n"
        "while r.reports_sent < 1 and time.monotonic() < deadline: time.sleep(0.01)\n"
        "assert r.reports_sent >= 1\n"
        "print('exiting', flush=True)\n" % vramd.url
    )
    started = time.monotonic()
    result = run(["-c", code], subprocess_env, timeout=WAIT + 20)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["exiting", "after atexit: running=False threads=0"]
    assert result.stderr == ""
    assert time.monotonic() - started < WAIT + 10
