"""The step graph the replay runs: one steady step reduced to the host's CUDA calls in order (the host work
between them kept as measured), the GPU work each call enqueued, and, per call and per GPU op, what each fix
acts on (fix_marks.py): data loading, attention blocks, compiles, cuDNN trials, the GIL, NaN checks, FP32 GEMMs,
pageable copies, optimizer steps, elementwise chains, GEMMs below their roof; and per call its host pace when
nothing held it (the low bound of the fixes that unblock a stretched host: replay.py). Times in ns from the
step's host start. Pure; renders nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..ordering import is_sorted
from . import device_peaks
from .api_kinds import API_KINDS
from .attention import op_tree_spans
from .fix_marks import (attention_blocks, compiled_regions, compiling, cudnn_trials, elementwise_chains, gil_holders,
                        gil_waits, nan_checks, new_shape_gemms, whole_matmuls)
from .intervals import IntervalSet
from .kernels import CATEGORY_CODE, COMMUNICATION, GEMM, OPTIMIZER, _category, _tensor_core
from .names import name_mask, optimizer_ranges
from .steps import PHASE_PATTERNS
from .view import take, values_at

OTHER, LAUNCH, SYNC, COPY, ALLOC, GRAPH = range(6)
_KIND = {"launch": LAUNCH, "graph_launch": GRAPH, "copy_async": COPY, "copy_sync": COPY, "memset": LAUNCH,
         "sync": SYNC, "malloc": ALLOC, "free": ALLOC}
# the speed-up of an FP32 GEMM put on tensor cores, (low, high) of the replay (replay.py)
TENSOR_CORE_SPEEDUP = (14.0, 7.0)  # a device not in the peaks table (device_peaks.py)
# TF32 GEMMs of moderate size reach less of their datasheet peak than FP32 ones of theirs: 6.2x of the
# H200's 7.4x ratio at d 2048 (held-out pair tf32_train, docs/calibration.md)
TF32_OF_PEAK = 0.8
FIRST_RUN_NS = 1_000_000  # a host stretch this long inside a compiled graph's run is one-time set-up (recompiles)
# the host's pace per call where a fix unblocks it (low bound): this quantile of the host time (work before the call
# and the call) of the same op's same call (the innermost op around it, the call's place in that op) over the
# candidate steps' unhindered calls (replay.py's module doc)
PACE_QUANTILE = 25


@dataclass
class StepGraph:
    """One steady step (times in ns from its host start)."""

    step_ns: int              # the median steady step time (the GPU's windows)
    call_kind: np.ndarray      # per host call: OTHER / LAUNCH / SYNC / COPY / ALLOC / GRAPH
    call_gap: np.ndarray       # host work before the call (since the previous call ended)
    call_dur: np.ndarray
    call_blocks: np.ndarray    # the call waited for the GPU (it returned right after the GPU finished)
    call_data: np.ndarray      # ns of the work before it that was the host loading data
    call_attention: np.ndarray  # ns of the work before it inside a hand-written attention block (op tree)
    call_opt: np.ndarray       # made inside an optimizer step
    tail_ns: int               # host work after the last call
    op_call: np.ndarray        # per GPU op: the call that enqueued it
    op_stream: np.ndarray
    op_dur: np.ndarray
    op_cat: np.ndarray         # kernel category code (copies: copy)
    op_fp32_gemm: np.ndarray
    op_pageable_bytes: np.ndarray  # bytes of a pageable copy, else 0
    op_attention_block: np.ndarray  # block id of a hand-written attention block (score GEMM .. value GEMM), -1
    op_chain: np.ndarray       # id of a run of adjacent elementwise kernels (2+), -1
    lag_ns: int                # launch call -> kernel start when the GPU is idle
    call_compile: np.ndarray | None = None  # ns of the work before it inside torch.compile's compile ranges
    call_in_compile: np.ndarray | None = None  # made inside a compile range (a compile's own CUDA calls)
    tail_compile_ns: int = 0   # of the tail, inside compile ranges
    call_in_region: np.ndarray | None = None  # made inside a compiled graph's run (Torch-Compiled Region)
    call_trial: np.ndarray | None = None  # made inside a convolution's cuDNN trials (up to its last sync)
    call_gil: np.ndarray | None = None  # ns of the work before it that another Python thread ran through
    tail_gil_ns: int = 0       # of the tail, the same
    call_gil_wait: np.ndarray | None = None  # ns of the work before it the launching thread waited for the GIL (OS calls)
    tail_gil_wait_ns: int = 0
    call_nan_check: np.ndarray | None = None  # made inside anomaly mode's NaN checks (isnan / any / item in backward)
    call_nan_gap: np.ndarray | None = None  # ns of the work before it inside those checks
    call_region_gap: np.ndarray | None = None  # ns of the work before it inside a compiled graph's run
    call_key: np.ndarray | None = None  # per call: (innermost op's name code, the call's place in that op), as one int
    call_free: np.ndarray | None = None  # the call is unhindered: not blocking, its work before it in none of the fixes' causes
    call_pace: np.ndarray | None = None  # the host time (work before + call) of its key's unhindered calls, at PACE_QUANTILE
    call_new_shape: np.ndarray | None = None  # ns of the work before it inside a GEMM op of a shape new to the trace
    op_roof_ns: np.ndarray | None = None  # per GPU op: its time at 100% of its compute roof where KERN019's fix reaches it, else 0
    tc_speedup: tuple = TENSOR_CORE_SPEEDUP  # (low, high) speed-up of an FP32 GEMM put on tensor cores
    decode_tokens: float = 0.0  # tokens each forward pass re-runs without a KV cache (decode_prefix.py), 0: none
    replayed_ns: float | None = field(default=None, init=False, repr=False, compare=False)  # replay(g), kept once run
    periods_run: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # periods(g, ...) kept once run

    @property
    def gpu_ns(self) -> int:
        return int(self.op_dur.sum())


def _op_name_codes(r) -> np.ndarray:
    """`pd.factorize` of the ops' names (codes numbered by first appearance, -1 for a missing name), as int32
    from a Categorical's codes (no Series, int64 codes or hash table of every op)."""
    if not len(r):
        return np.zeros(0, np.int64)
    is_op = (r["kind"] == "op").to_numpy()
    names = r["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return pd.factorize(names[is_op])[0]
    cat = names.array.codes[is_op]
    first = pd.unique(cat[cat >= 0])  # the categories in the order the ops first name them
    number = np.full(len(names.cat.categories) + 1, -1, np.int32)  # (the last: a missing name's code -1)
    number[first] = np.arange(first.size, dtype=np.int32)
    return take(number, cat)



def shared_inputs(tv, at_roof=None) -> dict:
    """What every candidate step's graph reads from the whole trace (found once): the data-loading, optimizer,
    attention, compile, trial, GIL and NaN-check intervals, the op tree and its names' codes, each host call's
    kind and thread, and at_roof (step_graph)."""
    tl = tv.tl
    r = tl.ranges
    data_sel = name_mask(r["name"], PHASE_PATTERNS["data"]) & r["kind"].isin(["nvtx", "annotation"]).to_numpy()
    opt = optimizer_ranges(tl)
    tree = whole_matmuls(op_tree_spans(r), tv, r)
    op_name_code = _op_name_codes(r)
    return {"data": IntervalSet.of(r["start_ns"].to_numpy()[data_sel], r["end_ns"].to_numpy()[data_sel]),
            "op_tree": tv.op_tree if len(op_name_code) else None, "op_name_code": op_name_code,
            "opt": IntervalSet.of(opt["start_ns"], opt["end_ns"]) if len(opt) else None, "tree": tree,
            "kinds": _call_kinds(tv), "thread": tl.host["thread"].to_numpy(), "host_sorted": is_sorted(tv.host_start),
            "compile": compiling(tl),
            "region": compiled_regions(tl), "trials": cudnn_trials(tv), "holder": gil_holders(tl),
            "gil_waits": gil_waits(tl), "nan_checks": nan_checks(tl), "new_shape": new_shape_gemms(tl),
            "at_roof": at_roof}


def unhindered_pace(g: StepGraph, built: list) -> np.ndarray:
    """Per call of g, the PACE_QUANTILE of the host time (work before it + the call) of the unhindered calls of its
    key in the candidate steps built (NaN for a call outside any op, or whose key has no unhindered call)."""
    keys = np.concatenate([b.call_key for b in built])
    free = np.concatenate([b.call_free for b in built]) & (keys >= 0)
    host = np.concatenate([(b.call_gap + b.call_dur).astype(float) for b in built])
    out = np.full(g.call_key.size, np.nan)
    if not free.any():
        return out
    k, h = keys[free], host[free]
    order = np.lexsort((h, k))
    k, h = k[order], h[order]
    uniq, first, counts = np.unique(k, return_index=True, return_counts=True)
    # the quantile by the nearest rank of each key's sorted host times
    rank = first + np.floor((counts - 1) * PACE_QUANTILE / 100).astype(np.int64)
    j = np.searchsorted(uniq, g.call_key)
    hit = (g.call_key >= 0) & (j < uniq.size) & (uniq[np.minimum(j, uniq.size - 1)] == g.call_key)
    out[hit] = h[rank[j[hit]]]
    return out


def tensor_core_speedup(devices) -> tuple:
    """(low, high) of an FP32 GEMM's speed-up on tensor cores: the datasheet's dense bf16 / FP32 peak ratio (the
    Fix's bf16 autocast) .. TF32_OF_PEAK of its TF32 / FP32 ratio (the Fix's TF32); TENSOR_CORE_SPEEDUP where the
    device is not in the peaks table or lacks either figure."""
    peaks = device_peaks.lookup(devices)
    if not peaks or "bf16" not in peaks["tensor"] or "tf32" not in peaks["tensor"]:
        return TENSOR_CORE_SPEEDUP
    fp32 = peaks["fp32_tflops"]
    return (peaks["tensor"]["bf16"] / fp32, TF32_OF_PEAK * peaks["tensor"]["tf32"] / fp32)


def _call_kinds(tv) -> np.ndarray:
    code = np.array([_KIND.get(k, OTHER) for k in API_KINDS], dtype=np.int8)
    return code[tv.host_api] if tv.host_api.size else np.zeros(0, dtype=np.int8)


def _step_calls(tv, steps, i: int, shared: dict):
    """The step's host calls (on the threads that launched its GPU work, in time order) and its GPU ops
    (launched by one of them, in call then start order) with the call of each; None without either."""
    hs, he = int(steps.host_start[i]), int(steps.host_end[i])
    host_start, kinds, gpu_launch = tv.host_start, shared["kinds"], tv.launch_row
    lo, hi = np.searchsorted(host_start, hs), np.searchsorted(host_start, he)  # host rows are sorted by start
    # the step's GPU ops: launched by a call inside the step's host range (the calls lo..hi - 1, where the host
    # rows are sorted: no launch time of every GPU row)
    inside = (gpu_launch >= lo) & (gpu_launch < hi) if shared["host_sorted"] else \
        (gpu_launch >= 0) & (tv.launch_ns >= hs) & (tv.launch_ns < he)
    ops = np.flatnonzero(inside)
    del inside
    if ops.size == 0:
        return None
    thread = shared["thread"]
    launching = np.unique(thread[gpu_launch[ops]])
    window = np.arange(lo, hi)
    calls = window[np.isin(thread[window], launching) & (kinds[window] != OTHER)]
    calls = calls[np.argsort(host_start[calls], kind="stable")]
    if calls.size == 0:
        return None
    by_row = np.argsort(calls)  # the launching call of each op (its position in calls), -1 if not one of them
    launch = gpu_launch[ops]
    j = np.minimum(np.searchsorted(calls[by_row], launch), calls.size - 1)
    op_call = np.where(calls[by_row][j] == launch, by_row[j], -1).astype(np.int64)
    keep = op_call >= 0
    ops, op_call = ops[keep], op_call[keep]
    order = np.lexsort((tv.gpu_start[ops], op_call))
    return hs, he, calls, ops[order], op_call[order]


def _before_calls(iv, prev_end: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """ns of each call's preceding host work (previous call's end -> its start) inside the intervals iv."""
    return iv.overlap(prev_end, np.maximum(cs, prev_end)) if iv is not None and len(iv) else np.zeros(cs.size)


def _in_tail(iv, he: int, tail: int) -> int:
    """ns of the step's tail (its last tail ns) inside the intervals iv."""
    return int(iv.overlap(np.array([he - tail]), np.array([he]))[0]) if len(iv) and tail > 0 else 0


def _call_marks(shared: dict, cs: np.ndarray, ce: np.ndarray, hs: int, he: int) -> dict:
    """Per host call, what the fixes act on: the host work before it (gap) and how much of that was data
    loading, attention blocks, compiling, another thread holding the GIL, NaN checks; which calls sit
    inside an optimizer step, a compile, a compiled region, cuDNN trials, NaN checks; the step's tail."""
    n = cs.size
    prev_end = np.concatenate(([hs], np.maximum.accumulate(ce)[:-1]))
    tree = shared["tree"]
    tail = max(he - int(prev_end[-1] if ce.size == 0 else max(ce.max(), hs)), 0)
    m = {"call_gap": np.maximum(cs - prev_end, 0), "tail_ns": int(tail),
         "call_data": _before_calls(shared["data"], prev_end, cs),  # annotated data-loading ranges
         "call_attention": _before_calls(tree[0] if tree is not None else None, prev_end, cs),
         "call_opt": shared["opt"].contains(cs) if shared["opt"] is not None else np.zeros(n, bool),
         "call_trial": shared["trials"].contains(cs)}
    comp = shared["compile"]
    if len(comp):
        last_end = int(max(ce.max(), hs)) if ce.size else hs
        m.update(call_compile=_before_calls(comp, prev_end, cs), call_in_compile=comp.contains(cs),
                 tail_compile_ns=int(comp.overlap(np.array([last_end]), np.array([max(he, last_end)]))[0]),
                 call_in_region=shared["region"].contains(cs) if len(shared["region"]) else np.zeros(n, bool))
    else:
        m.update(call_compile=np.zeros(n), call_in_compile=np.zeros(n, bool), tail_compile_ns=0,
                 call_in_region=np.zeros(n, bool))
    holder, waits, checks = shared["holder"], shared["gil_waits"], shared["nan_checks"]
    m.update(call_gil=_before_calls(holder, prev_end, cs), tail_gil_ns=_in_tail(holder, he, tail),
             call_gil_wait=_before_calls(waits, prev_end, cs), tail_gil_wait_ns=_in_tail(waits, he, tail),
             call_nan_check=checks.contains(cs) if len(checks) else np.zeros(n, bool),
             call_nan_gap=_before_calls(checks, prev_end, cs), call_region_gap=_before_calls(shared["region"], prev_end, cs),
             call_new_shape=_before_calls(shared["new_shape"], prev_end, cs))
    return m


def _call_keys(shared: dict, thread: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """Per call, its op and place: the innermost op around it (its name's code) and how many calls of the same op
    instance came before it in the step, as one int; -1 outside any op (or without an op tree)."""
    tree = shared["op_tree"]
    if tree is None:
        return np.full(cs.size, -1, dtype=np.int64)
    inner = tree.innermost(cs, thread)
    order = np.argsort(inner, kind="stable")
    srt = inner[order]
    start = np.r_[0, np.flatnonzero(srt[1:] != srt[:-1]) + 1]
    place = np.empty(cs.size, dtype=np.int64)
    place[order] = np.arange(cs.size) - np.repeat(start, np.diff(np.r_[start, cs.size]))
    code = shared["op_name_code"][tree.rows[np.maximum(inner, 0)]]
    return np.where(inner >= 0, code.astype(np.int64) * 1024 + np.minimum(place, 1023), -1)


def _unhindered(marks: dict, blocks: np.ndarray, cost: np.ndarray, cap: float) -> np.ndarray:
    """Calls whose host time is the host's own pace: not blocking nor held by a full launch queue, and the work
    before them not loading data, compiling, trying cuDNN algorithms, waiting for the GIL, checking NaNs, nor a
    compiled graph's first-run set-up."""
    return (~blocks & (cost < cap) & (marks["call_data"] == 0) & (marks["call_compile"] == 0) & ~marks["call_in_compile"]
            & ~marks["call_trial"] & (marks["call_gil"] == 0) & (marks["call_gil_wait"] == 0) & ~marks["call_nan_check"]
            & (marks["call_nan_gap"] == 0) & ~((marks["call_region_gap"] > 0) & (marks["call_gap"] > FIRST_RUN_NS)))


def _op_marks(tv, ops: np.ndarray, in_optimizer: np.ndarray) -> dict:
    """Per GPU op: duration, queue, category, and what the fixes act on (FP32 GEMMs, pageable copies)."""
    gstart, gend = tv.gpu_start[ops].astype(np.int64), tv.gpu_end[ops].astype(np.int64)
    gpu = tv.tl.gpu
    names = tv.gpu_names.subset(ops)
    cat = names.per_unique("category", lambda n: CATEGORY_CODE[_category(n)], CATEGORY_CODE[_category("")]).astype(np.int8)[names.codes]
    is_kernel = tv.is_kernel[ops]
    cat[~is_kernel] = CATEGORY_CODE["copy"]
    cat[is_kernel & in_optimizer & (cat != COMMUNICATION)] = OPTIMIZER
    tc = names.per_unique("tensor_core", _tensor_core, _tensor_core(""))[names.codes]
    pageable = (~is_kernel) & gpu["pageable"].to_numpy()[ops] & np.isin(values_at(gpu["copy_kind"], ops), ["HtoD", "DtoH"])
    # one queue: the work of side streams waits on events the trace does not link; collectives keep their
    # own streams (they overlap compute)
    stream = np.where(cat != COMMUNICATION, -1, gpu["stream"].to_numpy()[ops]).astype(np.int64)
    return {"gstart": gstart, "gend": gend, "op_dur": np.maximum(gend - gstart, 0), "op_cat": cat, "op_stream": stream,
            "op_fp32_gemm": is_kernel & (cat == GEMM) & (tc == "no"),
            "op_pageable_bytes": np.where(pageable, gpu["bytes"].to_numpy()[ops], 0).astype(np.int64)}


def _lag_ns(gstart: np.ndarray, gend: np.ndarray, stream: np.ndarray, launch_start: np.ndarray) -> int:
    """Launch call start -> op start, where the op did not queue behind another on its stream (25th pct)."""
    lag = gstart - launch_start
    free = np.ones(gstart.size, dtype=bool)
    for s in np.unique(stream):
        sel = np.flatnonzero(stream == s)
        prev = np.concatenate(([-1], gend[sel][:-1]))
        free[sel] = gstart[sel] > prev + 2_000
    seen = lag[free & (lag > 0)]
    lag_ns = int(np.percentile(seen, 25)) if seen.size >= 5 else 5_000
    return min(max(lag_ns, 1_000), 20_000)


def graph_of_step(tv, steps, i: int, shared: dict) -> StepGraph | None:
    got = _step_calls(tv, steps, i, shared)
    if got is None:
        return None
    hs, he, calls, ops, op_call = got
    cs, ce = tv.host_start[calls].astype(np.int64), tv.host_end[calls].astype(np.int64)
    marks = _call_marks(shared, cs, ce, hs, he)
    o = _op_marks(tv, ops, marks["call_opt"][op_call])
    gstart, gend, stream, cat = o.pop("gstart"), o.pop("gend"), o["op_stream"], o["op_cat"]
    # blocking calls: syncs, copies and frees that returned right after the GPU finished what they wait for
    last = np.full(calls.size, -1, dtype=np.int64)
    np.maximum.at(last, op_call, gend)
    done = np.maximum.accumulate(last)  # measured end of the GPU work enqueued up to each call
    ck = shared["kinds"][calls]
    waited = (ce >= done - 1_000) & (done >= cs) & (ce - cs > 5_000)
    blocks = np.isin(ck, [SYNC, COPY, ALLOC]) & waited
    # a launch that waited for a free slot in a full launch queue: the GPU held it, not the host's own cost
    cost = ce - cs
    launches = np.isin(ck, [LAUNCH, GRAPH])
    cap = np.inf
    if launches.any():
        cap = max(3 * float(np.percentile(cost[launches], 25)), 20_000.0)
        cost = np.where(launches, np.minimum(cost, cap), cost).astype(np.int64)
    tree = shared["tree"]
    at_roof = shared.get("at_roof")
    if at_roof is not None and at_roof[0].size:
        j = np.searchsorted(at_roof[0], ops)
        j = np.minimum(j, at_roof[0].size - 1)
        o["op_roof_ns"] = np.where(at_roof[0][j] == ops, at_roof[1][j], 0.0)
    return StepGraph(step_ns=int(np.median(steps.end[steps.steady] - steps.start[steps.steady])), call_kind=ck,
                     call_dur=cost, call_blocks=blocks, op_call=op_call,
                     call_key=_call_keys(shared, shared["thread"][calls].astype(np.int64), cs),
                     call_free=_unhindered(marks, blocks, cost, cap),
                     op_attention_block=attention_blocks(tree, shared["thread"][calls][op_call], cs[op_call], cat, stream),
                     op_chain=elementwise_chains(cat, stream, op_call), lag_ns=_lag_ns(gstart, gend, stream, cs[op_call]),
                     **marks, **o)
