"""Where each fix of the step replay acts: the trace's ranges a fix removes or changes (torch.compile's
compile ranges and Inductor's benchmarks, compiled regions, cuDNN's trials, GIL holders and waits, GEMMs of a
new shape, anomaly mode's NaN checks, hand-written attention blocks) and the runs of kernels a fix fuses.
Each is found once per trace (intervals on the host's time, or ids per GPU op of a step); step_graph.py marks
every call and op of a step with them, replay.py applies the fixes. Pure; renders nothing.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .autotune import CONV_OP
from .debug_apis import BACKWARD_FUNCTION
from .gil import GIL_WAIT, GIL_WAIT_MIN_NS, WAITING_FRAME
from .host_threads import launching_threads
from .intervals import IntervalSet
from .kernels import BETWEEN_SCORE_AND_VALUE, CATEGORY_CODE, GEMM, SOFTMAX
from .names import lazy_pattern, name_mask
from .recompiles import compile_intervals

MATMUL_OP = lazy_pattern(r"^aten::matmul$")


def whole_matmuls(tree, tv, r):
    """The attention blocks' spans (score bmm .. value bmm) widened to the aten::matmul ops around their two bmm:
    the layout copies a hand-written q @ k.T and p @ v make before each bmm (matmul's contiguous operands) are the
    block's work and go with it."""
    if tree is None or not len(tree[0]):
        return tree
    mm = np.flatnonzero((r["kind"] == "op").to_numpy() & name_mask(r["name"], MATMUL_OP()).astype(bool))  # (no copy of every op)
    if not mm.size:
        return tree
    ms, me = r["start_ns"].to_numpy(np.int64)[mm], r["end_ns"].to_numpy(np.int64)[mm]
    mt = r["thread"].to_numpy()[mm]
    spans = {}
    for thread, iv in tree[1].items():
        sel = mt == thread
        mmi = IntervalSet.of(ms[sel], me[sel])
        st, en = iv.starts.copy(), iv.ends.copy()
        if len(mmi):
            j = np.searchsorted(mmi.starts, st, side="right") - 1
            inside = (j >= 0) & (st < mmi.ends[np.maximum(j, 0)])
            st[inside] = mmi.starts[j[inside]]
            k = np.searchsorted(mmi.starts, en - 1, side="right") - 1
            inside = (k >= 0) & (en - 1 < mmi.ends[np.maximum(k, 0)])
            en[inside] = np.maximum(en[inside], mmi.ends[k[inside]])
        spans[thread] = IntervalSet.of(st, en)
    all_spans = IntervalSet.of(np.concatenate([v.starts for v in spans.values()]), np.concatenate([v.ends for v in spans.values()]))
    return (all_spans, spans, *tree[2:])


# Inductor benchmarking a freshly compiled graph's Triton configurations on its first run (a new shape's work)
BENCHMARK_CONFIGS = re.compile(r"^CachingAutotuner\.benchmark_all_configs")


def compiling(tl) -> IntervalSet:
    """torch.compile's compile ranges and the autotuning of what it compiled (one per new shape)."""
    comp = compile_intervals(tl)
    r = tl.ranges
    if not len(r):
        return comp
    b = r[name_mask(r["name"], BENCHMARK_CONFIGS).astype(bool)]
    if not len(b):
        return comp
    return IntervalSet.of(np.concatenate([comp.starts, b["start_ns"].to_numpy(np.int64)]),
                          np.concatenate([comp.ends, b["end_ns"].to_numpy(np.int64)]))


COMPILED_REGION = re.compile(r"^Torch-Compiled Region")


def compiled_regions(tl) -> IntervalSet:
    r = tl.ranges
    if not len(r):
        return IntervalSet.of([], [])
    e = r[name_mask(r["name"], COMPILED_REGION).astype(bool)]
    return IntervalSet.of(e["start_ns"].to_numpy(np.int64), e["end_ns"].to_numpy(np.int64))


def cudnn_trials(tv) -> IntervalSet:
    """cuDNN timing its candidate algorithms: each convolution operator that synchronized, from its start to
    the end of its last sync (what it launches after that is the chosen algorithm's work)."""
    r = tv.tl.ranges
    if not len(r):
        return IntervalSet.of([], [])
    conv = r[(r["kind"] == "op").to_numpy() & name_mask(r["name"], CONV_OP).astype(bool)]
    sync = tv.host_is("sync")
    if not len(conv) or not sync.any():
        return IntervalSet.of([], [])
    cs, ce = conv["start_ns"].to_numpy(np.int64), conv["end_ns"].to_numpy(np.int64)
    order = np.argsort(cs, kind="stable")
    cs, ce = cs[order], ce[order]
    ss, se = tv.host_start[sync].astype(np.int64), tv.host_end[sync].astype(np.int64)
    k = np.searchsorted(cs, ss, side="right") - 1
    inside = (k >= 0) & (ss < ce[np.maximum(k, 0)])
    if not inside.any():
        return IntervalSet.of([], [])
    last = np.full(cs.size, -1, dtype=np.int64)
    np.maximum.at(last, k[inside], se[inside])
    tuned = last >= 0
    return IntervalSet.of(cs[tuned], last[tuned])


def gil_holders(tl) -> IntervalSet:
    """Where a Python thread that launches no GPU work runs Python (its frames, not inside a wait): while
    it holds the GIL the launching thread cannot run (a PyTorch trace with stacks; gil.py)."""
    r = tl.ranges
    if not len(r) or not len(tl.host):
        return IntervalSet.of([], [])
    py = r[(r["kind"] == "python").to_numpy()]
    if not len(py):
        return IntervalSet.of([], [])
    other = py[~np.isin(py["thread"].to_numpy(), launching_threads(tl))]
    if not len(other):
        return IntervalSet.of([], [])
    other = other[~name_mask(other["name"], WAITING_FRAME()).astype(bool)]
    return IntervalSet.of(other["start_ns"].to_numpy(np.int64), other["end_ns"].to_numpy(np.int64))


def gil_waits(tl) -> IntervalSet:
    """An export's waits of the launching threads for the GIL: condition-variable / futex waits of 1 ms or more
    (OS calls, `-t osrt`; gil.py tells them from other waits for the step as a whole)."""
    h = tl.host_threads
    if h is None or "osrt" not in h.traced or not len(tl.host) or not len(h.os_calls):
        return IntervalSet.of([], [])
    c = h.os_calls
    c = c[np.isin(c["thread"].to_numpy(), launching_threads(tl))]
    s, e = c["start_ns"].to_numpy(np.int64), c["end_ns"].to_numpy(np.int64)
    ok = (e - s >= GIL_WAIT_MIN_NS.value) & name_mask(c["name"].astype(str), GIL_WAIT()).astype(bool)
    return IntervalSet.of(s[ok], e[ok])


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def new_shape_gemms(tl) -> IntervalSet:
    """GEMM ops (torch trace with shapes) whose input shapes the trace had not seen before: cuBLAS picks their
    algorithm on the host (its heuristics are cached per shape), 0.2-4 ms a shape on the H200 traces of a decoder
    whose GEMM rows grow every pass (docs/calibration.md)."""
    shapes = getattr(tl, "op_shapes", None)
    if tl.source != "torch" or shapes is None or not len(shapes):
        return IntervalSet.of([], [])
    sel = shapes[np.isin(shapes["name"].to_numpy(object), GEMM_OPS)]
    if not len(sel):
        return IntervalSet.of([], [])
    sel = sel.sort_values("start_ns", kind="stable")
    try:  # codes of the distinct (name, dims) values: the reader shares one bytes object per value
        name, dims = pd.factorize(sel["name"])[0], pd.factorize(sel["dims"])[0]
        first = ~pd.Series(name.astype(np.int64) * (int(dims.max()) + 1) + dims).duplicated().to_numpy()
    except TypeError:  # unhashable values (decoded lists)
        first = ~(sel["name"].astype(str) + "|" + sel["dims"].astype(str)).duplicated().to_numpy()
    return IntervalSet.of(sel["start_ns"].to_numpy(np.int64)[first], sel["end_ns"].to_numpy(np.int64)[first])


NAN_CHECK_OP = re.compile(r"^aten::(?:isnan|_is_any_true|item)$")


def nan_checks(tl) -> IntervalSet:
    """Autograd anomaly mode's NaN checks: the isnan -> _is_any_true -> item ops inside backward functions
    (debug_apis.py); their read-back is the sync a host_sync finding counts."""
    r = tl.ranges
    if tl.source != "torch" or not len(r):
        return IntervalSet.of([], [])
    ops = (r["kind"] == "op").to_numpy()
    check = ops & name_mask(r["name"], NAN_CHECK_OP).astype(bool)
    if not check.any():
        return IntervalSet.of([], [])
    bwd = ops & name_mask(r["name"], BACKWARD_FUNCTION).astype(bool)
    start, end = r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)
    inside = IntervalSet.of(start[bwd], end[bwd]).contains(start[check])
    return IntervalSet.of(start[check][inside], end[check][inside])


def attention_blocks(tree, op_thread: np.ndarray, op_launch: np.ndarray, cat: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Hand-written attention blocks: from the op tree where the trace has one (attention.py: a matmul,
    softmax, matmul on one thread; every kernel launched inside the span), else from kernel order."""
    if tree is None:
        return _attention_in_kernel_order(cat, stream)
    out = np.full(cat.size, -1, dtype=np.int64)
    base = 0
    for thread, iv in tree[1].items():
        sel = np.flatnonzero(op_thread == thread)
        if sel.size and len(iv):
            j = np.searchsorted(iv.starts, op_launch[sel], side="right") - 1
            hit = (j >= 0) & (op_launch[sel] < iv.ends[np.maximum(j, 0)])
            out[sel[hit]] = base + j[hit]
        base += len(iv)
    return out


def _attention_in_kernel_order(cat: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Hand-written attention in kernel order: a GEMM, kernels between (elementwise, copy, softmax) that
    hold a softmax, a GEMM; each such block gets an id."""
    out = np.full(cat.size, -1, dtype=np.int64)
    between = np.isin(cat, BETWEEN_SCORE_AND_VALUE)
    block = 0
    for s in np.unique(stream):
        rows = np.flatnonzero(stream == s)
        for j, r in enumerate(rows):
            if cat[r] != SOFTMAX or out[r] >= 0:
                continue
            lo = j
            while lo > 0 and between[rows[lo - 1]]:
                lo -= 1
            hi = j
            while hi + 1 < rows.size and between[rows[hi + 1]]:
                hi += 1
            if lo > 0 and hi + 1 < rows.size and cat[rows[lo - 1]] == GEMM and cat[rows[hi + 1]] == GEMM:
                out[rows[lo - 1:hi + 2]] = block
                block += 1
    return out


# what torch.compile fuses into one kernel: elementwise kernels and the copies, reductions, norms between them
ELEMENTWISE = CATEGORY_CODE["elementwise"]
CHAIN = (CATEGORY_CODE["elementwise"], CATEGORY_CODE["copy"], CATEGORY_CODE["reduction"], CATEGORY_CODE["normalization"])


def elementwise_chains(cat: np.ndarray, stream: np.ndarray, op_call: np.ndarray) -> np.ndarray:
    """Runs of 2+ adjacent elementwise-like kernels on one stream (what torch.compile fuses), by id (numbered by
    stream, then in order)."""
    out = np.full(cat.size, -1, dtype=np.int64)
    chain = np.isin(cat, CHAIN)
    run = 0
    for s in np.unique(stream):
        rows = np.flatnonzero(stream == s)
        edge = np.diff(np.concatenate(([0], chain[rows].astype(np.int8), [0])))
        first, end = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)  # each maximal run: rows[first:end]
        elementwise = np.concatenate(([0], np.cumsum(cat[rows] == ELEMENTWISE)))
        keep = (end - first >= 2) & (elementwise[end] > elementwise[first])
        first, end = first[keep], end[keep]
        length = end - first
        at = np.arange(int(length.sum())) + np.repeat(first - (np.cumsum(length) - length), length)
        out[rows[at]] = np.repeat(np.arange(run, run + first.size), length)
        run += first.size
    return out
