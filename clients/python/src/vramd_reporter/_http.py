"""Posting reports to vramd with urllib (standard library only)."""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import math
import os
import urllib.request
from typing import Any, Mapping, Optional, Tuple

from ._version import __version__

ENDPOINT = "/api/v1/allocator-reports"
USER_AGENT = "vramd-reporter/" + __version__

# Longest back-off after a 429, whatever Retry-After says.
MAX_BACKOFF_S = 60.0

# At most this much of a response body is read (and then dropped).
_MAX_RESPONSE_BYTES = 64 * 1024


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: urllib would turn the POST into a GET without the body."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None


# vramd runs on the node or as a sidecar: proxies from the environment
# (http_proxy, …) are ignored, and redirects are not followed.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def endpoint(url: str) -> str:
    return url.rstrip("/") + ENDPOINT


def encode(report: Mapping[str, Any]) -> bytes:
    """Compact JSON; raises ValueError on NaN/inf and TypeError on non-JSON values."""
    return json.dumps(report, allow_nan=False, separators=(",", ":")).encode("utf-8")


def post(
    url: str, body: bytes, token: Optional[str] = None, timeout: float = 2.0, path: Optional[str] = None
) -> Tuple[int, str]:
    """POST one report; returns (status, reason) for a 2xx answer.

    Raises urllib.error.HTTPError for any other status (3xx included),
    urllib.error.URLError / OSError when vramd cannot be reached, and
    http.client.HTTPException on a broken answer.
    """
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = "Bearer " + token
    target = endpoint(url) if path is None else url.rstrip("/") + path
    request = urllib.request.Request(target, data=body, headers=headers, method="POST")
    with _OPENER.open(request, timeout=timeout) as response:
        response.read(_MAX_RESPONSE_BYTES)
        return response.status, response.reason


def retry_after_seconds(value: Optional[str], now: Optional[_dt.datetime] = None) -> Optional[float]:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or invalid."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except Exception:  # TypeError/ValueError/IndexError depending on the Python version
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.timezone.utc)
        seconds = (when - (now or _dt.datetime.now(_dt.timezone.utc))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def backoff_seconds(retry_after: Optional[float], interval: float, previous: float) -> float:
    """How long to wait after a 429, bounded to MAX_BACKOFF_S.

    Retry-After when present; otherwise double the previous back-off,
    starting at twice the reporting interval.
    """
    if retry_after is not None:
        delay = retry_after
    elif previous > 0:
        delay = previous * 2
    else:
        delay = interval * 2
    return min(delay, MAX_BACKOFF_S)


def post_for_json(
    url: str, body: bytes, path: str, token: Optional[str] = None, timeout: float = 2.0
) -> Any:
    """POST ``body`` to ``path``; returns the decoded JSON answer of a 2xx (None if not JSON).

    Raises as :func:`post` does.
    """
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = "Bearer " + token
    request = urllib.request.Request(url.rstrip("/") + path, data=body, headers=headers, method="POST")
    with _OPENER.open(request, timeout=timeout) as response:
        answer = response.read(_MAX_RESPONSE_BYTES)
    try:
        return json.loads(answer.decode("utf-8"))
    except ValueError:
        return None


def put_file(url: str, path: str, file_path: str, token: Optional[str] = None, timeout: float = 2.0) -> int:
    """PUT the file at ``file_path`` to ``path``, streamed from disk; returns the 2xx status.

    ``timeout`` bounds each socket operation. Raises as :func:`post` does,
    and OSError when the file cannot be read.
    """
    headers = {"Content-Type": "application/octet-stream", "User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = "Bearer " + token
    with open(file_path, "rb") as source:
        headers["Content-Length"] = str(os.fstat(source.fileno()).st_size)
        request = urllib.request.Request(url.rstrip("/") + path, data=source, headers=headers, method="PUT")
        with _OPENER.open(request, timeout=timeout) as response:
            response.read(_MAX_RESPONSE_BYTES)
            return response.status
