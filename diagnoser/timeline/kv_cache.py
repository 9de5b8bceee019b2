"""Device memory over the steady steps, from the trace's allocator events, against the device's size.

A PyTorch trace recorded with `profile_memory=True` holds the caching allocator's totals after every
allocation and free (timeline table `memory`), and its deviceProperties the device's total memory.
Over the steady steps (decode steps of a server; host clock, where the allocator runs):
  memory_headroom_pct   device memory the allocator has not reserved at its peak: room for more
                        sequences' KV cache (a larger batch) or none left
  mem_persistent_gb     the least memory allocated at any point of the steps: what stays across them
                        (weights and the KV cache; a preallocated cache is all of its max length)
  mem_growth_mb_per_step  allocated memory at the end of the last steady step minus before the first,
                        per step: a cache that grows with every token (torch.cat / DynamicCache) shows
                        it; a preallocated one does not
An Nsight Systems export made with --cuda-memory-usage=true gives the driver-level view only (what is
reserved, not what PyTorch allocated inside it): the headroom, not what stays allocated.
Nothing here is measured for a trace without device memory events (`kv_cache_stats` returns {}).
"""
from __future__ import annotations

import numpy as np

GIB = float(1 << 30)


def _state_before(t: np.ndarray, values: np.ndarray, at: int) -> float | None:
    """The allocator total in effect at time `at` (the last event before it), None before any."""
    i = int(np.searchsorted(t, at, side="left")) - 1
    return float(values[i]) if i >= 0 else None


def kv_cache_stats(tl, steps) -> dict:
    m = tl.memory
    if m is None or not len(m):
        return {}
    dev_ids = m["device"].to_numpy()
    dev = int(np.bincount(dev_ids[dev_ids >= 0]).argmax()) if (dev_ids >= 0).any() else 0
    total = next((d.get("total_memory") for d in tl.devices if d.get("id") == dev), None)
    if not total and tl.devices:
        total = tl.devices[0].get("total_memory")
    sel = dev_ids == dev
    every = bool(sel.all())  # one device: its columns as they are (the steps' rows only are copied, below)
    t, alloc, reserved = (m[c].to_numpy() if every else m[c].to_numpy()[sel]
                          for c in ("start_ns", "total_allocated", "total_reserved"))
    del sel
    idx = steps.steady
    if idx.size:
        lo, hi = int(steps.host_start[idx[0]]), int(steps.host_end[idx[-1]])
    else:
        lo, hi = int(t[0]), int(t[-1]) + 1
    inside = (t >= lo) & (t < hi)
    start_alloc, start_res = _state_before(t, alloc, lo), _state_before(t, reserved, lo)
    a = np.concatenate([alloc[inside].astype(np.float64), [start_alloc] if start_alloc is not None else []])
    r = np.concatenate([reserved[inside].astype(np.float64), [start_res] if start_res is not None else []])
    if not r.size:
        return {}
    known = bool((a >= 0).all())  # Nsight Systems' memory usage knows what is reserved, not what is allocated
    v: dict = {"mem_reserved_peak_gb": float(r.max()) / GIB,
               "memory_events_per_step": float(inside.sum()) / max(int(idx.size), 1)}
    if known:
        v.update(mem_allocated_peak_gb=float(a.max()) / GIB, mem_persistent_gb=float(a.min()) / GIB)
        end_alloc = _state_before(t, alloc, hi)
        if idx.size and start_alloc is not None and end_alloc is not None:
            v["mem_growth_mb_per_step"] = (end_alloc - start_alloc) / 1e6 / int(idx.size)
    if total:
        v["device_memory_total_gb"] = float(total) / GIB
        v["memory_headroom_pct"] = 100.0 * max(float(total) - float(r.max()), 0.0) / float(total)
        v["memory_headroom_gb"] = max(float(total) - float(r.max()), 0.0) / GIB
        if known:
            v["mem_persistent_pct"] = 100.0 * float(a.min()) / float(total)
    return v
