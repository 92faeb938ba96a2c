"""python -m vramd_reporter --once [--snapshot] [--pretty] | --send [--url URL] [--token T]"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
from typing import List, Optional

from . import _http
from ._report import CudaUnavailable, ReportBuilder
from ._reporter import DEFAULT_URL, _error_detail


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vramd_reporter",
        description="Build the allocator report vramd_reporter would send for this process's "
        "visible CUDA devices; print it (--once) and/or post it (--send).",
    )
    parser.add_argument("--once", action="store_true", help="print the report as JSON on stdout and exit")
    parser.add_argument("--snapshot", action="store_true", help="include the memory_snapshot() summary")
    parser.add_argument("--pretty", action="store_true", help="indent the JSON")
    parser.add_argument("--send", action="store_true", help="post the report once and print the HTTP status")
    parser.add_argument("--url", default=DEFAULT_URL, help="vramd's base URL (default %(default)s)")
    parser.add_argument("--token", default=None, help="bearer token, for writes from other than loopback")
    parser.add_argument("--timeout", type=float, default=2.0, help="HTTP timeout in seconds (default %(default)s)")
    return parser


def _fail(message: str) -> int:
    print("vramd_reporter: " + message, file=sys.stderr)
    return 1


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not (args.once or args.send):
        parser.error("nothing to do: pass --once to print a report or --send to post one")
    if not args.timeout > 0:
        parser.error("--timeout must be positive")

    try:
        import torch  # noqa: PLC0415 - lazily, so the package imports without torch
    except Exception as error:
        return _fail("cannot import torch: %s" % (error,))

    builder = ReportBuilder()
    try:
        report = builder.build(torch, snapshot=args.snapshot)
    except CudaUnavailable:
        return _fail("CUDA is not available (torch.cuda.is_available() is False); nothing to report")
    except Exception as error:
        return _fail("collecting allocator statistics failed: %r" % (error,))
    assert report is not None
    if builder.snapshot_error is not None:
        print("vramd_reporter: warning: memory_snapshot() failed (%r); no snapshot summary" % (builder.snapshot_error,),
              file=sys.stderr)

    try:
        body = _http.encode(report)
    except (TypeError, ValueError) as error:
        return _fail("the report cannot be encoded as JSON: %r" % (error,))

    if args.once:
        if args.pretty:
            print(json.dumps(report, indent=2, allow_nan=False))
        else:
            print(body.decode("utf-8"))

    if args.send:
        try:
            status, reason = _http.post(args.url, body, token=args.token or None, timeout=args.timeout)
        except urllib.error.HTTPError as error:
            print("%d %s" % (error.code, error.reason))
            return _fail("vramd rejected the report" + _error_detail(error))
        except Exception as error:
            return _fail("cannot reach %s: %s" % (_http.endpoint(args.url), getattr(error, "reason", None) or error))
        print("%d %s" % (status, reason))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
