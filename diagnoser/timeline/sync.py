"""Host-device synchronizations and copies per step: how often the host blocks on the GPU, for how
long, and how much data moves through pageable (unpinned) host memory."""
from __future__ import annotations

import numpy as np

from .. import settings
from .tables import Timeline
from .gaps import HostActivity
from .intervals import IntervalSet
from .steps import Steps
from .view import TimelineView, values_at

SAME_SYNC_NS = settings.register("timeline.same_sync_ns", 20_000, "ns", "synchronizing calls closer than this (a device-to-host copy and the stream sync after it) count as one synchronization")


def sync_stats(tl: Timeline, steps: Steps, act: HostActivity, kernels_per_step: float | None) -> dict[str, float]:
    n = max(len(steps.steady), 1)
    span = max(steps.steady_windows.total, 1)
    # synchronizations made inside the steady steps' host ranges (not the final one after the loop)
    idx = steps.steady
    steps_host = IntervalSet.of(steps.host_start[idx], steps.host_end[idx])
    inside = steps_host.contains(act.sync.starts)
    syncs = IntervalSet.of(act.sync.starts[inside], act.sync.ends[inside])
    # merge syncs separated by less than SAME_SYNC_NS into one event
    if len(syncs):
        close = IntervalSet.of(syncs.starts, syncs.ends + SAME_SYNC_NS.value)
        events = len(close)
    else:
        events = 0
    out = {
        "syncs_per_step": events / n,
        "sync_blocked_ms_per_step": syncs.total / 1e6 / n,
        "sync_blocked_pct": 100.0 * syncs.total / span,
    }
    if events and kernels_per_step:
        out["kernels_per_sync"] = kernels_per_step * n / events
    return out


def memcpy_stats(tv: TimelineView, steps: Steps, act: HostActivity) -> dict[str, float]:
    windows = steps.steady_windows
    n = max(len(steps.steady), 1)
    span = max(windows.total, 1)
    copies = np.flatnonzero(tv.is_memcpy)
    c = tv.tl.gpu.iloc[copies[windows.contains(tv.gpu_start[copies])]]
    out: dict[str, float] = {}
    total = float(c["bytes"].sum())
    out["memcpy_mb_per_step"] = total / 1e6 / n
    out["memcpy_per_step"] = len(c) / n
    if total > 0:
        out["pageable_memcpy_bytes_pct"] = 100.0 * float(c.loc[c["pageable"], "bytes"].sum()) / total
    pageable_gpu = IntervalSet.of(c.loc[c["pageable"], "start_ns"], c.loc[c["pageable"], "end_ns"])
    # cost of pageable copies: host blocked in the copy call, or the copy itself where calls are unknown
    host_ns = int(act.pageable_copy.overlap(windows.starts, windows.ends).sum())
    out["pageable_memcpy_ms_per_step"] = max(host_ns, pageable_gpu.total) / 1e6 / n
    out["pageable_memcpy_pct"] = 100.0 * max(host_ns, pageable_gpu.total) / span
    dtoh = c[c["copy_kind"] == "DtoH"]
    out["dtoh_memcpy_per_step"] = len(dtoh) / n
    return out




def sync_calls(tv: TimelineView, steps: Steps, act: HostActivity) -> dict:
    """The synchronizing calls made inside the steady steps that blocked the host longest, by name."""
    text = _calls_text(tv, steps, act.sync_rows)
    return {"sync_calls": text} if text else {}


def _calls_text(tv: TimelineView, steps: Steps, rows: np.ndarray) -> str:
    """`name N calls T ms, ...` per steady step for the host rows given, the costliest three."""
    idx = steps.steady
    n = max(idx.size, 1)
    rows = rows[IntervalSet.of(steps.host_start[idx], steps.host_end[idx]).contains(tv.host_start[rows])]
    if rows.size == 0:
        return ""
    dur = tv.host_end[rows] - tv.host_start[rows]
    names = values_at(tv.tl.host["name"], rows).astype(str)
    uniq, inv = np.unique(names, return_inverse=True)
    ns = np.bincount(inv, weights=dur)
    calls = np.bincount(inv)
    order = sorted(range(uniq.size), key=lambda i: (-ns[i], uniq[i]))[:3]
    return ", ".join(f"{uniq[i]} {_per_step(calls[i] / n)} calls {ns[i] / 1e6 / n:.1f} ms" for i in order)


def alloc_stats(tv: TimelineView, steps: Steps, setup: IntervalSet | None = None) -> dict:
    """Device malloc/free (and pinned host allocation) calls made inside the steady steps: a caching
    allocator makes none there; many mean no pool, `empty_cache()` in the loop, or memory pressure.
    Calls that are one-time start-up work (`setup`: the context-creating `cudaFree(0)`) are not
    counted; `alloc_steps_pct` says in how many steady steps the calls recur."""
    idx = steps.steady
    n = max(idx.size, 1)
    rows = np.flatnonzero(tv.host_is("malloc", "free", "host_alloc"))
    inside = IntervalSet.of(steps.host_start[idx], steps.host_end[idx]).contains(tv.host_start[rows])
    if setup is not None and len(setup):
        inside &= ~setup.contains(tv.host_start[rows])
    rows = rows[inside]
    dur = tv.host_end[rows] - tv.host_start[rows]
    step_of = np.searchsorted(steps.host_start[idx], tv.host_start[rows], side="right") - 1
    with_calls = np.unique(step_of[step_of >= 0]).size
    out: dict = {"alloc_calls_per_step": rows.size / n, "alloc_ms_per_step": float(dur.sum()) / 1e6 / n,
                 "alloc_steps_pct": 100.0 * with_calls / n if idx.size else 0.0}
    text = _calls_text(tv, steps, rows)
    if text:
        out["alloc_calls"] = text
    return out


def _per_step(x: float) -> str:
    return f"{x:.0f}" if x >= 10 or x == int(x) else f"{x:.1f}"
