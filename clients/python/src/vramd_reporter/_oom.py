"""OOM capture: one event per CUDA OOM, posted to vramd at once.

Attaches ``torch._C._cuda_attach_out_of_memory_observer`` to the torch the
workload already imported (never imports torch, never initialises CUDA).
The observer runs on the thread whose allocation failed, just before
``OutOfMemoryError`` is raised: it only reads the allocator's state (and,
with ``record_history``, dumps the snapshot, which must happen while that
state exists) and hands the POST to a daemon thread. Nothing raises into
the caller; snapshot files are bounded by count and bytes.
"""

import json
import logging
import os
import queue
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Optional

from . import _http
from ._report import filter_stats, normalise_uuid, reporter_identity, utc_timestamp

log = logging.getLogger("vramd_reporter")

OOM_PATH = "/api/v1/oom-events"
#: Callbacks for the same (device, size) within this many seconds are one OOM.
DEDUPE_SECONDS = 2.0
#: Events waiting to be posted at most; more are dropped (vramd is down).
QUEUE_BOUND = 16


class OomCapture:
    """Posts an OOM event per OOM to ``url`` (``/api/v1/oom-events``)."""

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        timeout: float = 2.0,
        record_history: Optional[int] = None,
        snapshot_dir: Optional[str] = None,
        max_snapshots: int = 3,
        max_snapshot_bytes: int = 4 << 30,
        upload_snapshot: bool = False,
    ) -> None:
        if record_history is not None and (not isinstance(record_history, int) or record_history <= 0):
            raise ValueError("record_history must be a positive number of entries")
        if max_snapshots < 1 or max_snapshot_bytes < 1:
            raise ValueError("max_snapshots and max_snapshot_bytes must be positive")
        self.url = url
        self.token = token
        self.timeout = timeout
        self.record_history = record_history
        self.snapshot_dir = snapshot_dir or os.path.join(tempfile.gettempdir(), "vramd-snapshots")
        self.max_snapshots = max_snapshots
        self.max_snapshot_bytes = max_snapshot_bytes
        self.events_sent = 0
        self.events_failed = 0
        self.events_seen = 0
        #: Upload each dumped snapshot to vramd (``ingest.snapshot_dir`` on its side).
        self.upload_snapshot = bool(upload_snapshot)
        self.snapshots_uploaded = 0
        self.snapshots_failed = 0
        self._last: Optional[tuple] = None
        self._queue: "queue.Queue[Dict[str, Any]]" = queue.Queue(QUEUE_BOUND)
        self._thread = threading.Thread(target=self._post_loop, name="vramd-oom", daemon=True)

    def attach(self) -> bool:
        """Attach to the imported torch; False (and a log line) when it cannot."""
        torch = sys.modules.get("torch")
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if torch is None or attach is None:
            log.warning("vramd_reporter: oom_capture needs torch imported first (with CUDA); not attached")
            return False
        try:
            if self.record_history is not None:
                torch.cuda.memory._record_memory_history(max_entries=self.record_history)
            attach(self._observe)
        except Exception as error:  # never into the training script
            log.warning("vramd_reporter: cannot attach the OOM observer: %s", error)
            return False
        self._thread.start()
        return True

    # -- on the thread whose allocation failed ------------------------------

    def _observe(self, device: Any, alloc: Any, device_alloc: Any, device_free: Any) -> None:
        try:
            key = (int(device), int(alloc))
            now = time.monotonic()
            if self._last is not None and self._last[0] == key and now - self._last[1] < DEDUPE_SECONDS:
                return
            self._last = (key, now)
            self.events_seen += 1
            event = self._event(int(device), int(alloc), int(device_free))
            if event is not None:
                self._queue.put_nowait(event)
        except queue.Full:
            self.events_failed += 1
        except Exception:  # never into the training loop
            self.events_failed += 1
            log.debug("vramd_reporter: OOM event not built", exc_info=True)

    def _event(self, device: int, alloc: int, device_free: int) -> Optional[Dict[str, Any]]:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        uuid = normalise_uuid(getattr(torch.cuda.get_device_properties(device), "uuid", None))
        if uuid is None:
            return None
        event: Dict[str, Any] = {
            "version": 1,
            "reporter": reporter_identity(),
            "at": utc_timestamp(),
            "uuid": uuid,
            "index": device,
            "requested_bytes": max(alloc, 1),
            "device_free_bytes": max(device_free, 0),
            "memory_stats": filter_stats(torch.cuda.memory_stats(device)),
        }
        summary = _summary(torch, device)
        if summary is not None:
            event["snapshot"] = summary
        if self.record_history is not None:
            path = self._dump(torch)
            if path is not None:
                event["snapshot_path"] = path
        return event

    def _dump(self, torch: Any) -> Optional[str]:
        try:
            os.makedirs(self.snapshot_dir, exist_ok=True)
            path = os.path.join(self.snapshot_dir, "oom-%d-%d.pickle" % (os.getpid(), int(time.time() * 1000)))
            torch.cuda.memory._dump_snapshot(path)
            self._prune(keep=path)
            return path if os.path.exists(path) else None
        except Exception as error:
            log.warning("vramd_reporter: OOM snapshot not written: %s", error)
            return None

    def _prune(self, keep: str) -> None:
        """Oldest first until within max_snapshots and max_snapshot_bytes."""
        files = []
        for name in os.listdir(self.snapshot_dir):
            if name.startswith("oom-") and name.endswith(".pickle"):
                full = os.path.join(self.snapshot_dir, name)
                files.append((os.path.getmtime(full), full, os.path.getsize(full)))
        files.sort()
        total = sum(size for _, _, size in files)
        while files and (len(files) > self.max_snapshots or total > self.max_snapshot_bytes):
            _, oldest, size = files.pop(0)
            os.remove(oldest)
            total -= size

    # -- the posting thread -------------------------------------------------

    def _post_loop(self) -> None:
        while True:
            event = self._queue.get()
            try:
                body = json.dumps(event).encode("utf-8")
                answer = _http.post_for_json(self.url, body, OOM_PATH, self.token, self.timeout)
                self.events_sent += 1
            except Exception as error:  # vramd down: counted, never raised
                self.events_failed += 1
                log.warning("vramd_reporter: OOM event not sent to %s: %s", self.url, error)
                continue
            path = event.get("snapshot_path")
            if self.upload_snapshot and path is not None:
                self._upload(answer, path)

    def _upload(self, answer: Any, path: str) -> None:
        """PUT the dumped snapshot to the event vramd answered with; never raises."""
        event_id = answer.get("id") if isinstance(answer, dict) else None
        if isinstance(event_id, bool) or not isinstance(event_id, int):
            self.snapshots_failed += 1
            return
        try:
            _http.put_file(self.url, "%s/%d/snapshot" % (OOM_PATH, event_id), path, self.token, self.timeout)
            self.snapshots_uploaded += 1
        except Exception as error:  # off on vramd's side (404), too large (413), down: counted
            self.snapshots_failed += 1
            log.warning("vramd_reporter: OOM snapshot %s not uploaded to %s: %s", path, self.url, error)


def _summary(torch: Any, device: int) -> Optional[Dict[str, int]]:
    """Segments, total, allocated and the largest free block of ``device``."""
    try:
        snapshot = torch.cuda.memory._snapshot()
    except Exception:
        return None
    segments = [s for s in snapshot.get("segments", []) if s.get("device") == device]
    largest, allocated, total = 0, 0, 0
    for segment in segments:
        total += int(segment.get("total_size", 0))
        allocated += int(segment.get("allocated_size", 0))
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive":
                largest = max(largest, int(block.get("size", 0)))
    return {"segments": len(segments), "total_bytes": total, "allocated_bytes": allocated, "largest_free_block_bytes": largest}
