"""Report PyTorch CUDA caching-allocator statistics to vramd.

Two lines in a training script::

    import vramd_reporter
    vramd_reporter.start()  # http://127.0.0.1:9477, every second

and, optionally, ``vramd_reporter.step()`` once per training step, so that
each report's range of ``allocated`` is exact whatever the step's length.

Standard library only; ``torch`` is imported lazily (and by the reporter
thread not at all: it uses the torch the workload imported), so importing
this package never fails without torch.
"""

from ._reporter import DEFAULT_URL, Reporter, start, step, stop
from ._report import CudaUnavailable, build_report
from ._version import __version__

__all__ = ["DEFAULT_URL", "CudaUnavailable", "Reporter", "__version__", "build_report", "start", "step", "stop"]
