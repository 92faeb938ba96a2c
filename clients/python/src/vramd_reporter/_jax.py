"""Allocator reports from JAX: each local GPU's ``device.memory_stats()``
mapped onto vramd's report document (the mapping is in docs/api.md, "JAX").

Uses only a ``jax`` the workload imported itself, and only once its
backends exist, so the reporter never initialises CUDA. A JAX device has
no UUID; it is taken from the device when it carries one, else from a
``CUDA_VISIBLE_DEVICES`` that lists UUIDs, and a device without one is left
out (vramd joins by UUID).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Optional

from ._report import WIRE_VERSION, filter_stats, normalise_uuid, reporter_identity, utc_timestamp

log = logging.getLogger("vramd_reporter")

#: Raw JAX keys carried beside the mapped ones.
CARRIED = ("largest_free_block_bytes", "bytes_limit", "peak_bytes_in_use", "num_allocs")


def initialised(jax: Any) -> bool:
    """JAX has created its backends (so listing devices initialises nothing)."""
    bridge = getattr(getattr(getattr(jax, "_src", None), "xla_bridge", None), "_backends", None)
    return bool(bridge)


def _visible_uuids() -> List[str]:
    entries = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    return [entry for entry in entries if entry.startswith(("GPU-", "MIG-"))]


def device_uuid(device: Any) -> Optional[str]:
    found = normalise_uuid(getattr(device, "uuid", None))
    if found is not None:
        return found
    visible = _visible_uuids()
    index = getattr(device, "local_hardware_id", None)
    if isinstance(index, int) and 0 <= index < len(visible):
        return visible[index]
    return None


def map_stats(stats: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The device's ``memory_stats`` and ``snapshot`` in vramd's terms; None without bytes_in_use."""
    raw = filter_stats(stats)
    in_use = raw.get("bytes_in_use")
    if in_use is None:
        return None
    in_use = int(in_use)
    pool = raw.get("bytes_reserved") or raw.get("pool_bytes") or raw.get("bytes_limit") or in_use
    reserved = max(int(pool), in_use)  # vramd refuses allocated above reserved
    mapped: Dict[str, Any] = {
        "allocated_bytes.all.current": in_use,
        "active_bytes.all.current": in_use,
        "reserved_bytes.all.current": reserved,
        "inactive_split_bytes.all.current": 0,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }
    for key in CARRIED:
        if key in raw and raw[key] >= 0:
            mapped[key] = raw[key]
    device: Dict[str, Any] = {"memory_stats": mapped}
    largest = raw.get("largest_free_block_bytes")
    if largest is not None and largest >= 0:
        device["snapshot"] = {
            "segments": 1,
            "total_bytes": reserved,
            "allocated_bytes": in_use,
            "largest_free_block_bytes": min(int(largest), reserved),
        }
    return device


def build(jax: Any) -> Optional[Dict[str, Any]]:
    """One report for every local GPU with a UUID; None before JAX's backends exist."""
    if not initialised(jax):
        return None
    devices = []
    for device in jax.local_devices():
        if getattr(device, "platform", None) != "gpu":
            continue
        uuid = device_uuid(device)
        stats = device.memory_stats()
        if uuid is None or not stats:
            continue
        mapped = map_stats(stats)
        if mapped is None:
            continue
        devices.append(dict(uuid=uuid, index=int(getattr(device, "local_hardware_id", device.id)), **mapped))
    return {"version": WIRE_VERSION, "reporter": reporter_identity(), "at": utc_timestamp(), "devices": devices}
