"""A fake ``torch`` for vramd_reporter's tests: only the ``torch.cuda`` calls the reporter makes.

In-process tests inject it into ``sys.modules`` (see conftest.py) and change
``torch.state``; a subprocess gets it with ``tests/fake_torch`` on PYTHONPATH
and is configured through the environment:

- FAKE_TORCH_CUDA_AVAILABLE=0  torch.cuda.is_available() returns False
"""

import copy
import os
import types
import uuid as _uuid

__version__ = "0.0.0+fake"

MiB = 1024 * 1024

# Two visible devices, each with the keys vramd requires (docs/api.md):
# allocated/reserved/active/inactive_split bytes, num_alloc_retries, num_ooms.
# Device 0 reports its UUID as a uuid.UUID (like recent
# PyTorch's _CUuuid, whose str() has no prefix), device 1 as a plain string.
DEFAULT_DEVICES = [
    {
        "name": "NVIDIA H200",
        "uuid": _uuid.UUID("8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"),
        "stats": {
            "active.all.current": 14,
            "active_bytes.all.current": 13 * MiB,
            "allocated_bytes.all.current": 13 * MiB,
            "allocated_bytes.all.peak": 20 * MiB,
            "inactive_split_bytes.all.current": 8 * MiB + 512 * 1024,
            "max_split_size": -1,  # PyTorch's "unset"
            "num_alloc_retries": 1,
            "num_device_alloc": 2,
            "num_ooms": 0,
            "requested_bytes.all.current": 13 * MiB - 4096,
            "reserved_bytes.all.current": 22 * MiB,
            "segment.all.current": 2,
        },
    },
    {
        "name": "NVIDIA H200",
        "uuid": "3c1d9a7b-1111-4e2f-8a3b-5d7e9f1a2b3c",
        "stats": {
            "active_bytes.all.current": 2 * MiB,
            "allocated_bytes.all.current": 2 * MiB,
            "inactive_split_bytes.all.current": 0,
            "num_alloc_retries": 0,
            "num_ooms": 0,
            "reserved_bytes.all.current": 2 * MiB,
        },
    },
]

# torch.cuda.memory_snapshot(): segments of every device.
DEFAULT_SNAPSHOT = [
    {
        "device": 0,
        "address": 0x7F0000000000,
        "total_size": 2 * MiB,
        "allocated_size": 1 * MiB,
        "active_size": 1 * MiB + 512 * 1024,
        "stream": 0,
        "segment_type": "small",
        "blocks": [
            {"size": 1 * MiB, "state": "active_allocated"},
            {"size": 512 * 1024, "state": "inactive"},
            {"size": 512 * 1024, "state": "active_pending_free"},
        ],
    },
    {
        "device": 1,
        "address": 0x7F1000000000,
        "total_size": 2 * MiB,
        "allocated_size": 2 * MiB,
        "active_size": 2 * MiB,
        "stream": 0,
        "segment_type": "large",
        "blocks": [{"size": 2 * MiB, "state": "active_allocated"}],
    },
    {
        "device": 0,
        "address": 0x7F0000200000,
        "total_size": 20 * MiB,
        "allocated_size": 12 * MiB,
        "active_size": 12 * MiB,
        "stream": 0,
        "segment_type": "large",
        "blocks": [
            {"size": 12 * MiB, "state": "active_allocated"},
            {"size": 8 * MiB, "state": "inactive"},
        ],
    },
]

# Mutable state tests change; reset() restores the defaults.
state = types.SimpleNamespace()


def reset():
    state.available = os.environ.get("FAKE_TORCH_CUDA_AVAILABLE", "1") != "0"
    state.initialized = True
    state.built_with_cuda = True  # False: a CPU-only build (torch.backends.cuda.is_built())
    state.devices = copy.deepcopy(DEFAULT_DEVICES)
    state.snapshot = copy.deepcopy(DEFAULT_SNAPSHOT)
    state.fail = {}  # name of a torch.cuda function -> exception it raises
    state.calls = {}  # name of a torch.cuda function -> number of calls


def _call(name):
    state.calls[name] = state.calls.get(name, 0) + 1
    error = state.fail.get(name)
    if error is not None:
        raise error


def _check_index(index):
    if not 0 <= index < len(state.devices):
        raise AssertionError("Invalid device id")


def is_available():
    _call("is_available")
    return state.available


def is_initialized():
    _call("is_initialized")
    return state.initialized


def device_count():
    _call("device_count")
    return len(state.devices) if state.available else 0


def get_device_properties(index):
    _call("get_device_properties")
    _check_index(index)
    device = state.devices[index]
    properties = types.SimpleNamespace(name=device["name"], total_memory=141 * 1024 * MiB)
    if "uuid" in device:  # absent: a PyTorch too old to have the attribute
        properties.uuid = device["uuid"]
    return properties


def memory_stats(index=None):
    _call("memory_stats")
    _check_index(index)
    return dict(state.devices[index]["stats"])


def memory_snapshot():
    _call("memory_snapshot")
    return copy.deepcopy(state.snapshot)


cuda = types.ModuleType("torch.cuda")
for _function in (is_available, is_initialized, device_count, get_device_properties, memory_stats, memory_snapshot):
    setattr(cuda, _function.__name__, _function)
del _function


def _is_built():
    _call("backends.cuda.is_built")
    return state.built_with_cuda


backends = types.ModuleType("torch.backends")
backends.cuda = types.ModuleType("torch.backends.cuda")
backends.cuda.is_built = _is_built

reset()
