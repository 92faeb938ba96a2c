"""Building allocator reports in vramd's wire format (version 1).

Pure functions over what ``torch.cuda`` returns; ``torch`` is always passed in
(or imported lazily by the caller), never imported here at module level.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os
import socket
import threading
import uuid as _uuid
from typing import Any, Dict, Iterable, Mapping, Optional

log = logging.getLogger("vramd_reporter")

WIRE_VERSION = 1

# Reporter fields taken from the environment, as (JSON key, environment
# variable). Unset or empty variables leave the key out. The pod's name and
# namespace come from the Kubernetes downward API (fieldRef metadata.name and
# metadata.namespace). The downward API has no field for a container's name,
# so the pod spec sets it literally, under a name of vramd's own: a generic
# CONTAINER_NAME is set by images and other tools for their own purposes.
ENV_FIELDS = (
    ("pod", "POD_NAME"),
    ("namespace", "POD_NAMESPACE"),
    ("container", "VRAMD_CONTAINER_NAME"),
)

UUID_PREFIXES = ("GPU-", "MIG-")

# Block state of a free piece of a segment in torch.cuda.memory_snapshot().
FREE_BLOCK_STATE = "inactive"


class CudaUnavailable(RuntimeError):
    """torch.cuda.is_available() is False."""


def utc_timestamp(now: Optional[_dt.datetime] = None) -> str:
    """RFC 3339 UTC with milliseconds and a trailing Z: 2026-11-21T01:00:00.123Z.

    A naive ``now`` is taken to be UTC already.
    """
    if now is None:
        now = _dt.datetime.now(_dt.timezone.utc)
    elif now.tzinfo is not None:
        now = now.astimezone(_dt.timezone.utc)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (
        now.year,
        now.month,
        now.day,
        now.hour,
        now.minute,
        now.second,
        now.microsecond // 1000,
    )


def reporter_identity() -> Dict[str, Any]:
    """The ``reporter`` object: pid, hostname, and pod/namespace/container when set."""
    identity: Dict[str, Any] = {"pid": os.getpid(), "hostname": socket.gethostname()}
    for key, variable in ENV_FIELDS:
        value = os.environ.get(variable)
        if value:
            identity[key] = value
    return identity


def normalise_uuid(value: Any) -> Optional[str]:
    """The NVML form of a device UUID ("GPU-…" or "MIG-…"), or None when there is none.

    ``torch.cuda.get_device_properties(i).uuid`` is a UUID-like object whose
    ``str()`` has no prefix on recent PyTorch; 16 raw bytes are formatted as a UUID.
    """
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        if len(value) == 16:
            value = str(_uuid.UUID(bytes=bytes(value)))
        else:
            value = bytes(value).decode("ascii", "replace")
    text = str(value).strip()
    if not text:
        return None
    if text.startswith(UUID_PREFIXES):
        return text
    return "GPU-" + text


def filter_stats(stats: Mapping[Any, Any]) -> Dict[str, Any]:
    """Keep only string keys with finite int/float values (bools, NaN and inf dropped)."""
    kept: Dict[str, Any] = {}
    for key, value in stats.items():
        if not isinstance(key, str) or isinstance(value, bool):
            continue
        if isinstance(value, int):
            kept[key] = int(value)
        elif isinstance(value, float) and math.isfinite(value):
            kept[key] = float(value)
    return kept


def _empty_summary() -> Dict[str, int]:
    return {"segments": 0, "total_bytes": 0, "allocated_bytes": 0, "largest_free_block_bytes": 0}


def summarise_snapshot(segments: Iterable[Mapping[str, Any]]) -> Dict[int, Dict[str, int]]:
    """Per device index: segment count, Σ total_size, Σ allocated_size, largest inactive block.

    Raises (KeyError, TypeError, ValueError) on a malformed snapshot.
    """
    summaries: Dict[int, Dict[str, int]] = {}
    for segment in segments:
        summary = summaries.setdefault(int(segment["device"]), _empty_summary())
        summary["segments"] += 1
        summary["total_bytes"] += int(segment["total_size"])
        summary["allocated_bytes"] += int(segment["allocated_size"])
        for block in segment.get("blocks") or ():
            if block.get("state") == FREE_BLOCK_STATE:
                size = int(block["size"])
                if size > summary["largest_free_block_bytes"]:
                    summary["largest_free_block_bytes"] = size
    return summaries


ALLOCATED = "allocated_bytes.all.current"
RESERVED = "reserved_bytes.all.current"
# The interval's range vramd reads (all four or none), beside the raw stats.
INTERVAL_KEYS = (
    "allocated_bytes.all.interval_min",
    "allocated_bytes.all.interval_max",
    "reserved_bytes.all.interval_min",
    "reserved_bytes.all.interval_max",
)


class IntervalRange:
    """The lowest and highest ``allocated`` and ``reserved`` per device since the last report.

    Fed by the reporter's sub-samples between reports and by
    :func:`vramd_reporter.step`; read and reset by each report. Why: a training
    step as long as the report interval is seen at one phase of the step only,
    and vramd builds its memory floor from these figures, so a point sample
    would make the floor a matter of luck. Safe to feed from any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranges: Dict[int, list] = {}

    def observe(self, index: int, allocated: int, reserved: int) -> None:
        with self._lock:
            seen = self._ranges.get(index)
            if seen is None:
                self._ranges[index] = [allocated, allocated, reserved, reserved]
            else:
                seen[0] = min(seen[0], allocated)
                seen[1] = max(seen[1], allocated)
                seen[2] = min(seen[2], reserved)
                seen[3] = max(seen[3], reserved)

    def observe_torch(self, cuda: Any) -> None:
        """One sample of every visible device's current figures (one ``memory_stats`` call each)."""
        for index in range(int(cuda.device_count())):
            stats = cuda.memory_stats(index)
            allocated, reserved = stats.get(ALLOCATED), stats.get(RESERVED)
            if isinstance(allocated, int) and isinstance(reserved, int):
                self.observe(index, allocated, reserved)

    def take(self, index: int, stats: Dict[str, Any]) -> None:
        """Adds the range since the last report, the current figures included, to ``stats``; resets it."""
        allocated, reserved = stats.get(ALLOCATED), stats.get(RESERVED)
        if not (isinstance(allocated, int) and isinstance(reserved, int)):
            return
        self.observe(index, allocated, reserved)
        with self._lock:
            seen = self._ranges.pop(index)
        stats.update(zip(INTERVAL_KEYS, seen))


class ReportBuilder:
    """Builds reports; remembers device UUIDs and which devices it already warned about."""

    def __init__(self) -> None:
        self._uuids: Dict[int, Optional[str]] = {}
        self._warned_no_uuid: set = set()
        # The exception of the last snapshot attempt, None when it worked (or none was due).
        self.snapshot_error: Optional[BaseException] = None

    def _uuid(self, torch: Any, index: int) -> Optional[str]:
        if index not in self._uuids:
            properties = torch.cuda.get_device_properties(index)
            self._uuids[index] = normalise_uuid(getattr(properties, "uuid", None))
        found = self._uuids[index]
        if found is None and index not in self._warned_no_uuid:
            self._warned_no_uuid.add(index)
            log.warning(
                "vramd_reporter: CUDA device %d has no UUID in torch.cuda.get_device_properties() "
                "(PyTorch too old?); it is left out of allocator reports",
                index,
            )
        return found

    def build(
        self,
        torch: Any,
        snapshot: bool = False,
        now: Optional[_dt.datetime] = None,
        require_initialized: bool = False,
        ranges: Optional[IntervalRange] = None,
    ) -> Optional[Dict[str, Any]]:
        """One report for every visible CUDA device that has a UUID.

        Returns None when ``require_initialized`` and CUDA is not initialised in
        this process yet (so the reporter never initialises CUDA itself).
        Raises CudaUnavailable when CUDA is not available, and whatever torch
        raises while collecting statistics. A failing snapshot does not fail
        the report: it is left out and recorded in ``snapshot_error``. With
        ``ranges``, each device's statistics carry the range of ``allocated`` and
        ``reserved`` since the last report (``INTERVAL_KEYS``).
        """
        cuda = torch.cuda
        if require_initialized:
            is_initialized = getattr(cuda, "is_initialized", None)
            if is_initialized is not None and not is_initialized():
                return None
        if not cuda.is_available():
            raise CudaUnavailable("torch.cuda.is_available() is False")

        devices = []
        for index in range(int(cuda.device_count())):
            device_uuid = self._uuid(torch, index)
            if device_uuid is None:
                continue
            stats = filter_stats(cuda.memory_stats(index))
            if ranges is not None:
                ranges.take(index, stats)
            devices.append({"uuid": device_uuid, "index": index, "memory_stats": stats})

        self.snapshot_error = None
        if snapshot and devices:
            try:
                summaries = summarise_snapshot(cuda.memory_snapshot())
            except Exception as error:  # any failure of an optional part
                self.snapshot_error = error
            else:
                for device in devices:
                    device["snapshot"] = summaries.get(device["index"], _empty_summary())

        return {
            "version": WIRE_VERSION,
            "reporter": reporter_identity(),
            "at": utc_timestamp(now),
            "devices": devices,
        }


def build_report(snapshot: bool = False, now: Optional[_dt.datetime] = None) -> Dict[str, Any]:
    """The report that would be sent now, as a dict (imports torch).

    Raises ImportError without torch and CudaUnavailable without CUDA.
    """
    import torch  # noqa: PLC0415 - lazily, so the package imports without torch

    report = ReportBuilder().build(torch, snapshot=snapshot, now=now)
    assert report is not None  # only None with require_initialized
    return report
