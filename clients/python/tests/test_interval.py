"""The range of ``allocated`` and ``reserved`` each report carries: sub-samples and the step hook."""

import json

from conftest import wait_for

import vramd_reporter
from vramd_reporter._report import INTERVAL_KEYS, IntervalRange, ReportBuilder

MiB = 1024 * 1024
FAST = 0.05


def set_figures(torch, index, allocated, reserved):
    stats = torch.state.devices[index]["stats"]
    stats["allocated_bytes.all.current"] = allocated
    stats["active_bytes.all.current"] = allocated
    stats["reserved_bytes.all.current"] = reserved


def interval(stats):
    return [stats[key] for key in INTERVAL_KEYS]


def test_step_hook_makes_the_range_of_a_sawtooth_exact_at_any_report_phase(fake_torch):
    reporter = vramd_reporter.Reporter(interval=1.0, samples_per_interval=0)
    # A training step: the floor of 10 MiB at its start, 40 MiB at its peak;
    # the report happens to fall at the peak every time.
    for allocated in (10, 25, 40, 30):
        set_figures(fake_torch, 0, allocated * MiB, 48 * MiB)
        reporter.step()
    set_figures(fake_torch, 0, 40 * MiB, 48 * MiB)
    report = ReportBuilder().build(fake_torch, ranges=reporter.ranges)
    stats = report["devices"][0]["memory_stats"]
    assert stats["allocated_bytes.all.current"] == 40 * MiB
    assert interval(stats) == [10 * MiB, 40 * MiB, 48 * MiB, 48 * MiB]
    # The range starts afresh with each report: the next one sees only itself.
    report = ReportBuilder().build(fake_torch, ranges=reporter.ranges)
    assert interval(report["devices"][0]["memory_stats"]) == [40 * MiB, 40 * MiB, 48 * MiB, 48 * MiB]


def test_the_step_hook_never_raises_and_needs_no_reporter(fake_torch):
    vramd_reporter.step()  # no reporter started: nothing happens
    reporter = vramd_reporter.Reporter(interval=1.0)
    fake_torch.state.fail["memory_stats"] = RuntimeError("CUDA error")
    reporter.step()
    fake_torch.state.initialized = False
    del fake_torch.state.fail["memory_stats"]
    reporter.step()
    assert fake_torch.state.calls.get("memory_stats", 0) == 1, "CUDA not initialised: not touched"


def test_a_range_without_samples_is_the_current_value_and_odd_stats_get_none():
    ranges = IntervalRange()
    stats = {"allocated_bytes.all.current": 5, "reserved_bytes.all.current": 8}
    ranges.take(0, stats)
    assert interval(stats) == [5, 5, 8, 8]
    empty = {}
    ranges.take(1, empty)
    assert empty == {}, "an allocator never used reports no range"


def test_reports_carry_the_range_the_thread_sampled_between_them(fake_torch, vramd):
    set_figures(fake_torch, 0, 12 * MiB, 22 * MiB)
    vramd_reporter.start(url=vramd.url, interval=0.4, snapshot_interval=None, samples_per_interval=8)
    first = json.loads(vramd.get().body.decode("utf-8"))
    assert interval(first["devices"][0]["memory_stats"]) == [12 * MiB, 12 * MiB, 22 * MiB, 22 * MiB]
    # A dip that only a sample between two reports can see: held until the
    # thread has read the allocator once more, then gone before a report.
    calls = fake_torch.state.calls.get("memory_stats", 0)
    set_figures(fake_torch, 0, 3 * MiB, 22 * MiB)
    assert wait_for(lambda: fake_torch.state.calls.get("memory_stats", 0) > calls)
    set_figures(fake_torch, 0, 12 * MiB, 22 * MiB)
    for _ in range(20):
        stats = json.loads(vramd.get().body.decode("utf-8"))["devices"][0]["memory_stats"]
        if stats["allocated_bytes.all.current"] == 12 * MiB and interval(stats)[0] == 3 * MiB:
            return
    raise AssertionError("no report carried the dip the thread sampled")
