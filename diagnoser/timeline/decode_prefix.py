"""Decoding that re-runs the whole prefix for every new token (no KV cache), from the op shapes of a torch
trace (record_shapes=True): issue 29, the inference tree's KV-cache step.

A decoder with a KV cache runs its projections and MLPs on the new token only: their input rows are the
batch, the same every step. Without a cache every step runs the model over the whole sequence: the GEMM
inputs' rows are batch x tokens so far, and grow by the batch every generated token (one step per token).
Per steady step this takes the most common row count of the GEMM-class ops (aten::linear / mm / addmm /
matmul; the LM head on the last position only is the odd one out) and checks that it grows by the same
amount from step to step; rows / growth is then the number of tokens each step re-runs.
An Nsight Systems export has no shapes: its kernel durations grow with the position too, but by ~1/T per
step, which clock ramps and wave quantization hide (measured in tools/gen/README.md), so nothing is
measured there."""
from __future__ import annotations

import numpy as np

from .. import settings
from .roofline import _decoded

ROW_OPS = frozenset(("aten::linear", "aten::mm", "aten::addmm", "aten::matmul"))
MIN_STEPS = settings.register(
    "timeline.decode_prefix_min_steps", 3, "count",
    "steady steps needed to tell whether the GEMMs' rows grow by the same amount every step (decode without a KV cache)")


def _rows(dims) -> int:
    d = _decoded(dims)
    if not isinstance(d, list) or not d or not isinstance(d[0], list) or len(d[0]) < 2:
        return 0
    try:
        return int(np.prod([int(x) for x in d[0][:-1]]))
    except (TypeError, ValueError):
        return 0


class _RowsOf(dict):
    """Raw dims -> _rows(dims), computed once per distinct value (the reader shares one bytes object per value)."""

    def __missing__(self, dims) -> int:
        r = self[dims] = _rows(dims)
        return r


def _step_rows(dims: np.ndarray, step: np.ndarray, n_steps: int) -> np.ndarray | None:
    """Per step, the most common GEMM row count of its ops (ties: the larger); None if a step has none."""
    try:
        rows = np.fromiter(map(_RowsOf().__getitem__, dims), np.int64, dims.size)
    except TypeError:  # unhashable values (decoded lists): one by one
        rows = np.fromiter(map(_rows, dims), np.int64, dims.size)
    ok = rows > 0
    step, rows = step[ok], rows[ok]
    if np.unique(step).size < n_steps:
        return None
    order = np.lexsort((rows, step))
    step, rows = step[order], rows[order]
    first = np.flatnonzero(np.r_[True, (step[1:] != step[:-1]) | (rows[1:] != rows[:-1])])
    count = np.diff(np.r_[first, step.size])
    step, rows = step[first], rows[first]
    best = np.lexsort((rows, count, step))  # per step its (count, rows) maximum comes last
    last = np.r_[step[best][1:] != step[best][:-1], True]
    return rows[best][last]


def decode_prefix_stats(tl, kt, steps) -> dict:
    """decode_* facts of a torch trace with shapes and at least MIN_STEPS steady steps; {} without shapes;
    only decode_rows_steps_measured 0 where the shapes show no GEMM rows to follow step to step."""
    shapes = getattr(tl, "op_shapes", None)
    idx = steps.steady
    if tl.source != "torch" or shapes is None or not len(shapes):
        return {}
    none = {"decode_rows_steps_measured": 0.0}  # shapes recorded, no GEMM rows to follow: nothing to act on
    if idx.size < MIN_STEPS.value:
        return none
    names = shapes["name"].to_numpy(object)
    st = shapes["start_ns"].to_numpy(np.int64)
    sel = np.flatnonzero(np.isin(names, list(ROW_OPS)))
    if not sel.size:
        return none
    dims = shapes["dims"].to_numpy(object)
    step_of = np.searchsorted(steps.host_start[idx], st[sel], side="right") - 1
    inside = (step_of >= 0) & (st[sel] < steps.host_end[idx][np.clip(step_of, 0, idx.size - 1)])
    rows = _step_rows(dims[sel[inside]], step_of[inside], idx.size)
    if rows is None:
        return none
    deltas = np.diff(rows)
    growth = int(np.median(deltas))
    out = {"decode_rows_steps_measured": float(idx.size),
           "decode_gemm_rows_first": int(rows[0]), "decode_gemm_rows_last": int(rows[-1]),
           "decode_gemm_rows_growth_per_step": max(growth, 0)}
    steady_growth = 100.0 * float((deltas == growth).mean()) if growth > 0 else 0.0
    out["decode_rows_growth_steps_pct"] = steady_growth
    if growth <= 0 or rows[0] % growth:
        return out
    out["decode_recomputed_tokens_first"] = int(rows[0] // growth)
    out["decode_recomputed_tokens_last"] = int(rows[-1] // growth)
    out["decode_recompute_work_ratio"] = float(rows.mean()) / growth  # tokens run per generated token
    # the measured cost: GPU kernel time per step against the step's position
    k_step = np.searchsorted(steps.start[idx], kt.start_ns, side="right") - 1
    ok = (k_step >= 0) & kt.is_kernel
    ms = np.bincount(k_step[ok], weights=kt.dur_ns[ok], minlength=idx.size)[:idx.size] / 1e6
    out["decode_gpu_ms_per_step_first"] = float(ms[0])
    out["decode_gpu_ms_per_step_last"] = float(ms[-1])
    tokens = rows / growth
    if np.ptp(tokens) > 0:
        slope = float(np.polyfit(tokens, ms, 1)[0])
        out["decode_gpu_ms_per_prefix_token"] = slope  # GPU ms each re-run token adds to a step
    return out
