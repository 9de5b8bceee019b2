"""Readers for the allocator's counters: `torch.cuda.memory_stats()` JSON and `memory_summary()` text.

Both give the same coarse model (MemoryStats): allocated / reserved / inactive-split bytes, current
and peak, plus OOM and cudaMalloc-retry counts. No frames, so no owners: that needs a snapshot.
"""
from __future__ import annotations

import json
import os
import re

from ..errors import InputError
from .input_files import as_text_stream
from ..memory.model import MemoryStats

_UNITS = {"B": 1, "KB": 1 << 10, "KiB": 1 << 10, "MB": 1 << 20, "MiB": 1 << 20, "GB": 1 << 30, "GiB": 1 << 30,
          "TB": 1 << 40, "TiB": 1 << 40, "PB": 1 << 50, "PiB": 1 << 50}
MAX_TEXT_CHARS = 64 << 20  # memory_stats JSON and memory_summary text are a few KB


def _read_text(path) -> str:
    try:
        with as_text_stream(path) as f:
            text = f.read(MAX_TEXT_CHARS + 1)
        if len(text) > MAX_TEXT_CHARS:
            raise InputError(path, f"larger than {MAX_TEXT_CHARS >> 20} MiB: torch.cuda.memory_stats() JSON and "
                                   "memory_summary() text are a few KB")
        return text
    except InputError:
        raise
    except (EOFError, OSError, ValueError) as e:
        raise InputError(path, f"cannot read ({e.__class__.__name__}: truncated or corrupt)") from None


def read_memory_stats(path: str | os.PathLike, progress: bool = False) -> MemoryStats:
    """`torch.cuda.memory_stats()` dumped as JSON (flat "allocated_bytes.all.peak": N keys)."""
    text = _read_text(path)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError(path, f"not valid JSON ({e.msg} at line {e.lineno}); expected torch.cuda.memory_stats() "
                               "dumped with json.dump") from None
    if not isinstance(data, dict) or not any(k.startswith(("allocated_bytes.", "reserved_bytes.")) for k in data):
        raise InputError(path, "JSON has no allocator counters (allocated_bytes.*, reserved_bytes.*); expected "
                               "torch.cuda.memory_stats() output")
    nums = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for k, v in nums.items():  # byte and event counts: a value beyond int64 (or NaN) is corrupt
        if not -_COUNTER_MAX < v < _COUNTER_MAX:
            raise InputError(path, f"counter {k} = {v:.3g} is out of range for torch.cuda.memory_stats()")

    def get(key):
        v = nums.get(key)
        return int(v) if v is not None else None

    return MemoryStats(
        str(path), "mem-stats",
        allocated_current=get("allocated_bytes.all.current"), allocated_peak=get("allocated_bytes.all.peak"),
        reserved_current=get("reserved_bytes.all.current"), reserved_peak=get("reserved_bytes.all.peak"),
        active_peak=get("active_bytes.all.peak"), requested_peak=get("requested_bytes.all.peak"),
        inactive_split_current=get("inactive_split_bytes.all.current"),
        inactive_split_peak=get("inactive_split_bytes.all.peak"),
        num_ooms=get("num_ooms"), num_alloc_retries=get("num_alloc_retries"), counters=nums)


_ROW = re.compile(r"^\|\s*(?P<name>[A-Za-z][A-Za-z \-]*?)\s*\|(?P<cells>(?:[^|]*\|){4})\s*$")
_SIZE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([KMGTP]i?B|B)?\s*$")
_TOP = {"Allocated memory": "allocated", "Active memory": "active", "Requested memory": "requested",
        "GPU reserved memory": "reserved", "Non-releasable memory": "inactive_split"}


_COUNTER_MAX = float(1 << 63)


def _size(cell: str) -> int | None:
    m = _SIZE.match(cell)
    if not m:
        return None
    value = float(m.group(1)) * _UNITS.get(m.group(2) or "B", 1)
    return int(round(value)) if -_COUNTER_MAX < value < _COUNTER_MAX else None  # beyond: not a size


def read_memory_summary(path: str | os.PathLike, progress: bool = False) -> MemoryStats:
    """`torch.cuda.memory_summary()` text table (the rows "Allocated memory", "GPU reserved memory"...)."""
    text = _read_text(path)
    if "PyTorch CUDA memory summary" not in text:
        raise InputError(path, "not a torch.cuda.memory_summary() table (no 'PyTorch CUDA memory summary' header)")
    stats = MemoryStats(str(path), "mem-summary")
    m = re.search(r"memory summary, device ID (\d+)", text)
    stats.device = int(m.group(1)) if m else None
    m = re.search(r"CUDA OOMs:\s*(\d+)", text)
    stats.num_ooms = int(m.group(1)) if m else None
    m = re.search(r"cudaMalloc retries:\s*(\d+)", text)
    stats.num_alloc_retries = int(m.group(1)) if m else None
    for line in text.splitlines():
        row = _ROW.match(line.strip())
        if not row or row.group("name") not in _TOP:
            continue
        cur, peak = (_size(c) for c in row.group("cells").split("|")[:2])
        key = _TOP[row.group("name")]
        stats.counters[f"{key}.current"], stats.counters[f"{key}.peak"] = cur, peak
        setattr(stats, f"{key}_peak", peak)
        if hasattr(stats, f"{key}_current"):
            setattr(stats, f"{key}_current", cur)
    if stats.allocated_peak is None and stats.reserved_peak is None:
        raise InputError(path, "memory_summary table has no 'Allocated memory' or 'GPU reserved memory' row "
                               "(truncated?)")
    return stats
