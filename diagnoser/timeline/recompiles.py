"""torch.compile compiling inside the steady steps (a recompile per new shape or specialised constant),
from a PyTorch trace: Dynamo's `dynamo_timed` ranges (`_compile.compile_inner (dynamo_timed)`, one per frame
compiled) and their `compile_id=F/N` annotations. Compilation before the steady steps is start-up work
(timeline/setup.py); compilation that recurs in them is steady-state cost.
"""
from __future__ import annotations

import re

import numpy as np

from .intervals import IntervalSet
from .names import lazy_pattern, name_mask
from .setup import COMPILE_RANGE

COMPILE_ENTRY = re.compile(r"^_compile\.compile_inner(?: \(dynamo_timed\))?$")  # one per frame (re)compiled
COMPILE_ID = lazy_pattern(r"compile_id=(\d+)/(\d+)")
# CUDA module loading: a compile that makes new kernels loads them (an export carries no compile ranges)
MODULE_LOAD = lazy_pattern(r"^cu(?:Module|Library)Load")
NONE = {"recompiles_per_step": 0.0, "compile_ms_per_step": 0.0, "compile_step_pct": 0.0}


def compile_intervals(tl) -> IntervalSet:
    """Where the host compiles: the spans of Dynamo's per-frame compile ranges (empty without them)."""
    r = tl.ranges
    if not len(r):
        return IntervalSet.of([], [])
    e = r[name_mask(r["name"], COMPILE_ENTRY).astype(bool)]
    return IntervalSet.of(e["start_ns"].to_numpy(np.int64), e["end_ns"].to_numpy(np.int64))


def _measured_none(tl, steps) -> dict:
    """Zeros where the source shows no compile: a PyTorch trace (Dynamo's ranges would be in it), or an export
    that loads no CUDA module in the steady steps (nothing new was compiled); else nothing (not measured)."""
    if tl.source != "nsys":
        return dict(NONE)
    h = tl.host
    if not len(h):
        return dict(NONE)
    loads = name_mask(h["name"], MODULE_LOAD()).astype(bool)
    if loads.any() and steps.steady_windows.contains(h["start_ns"].to_numpy(np.int64)[loads]).any():
        return {}
    return dict(NONE)


def compile_stats(tl, steps) -> dict:
    """Compiles that start in the steady steps: how many per step, the host time inside compile ranges per step
    and as a share of the step, and which frames (Dynamo's compile ids)."""
    r = tl.ranges
    idx = steps.steady
    if idx.size == 0:
        return {}
    entry = r[name_mask(r["name"], COMPILE_ENTRY).astype(bool)] if len(r) else r
    if not len(entry):
        return _measured_none(tl, steps)
    windows = steps.steady_windows
    es = entry["start_ns"].to_numpy(np.int64)
    inside = windows.contains(es)
    n = int(inside.sum())
    if n == 0:
        return dict(NONE)
    comp = r[name_mask(r["name"], COMPILE_RANGE).astype(bool) | name_mask(r["name"], COMPILE_ENTRY).astype(bool)]
    union = IntervalSet.of(comp["start_ns"].to_numpy(np.int64), comp["end_ns"].to_numpy(np.int64))
    compile_ns = int(union.overlap(windows.starts, windows.ends).sum())
    span = max(windows.total, 1)
    ids = r[(r["kind"] == "annotation").to_numpy()]
    ids = ids[windows.contains(ids["start_ns"].to_numpy(np.int64))]
    compile_id = COMPILE_ID().search
    seen = sorted({(int(m.group(1)), int(m.group(2))) for x in ids["name"].astype(str) for m in [compile_id(x)] if m})
    out = {"recompiles_per_step": n / idx.size, "compile_ms_per_step": compile_ns / 1e6 / idx.size,
           "compile_step_pct": 100.0 * compile_ns / span}
    if seen:
        frames = {}
        for f, k in seen:
            frames.setdefault(f, []).append(k)
        out["compile_ids"] = ", ".join(f"frame {f}: compiles {f}/{ks[0]}" + (f" to {f}/{ks[-1]}" if len(ks) > 1 else "")
                                       for f, ks in sorted(frames.items()))
    return out
