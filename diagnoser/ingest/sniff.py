"""The kind of a profiler file, from its content (never its extension): ncu-rep, ncu-csv-raw,
ncu-csv-details, nsys-sqlite, nsys-rep, torch-trace, mem-snapshot, mem-stats, mem-summary, any of
them gzipped (diagnoser.families maps each kind to its family and reader)."""
from __future__ import annotations

import os
import re
import zlib

from ..errors import InputError
from .input_files import open_input

KINDS_HELP = ("an Nsight Compute report (.ncu-rep or its CSV export), an Nsight Systems report "
              "(.nsys-rep or its SQLite export), a PyTorch profiler trace (JSON with traceEvents), "
              "or a CUDA memory snapshot / memory_stats JSON / memory_summary text")

def read_head(path: str | os.PathLike, n: int = 65536) -> bytes:
    """First n bytes of the (decompressed) content; a truncated gzip is reported as such."""
    try:
        with open_input(path) as f:
            return f.read(n)
    except InputError:
        raise
    except (EOFError, zlib.error, OSError) as e:
        raise InputError(path, f"corrupt or truncated gzip data ({e.__class__.__name__})") from None


def sniff(path: str | os.PathLike) -> str:
    """Return the input kind of `path`, or raise InputError saying what was expected."""
    head = read_head(path)
    if not head:
        raise InputError(path, "file is empty; expected " + KINDS_HELP)
    if head.startswith(b"NVR\x00"):
        return "ncu-rep"
    if head.startswith(b"SQLite format 3\x00"):
        return "nsys-sqlite"
    if head.startswith(b"NVIDIA Tegra Profiler Report") or head.startswith(b"NVIDIA Nsight Systems"):
        return "nsys-rep"
    if head[:1] == b"\x80" and len(head) > 2 and 2 <= head[1] <= 5:
        return "mem-snapshot"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        if b'"traceEvents"' in head:
            return "torch-trace"
        if b'"allocated_bytes.all.' in head or b'"num_alloc_retries"' in head or b'"reserved_bytes.all.' in head:
            return "mem-stats"
        # traceEvents may come after a large header: scan further before giving up
        if _json_has_key(path, b'"traceEvents"'):
            return "torch-trace"
        raise InputError(path, "JSON without traceEvents or allocator counters; expected " + KINDS_HELP)
    if text.startswith(b"[") and _BARE_EVENT.match(text):
        return "torch-trace"  # late-2020 Kineto: a bare JSON array of trace events
    if text.startswith(b'"ID","Process ID"'):
        first_line = text.split(b"\n", 1)[0]
        return "ncu-csv-details" if b'"Metric Name"' in first_line else "ncu-csv-raw"
    if b"PyTorch CUDA memory summary" in head[:2048]:
        return "mem-summary"
    raise InputError(path, "unrecognized content; expected " + KINDS_HELP)


# `[` then an object whose first key is a trace-event field (Kineto writes "ph" or "name" first)
_BARE_EVENT = re.compile(rb'\[\s*\{\s*"(?:ph|name|cat|pid|tid|ts)"\s*:')


def _json_has_key(path, key: bytes, limit: int = 64 << 20) -> bool:
    try:
        with open_input(path) as f:
            seen = 0
            tail = b""
            while seen < limit:
                chunk = f.read(1 << 20)
                if not chunk:
                    return False
                if key in tail + chunk:
                    return True
                tail = chunk[-len(key):]
                seen += len(chunk)
    except InputError:
        raise
    except (EOFError, zlib.error, OSError):
        raise InputError(path, "corrupt or truncated gzip data") from None
    return False


def display_kind(kind: str) -> str:
    return {
        "ncu-rep": "Nsight Compute report", "ncu-csv-raw": "Nsight Compute CSV (raw page)",
        "ncu-csv-details": "Nsight Compute CSV (details page)", "nsys-sqlite": "Nsight Systems SQLite export",
        "nsys-rep": "Nsight Systems report", "torch-trace": "PyTorch profiler trace",
        "mem-snapshot": "CUDA memory snapshot", "mem-stats": "torch.cuda.memory_stats JSON",
        "mem-summary": "torch.cuda.memory_summary text",
    }.get(kind, kind)
