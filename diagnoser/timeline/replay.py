"""The step time after a fix: one steady step replayed on its dependency graph, with the cause's
events removed or changed as the fix would.

`step_graph()` (at measure time, from the tables) reduces the median steady step to a `StepGraph`:
the host's CUDA calls in order (the host work between them kept as measured), the GPU work each
call enqueued, and what each fix acts on. `predict()` replays it: the host walks its calls, each
launch enqueues its GPU work, a GPU op starts when its stream is free and its launch has reached
the GPU, a blocking call (a sync, a pageable or read-back copy, a cudaFree) holds the host until
the GPU has finished what was enqueued. The step is replayed several times in a row so a host that
runs ahead of the GPU is seen; the period is the step time. A fix changes the graph:

  host_sync          blocking syncs and read-back copies stop blocking (one kept at the step's end: high);
                     where they are anomaly mode's NaN checks, the checks go whole
  input_pipeline     the host's data work leaves the loop (workers: 4-8 of them do it in parallel)
  pageable_memcpy    pageable copies run at pinned bandwidth and stop blocking
  allocator_churn    cudaMalloc / cudaFree cost nothing and stop blocking
  fp32_no_tensor_cores  GEMMs without tensor cores run faster: the device's datasheet bf16 / FP32 peak ratio ..
                     0.8 of its TF32 / FP32 ratio (14.8x .. 5.9x on an H100 / H200; unknown device: 14x .. 7x)
  unfused_attention  score GEMM .. value GEMM blocks become one fused kernel of 0.3-0.8 their GEMM time
  single_tensor_optimizer  the optimizer's kernels and their launches shrink to a multi-tensor few
  memory_bound_kernels  runs of elementwise kernels fuse into one kernel each (torch.compile); each call of a
                     compiled function costs the host its guards and wrapper (low: one call a step, the Fix's
                     whole-model compile; high: one per fused run)
  launch_overhead    the step's launches become one graph replay: the host's per-kernel work goes
  compile_recompile  the host's time inside torch.compile's compile ranges (and Inductor's benchmarking of
                     what it compiled) goes, with the calls made there; the compiled graph's run stays
                     (low: without its first-run set-up for the new shape)
  cudnn_autotune     a convolution that synchronized (cuDNN timing candidates) keeps only what it launched
                     after its last sync (the chosen algorithm); the trials, their syncs and host work go, the
                     host runs as one that no longer spins in syncs (low: fixed shapes, cudaMalloc / cudaFree
                     for new sizes go too; high: benchmark off, they stay)
  decode_without_kv_cache  each forward pass runs the new token alone, not the whole sequence: every GPU op of
                     the step takes 1/T of its time (T: the tokens each pass re-ran, decode_recompute_work_ratio),
                     down to DECODE_KERNEL_NS (a kernel on the batch's rows alone) and never above its measured
                     time; GEMM ops of a shape new to the trace (cuBLAS choosing their algorithm on the host) cost
                     the host what a GEMM of a known shape does; each attention op gains the cache's two
                     concatenations (K and V: their kernels and their host ops, at the step's median host time
                     per launch); the host's other work stays
  gemm_below_roof    every GEMM kernel whose op shows the compute gap's cause (an unaligned vocabulary: the LM
                     head's forward GEMM and both backward ones) runs at 80% .. 50% of its compute roof (the
                     roofline's target .. KERN019's threshold), from its FLOPs (roofline.py)
  gil_contention     the host stretches (and the tail) in which the launching thread waited for the GIL (an
                     export: holding a GIL wait, OS calls; a PyTorch trace with stacks: over 1 ms, a Python
                     thread that launches nothing running through it) shrink to the step's median .. 90th-
                     percentile stretch

Where a fix unblocks a host whose pace per call the cause stretched (unfused_attention: a GPU-bound step, its host
behind a long queue; cudnn_autotune: the trials; compile_recompile: first runs), the low bound puts each remaining call
at its unhindered pace: PACE_QUANTILE of the host time (work before it + the call) of the same op's same call (the
innermost op around it, its place in that op) over the candidate steps' calls not held by a sync, a full launch queue,
a compile, a trial, the GIL, NaN checks or data loading. Hand-written attention blocks span the aten::matmul ops around
their score and value bmm (the layout copies matmul makes go with the block).

Assumes: the GPU work a fix does not touch keeps its measured duration; streams are independent
apart from the host's order (cross-stream event waits are not modelled); the host's work between
calls is what it is in the trace, less what the fix removes. Pure; renders nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import device_peaks
from .api_kinds import API_KINDS
from .attention import op_tree_spans
from .autotune import CONV_OP
from .debug_apis import BACKWARD_FUNCTION
from .gil import GIL_WAIT, GIL_WAIT_MIN_NS, WAITING_FRAME
from .host_threads import launching_threads
from .intervals import IntervalSet
from .kernels import (ATTENTION, CATEGORY_CODE, COMMUNICATION, GEMM, OPTIMIZER, SOFTMAX, BETWEEN_SCORE_AND_VALUE, _category,
                      _tensor_core)
from .names import name_mask, optimizer_ranges
from .recompiles import compile_intervals
from .steps import PHASE_PATTERNS
from .view import values_at

OTHER, LAUNCH, SYNC, COPY, ALLOC, GRAPH = range(6)
_KIND = {"launch": LAUNCH, "graph_launch": GRAPH, "copy_async": COPY, "copy_sync": COPY, "memset": LAUNCH,
         "sync": SYNC, "malloc": ALLOC, "free": ALLOC}
ELEMENTWISE = CATEGORY_CODE["elementwise"]
CHAIN = (CATEGORY_CODE["elementwise"], CATEGORY_CODE["copy"], CATEGORY_CODE["reduction"], CATEGORY_CODE["normalization"])
REPEATS = 4
RESUME_NS = 2_000  # a blocking call that finds the GPU done returns after about this long
# what each fix does, as (low, high) of the factor it applies (module doc)
TENSOR_CORE_SPEEDUP = (14.0, 7.0)  # a device not in the peaks table (device_peaks.py)
# TF32 GEMMs of moderate size reach less of their datasheet peak than FP32 ones of theirs: 6.2x of the
# H200's 7.4x ratio at d 2048 (held-out pair tf32_train, docs/calibration.md)
TF32_OF_PEAK = 0.8
# host time of one call of a torch.compile'd function (Dynamo's guards, Inductor's wrapper, its launches):
# 144-214 us, median 173, in the calibration pair compile_chain's AFTER trace (docs/calibration.md)
COMPILED_CALL_NS = 173_000
FLASH_OF_GEMM = (0.2, 0.6)
FUSED_OPTIMIZER_GPU = (0.1, 0.35)
FUSED_OPTIMIZER_LAUNCHES = (0.02, 0.1)
FUSED_OPTIMIZER_HOST = (0.1, 0.3)  # what is left of the host's work inside the optimizer step
FUSED_CHAIN = (0.6, 1.3)
# a kernel over the batch's rows alone (a decode pass with a KV cache): 2 us (about the shortest kernel an H100 /
# H200 runs) .. 5 us (a GEMM reading its weights once at a fraction of the bandwidth); set before the held-out
# decoders were re-diagnosed, not fitted on them
DECODE_KERNEL_NS = (2_000, 5_000)
# a GEMM whose dtype or shapes kept it off its roof, once fixed (aligned dims, tensor cores): at the roofline's
# target share of its compute roof (roofline.target_efficiency_pct, KERN019's target_roof_pct: 80%) .. at KERN019's
# threshold (max_roof_pct: 50%, the share below which it fires)
GEMM_ROOF = (0.8, 0.5)  # one fused kernel: this many times the longest kernel of its run
PINNED_GBPS = (55.0, 40.0)
LOADER_WORKERS = (8, 4)
GRAPH_NODE_NS = (300, 1_500)  # GPU time between two kernels of a replayed graph
# the host's work per call once it no longer waits in syncs: measured 0.68 and 0.77 of what it was on two
# real pairs (docs/calibration.md: a host that spins in syncs runs its Python and launches slower)
HOST_AFTER_SYNCS = (0.65, 0.85)
# the AFTER run's host pace against BEFORE's for the same work: runs of one program differ (the host work
# per step of 10 runs of one program spread 3.0-5.3 ms on the GPU machine: docs/compare.md)
HOST_PACE = (0.8, 1.05)
GIL_WAIT_NS = 1_000_000  # a host stretch this long that another Python thread ran through: a wait for the GIL
FIRST_RUN_NS = 1_000_000  # a host stretch this long inside a compiled graph's run is one-time set-up (recompiles)
# the host's pace per call where a fix unblocks it (low bound): this quantile of the host time (work before the call
# and the call) of the same op's same call (the innermost op around it, the call's place in that op) over the
# candidate steps' unhindered calls (module doc)
PACE_QUANTILE = 25
# the fixes after which the BEFORE's host pace per call is not the AFTER's: the step waited on the GPU (the host ran
# ahead behind a long queue), or the host ran cuDNN's trials or the first run of freshly compiled graphs
PACED_FIXES = frozenset({"unfused_attention", "cudnn_autotune", "compile_recompile"})
# a call's host time (work before it + the call) over this is host work of its own (input preprocessing, Python
# compute), not a pace per call: the pace leaves it as it is
PACE_MAX_NS = 1_000_000
# what a prediction of those fixes assumes of the host (the report prints it after the range)
PACE_ASSUMES = ("low: the host at its unhindered pace, each op's calls at the faster quartile of those not held by "
                "a sync, a full launch queue, a compile or a trial")


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

    @property
    def gpu_ns(self) -> int:
        return int(self.op_dur.sum())


CANDIDATES = 5


def step_graph(tv, steps, at_roof=None) -> StepGraph | None:
    """The steady step whose replay comes closest to the median step time (of up to CANDIDATES steps
    around the median: a host that runs ahead of the GPU records step ranges that do not match the
    GPU's), as a StepGraph; None without steps, calls or GPU work. at_roof: (gpu rows, ns) of the kernels
    the compute gap's fix brings to their roof, at 100% of it (roofline.py)."""
    idx = steps.steady
    if not idx.size:
        return None
    dur = (steps.end[idx] - steps.start[idx]).astype(float)
    order = idx[np.argsort(np.abs(dur - np.median(dur)), kind="stable")][:CANDIDATES]
    tl = tv.tl
    r = tl.ranges
    data_sel = name_mask(r["name"], PHASE_PATTERNS["data"]) & r["kind"].isin(["nvtx", "annotation"]).to_numpy()
    opt = optimizer_ranges(tl)
    tree = _whole_matmuls(op_tree_spans(r), tv, r)
    op_names = r["name"][(r["kind"] == "op").to_numpy()] if len(r) else r["name"]
    shared = {"data": IntervalSet.of(r["start_ns"].to_numpy()[data_sel], r["end_ns"].to_numpy()[data_sel]),
              "op_tree": tv.op_tree if len(op_names) else None, "op_name_code": pd.factorize(op_names)[0],
              "opt": IntervalSet.of(opt["start_ns"], opt["end_ns"]) if len(opt) else None, "tree": tree,
              "kinds": _call_kinds(tv), "thread": tl.host["thread"].to_numpy(), "compile": _compiling(tl), "region": _regions(tl),
              "trials": _trials(tv), "holder": _holder(tl),
              "gil_waits": _gil_waits(tl), "nan_checks": _nan_checks(tl), "new_shape": _new_shape_gemms(tl),
              "at_roof": at_roof}
    best, err, built = None, None, []
    for i in order.tolist():
        g = _graph_of_step(tv, steps, int(i), shared)
        if g is None:
            continue
        built.append(g)
        e = abs(replay(g) - float(np.median(dur)))
        if err is None or e < err:
            best, err = g, e
    if best is not None:
        best.tc_speedup = tensor_core_speedup(tl.devices)
        best.call_pace = _unhindered_pace(best, built)
    return best


def _unhindered_pace(g: StepGraph, built: list) -> np.ndarray:
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


MATMUL_OP = re.compile(r"^aten::matmul$")


def _whole_matmuls(tree, tv, r):
    """The attention blocks' spans (score bmm .. value bmm) widened to the aten::matmul ops around their two bmm:
    the layout copies a hand-written q @ k.T and p @ v make before each bmm (matmul's contiguous operands) are the
    block's work and go with it."""
    if tree is None or not len(tree[0]):
        return tree
    ops = r[(r["kind"] == "op").to_numpy()]
    mm = name_mask(ops["name"], MATMUL_OP).astype(bool)
    if not mm.any():
        return tree
    ms, me = ops["start_ns"].to_numpy(np.int64)[mm], ops["end_ns"].to_numpy(np.int64)[mm]
    mt = ops["thread"].to_numpy()[mm]
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


def _compiling(tl) -> IntervalSet:
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


def _regions(tl) -> IntervalSet:
    r = tl.ranges
    if not len(r):
        return IntervalSet.of([], [])
    e = r[name_mask(r["name"], COMPILED_REGION).astype(bool)]
    return IntervalSet.of(e["start_ns"].to_numpy(np.int64), e["end_ns"].to_numpy(np.int64))


def _trials(tv) -> IntervalSet:
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


def _holder(tl) -> IntervalSet:
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
    other = other[~name_mask(other["name"], WAITING_FRAME).astype(bool)]
    return IntervalSet.of(other["start_ns"].to_numpy(np.int64), other["end_ns"].to_numpy(np.int64))


def _gil_waits(tl) -> IntervalSet:
    """An export's waits of the launching threads for the GIL: condition-variable / futex waits of 1 ms or more
    (OS calls, `-t osrt`; gil.py tells them from other waits for the step as a whole)."""
    h = tl.host_threads
    if h is None or "osrt" not in h.traced or not len(tl.host) or not len(h.os_calls):
        return IntervalSet.of([], [])
    c = h.os_calls
    c = c[np.isin(c["thread"].to_numpy(), launching_threads(tl))]
    s, e = c["start_ns"].to_numpy(np.int64), c["end_ns"].to_numpy(np.int64)
    ok = (e - s >= GIL_WAIT_MIN_NS.value) & name_mask(c["name"].astype(str), GIL_WAIT).astype(bool)
    return IntervalSet.of(s[ok], e[ok])


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def _new_shape_gemms(tl) -> IntervalSet:
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


def _nan_checks(tl) -> IntervalSet:
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


def _call_kinds(tv) -> np.ndarray:
    code = np.array([_KIND.get(k, OTHER) for k in API_KINDS], dtype=np.int8)
    return code[tv.host_api] if tv.host_api.size else np.zeros(0, dtype=np.int8)


def _step_calls(tv, steps, i: int, shared: dict):
    """The step's host calls (on the threads that launched its GPU work, in time order) and its GPU ops
    (launched by one of them, in call then start order) with the call of each; None without either."""
    hs, he = int(steps.host_start[i]), int(steps.host_end[i])
    host_start, kinds, gpu_launch = tv.host_start, shared["kinds"], tv.launch_row
    # the step's GPU ops: launched by a call inside the step's host range
    ops = np.flatnonzero((gpu_launch >= 0) & (tv.launch_ns >= hs) & (tv.launch_ns < he))
    if ops.size == 0:
        return None
    thread = shared["thread"]
    launching = np.unique(thread[gpu_launch[ops]])
    lo, hi = np.searchsorted(host_start, hs), np.searchsorted(host_start, he)  # host rows are sorted by start
    window = np.arange(lo, hi)
    calls = window[np.isin(thread[window], launching) & (kinds[window] != OTHER)]
    calls = calls[np.argsort(host_start[calls], kind="stable")]
    if calls.size == 0:
        return None
    pos = {int(c): j for j, c in enumerate(calls.tolist())}
    op_call = np.array([pos.get(int(r), -1) for r in gpu_launch[ops]], dtype=np.int64)
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


def _graph_of_step(tv, steps, i: int, shared: dict) -> StepGraph | None:
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
                     op_attention_block=_attention(tree, shared["thread"][calls][op_call], cs[op_call], cat, stream),
                     op_chain=_chains(cat, stream, op_call), lag_ns=_lag_ns(gstart, gend, stream, cs[op_call]),
                     **marks, **o)


def _attention(tree, op_thread: np.ndarray, op_launch: np.ndarray, cat: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Hand-written attention blocks: from the op tree where the trace has one (attention.py: a matmul,
    softmax, matmul on one thread; every kernel launched inside the span), else from kernel order."""
    if tree is None:
        return _attention_blocks(cat, stream)
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


def _attention_blocks(cat: np.ndarray, stream: np.ndarray) -> np.ndarray:
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


def _chains(cat: np.ndarray, stream: np.ndarray, op_call: np.ndarray) -> np.ndarray:
    """Runs of 2+ adjacent elementwise-like kernels on one stream (what torch.compile fuses), by id."""
    out = np.full(cat.size, -1, dtype=np.int64)
    chain = np.isin(cat, CHAIN)
    run = 0
    for s in np.unique(stream):
        rows = np.flatnonzero(stream == s)
        j = 0
        while j < rows.size:
            if not chain[rows[j]]:
                j += 1
                continue
            k = j
            while k + 1 < rows.size and chain[rows[k + 1]]:
                k += 1
            if k > j and (cat[rows[j:k + 1]] == ELEMENTWISE).any():
                out[rows[j:k + 1]] = run
                run += 1
            j = k + 1
    return out


@dataclass
class _Fixed:
    """The graph's arrays as the fixes applied so far leave them (each fix below edits them in place)."""

    gap: np.ndarray
    dur: np.ndarray
    blocks: np.ndarray
    op_dur: np.ndarray
    keep_op: np.ndarray
    keep_call: np.ndarray
    data_floor: float = 0.0
    node_ns: float | None = None
    tail: float = 0.0


def _fix_host_sync(g: StepGraph, s: _Fixed, bound: int) -> None:
    unblock = s.blocks & np.isin(g.call_kind, [SYNC, COPY])
    if bound and unblock.any():  # the Fix keeps one read a step: the last one
        unblock[np.flatnonzero(unblock)[-1]] = False
    s.dur[unblock] = np.minimum(s.dur[unblock], RESUME_NS)
    s.blocks = s.blocks & ~unblock
    if g.call_nan_check is not None and g.call_nan_check.any():
        # the syncs are anomaly mode's NaN checks: turned off, the checks go whole (their kernels, read-backs
        # and host work), not just their waits
        s.keep_call &= ~g.call_nan_check
        s.blocks = s.blocks & ~g.call_nan_check
        s.gap = np.maximum(s.gap - g.call_nan_gap, 0.0)
    s.gap *= HOST_AFTER_SYNCS[bound]
    s.dur[~s.blocks] *= HOST_AFTER_SYNCS[bound]


def _fix_allocator_churn(g: StepGraph, s: _Fixed, bound: int) -> None:
    alloc = g.call_kind == ALLOC
    s.dur[alloc] = 0.0
    s.blocks = s.blocks & ~alloc


def _fix_pageable_memcpy(g: StepGraph, s: _Fixed, bound: int) -> None:
    p = g.op_pageable_bytes > 0
    s.op_dur[p] = np.minimum(s.op_dur[p], g.op_pageable_bytes[p] / PINNED_GBPS[bound])
    calls = np.unique(g.op_call[p])
    s.dur[calls] = np.minimum(s.dur[calls], RESUME_NS)
    s.blocks[calls] = False
    # a copy from pageable memory is followed by a stream sync (the copy's own wait): it goes too
    after = calls[calls + 1 < s.gap.size] + 1
    after = after[g.call_kind[after] == SYNC]
    s.dur[after] = np.minimum(s.dur[after], RESUME_NS)
    s.blocks[after] = False


def _fix_input_pipeline(g: StepGraph, s: _Fixed, bound: int) -> None:
    data = float(g.call_data.sum())
    s.gap = np.maximum(s.gap - g.call_data, 0.0)
    s.data_floor = data / LOADER_WORKERS[bound]


def _fix_fp32_no_tensor_cores(g: StepGraph, s: _Fixed, bound: int) -> None:
    s.op_dur[g.op_fp32_gemm] /= g.tc_speedup[bound]


def _fix_unfused_attention(g: StepGraph, s: _Fixed, bound: int) -> None:
    s.gap = np.maximum(s.gap - g.call_attention, 0.0)  # the blocks' host work: one fused op is left of it
    for b in np.unique(g.op_attention_block[g.op_attention_block >= 0]):
        rows = np.flatnonzero(g.op_attention_block == b)
        gemm = float(g.op_dur[rows][g.op_cat[rows] == GEMM].sum())
        s.op_dur[rows] = 0.0
        s.keep_op[rows[1:]] = False
        s.op_dur[rows[0]] = gemm * FLASH_OF_GEMM[bound]
        _drop_calls(g, rows, s.keep_call, s.gap)


def _fix_single_tensor_optimizer(g: StepGraph, s: _Fixed, bound: int) -> None:
    opt = g.op_cat == OPTIMIZER
    if not opt.any():
        return
    rows = np.flatnonzero(opt)
    total = float(g.op_dur[rows].sum())
    n = max(1, int(np.ceil(rows.size * FUSED_OPTIMIZER_LAUNCHES[bound])))
    s.op_dur[rows] = 0.0
    s.keep_op[rows[n:]] = False
    s.op_dur[rows[:n]] = total * FUSED_OPTIMIZER_GPU[bound] / n
    calls = np.unique(g.op_call[rows[n:]])
    calls = calls[~np.isin(calls, g.op_call[rows[:n]])]
    s.keep_call[calls] = False
    # the host's per-tensor work inside the optimizer step goes with its launches
    host = g.call_opt & s.keep_call
    s.gap[host] *= FUSED_OPTIMIZER_HOST[bound]


def _fix_memory_bound_kernels(g: StepGraph, s: _Fixed, bound: int) -> None:
    for j, c in enumerate(np.unique(g.op_chain[g.op_chain >= 0]).tolist()):
        rows = np.flatnonzero(g.op_chain == c)
        longest = float(s.op_dur[rows].max())
        s.op_dur[rows] = 0.0
        s.keep_op[rows[1:]] = False
        s.op_dur[rows[0]] = longest * FUSED_CHAIN[bound]
        _drop_calls(g, rows, s.keep_call, s.gap)
        if bound or j == 0:  # the compiled call's host cost: once a step (low) .. once per fused run (high)
            s.gap[g.op_call[rows[0]]] += COMPILED_CALL_NS


def _fix_launch_overhead(g: StepGraph, s: _Fixed, bound: int) -> None:
    launch = np.isin(g.call_kind, [LAUNCH, GRAPH]) & ~s.blocks
    first = np.flatnonzero(launch)[:1]
    s.gap[launch] = 0.0
    s.dur[launch] = 0.0
    if first.size:
        s.dur[first] = 10_000.0
    s.node_ns = GRAPH_NODE_NS[bound]


def _fix_compile_recompile(g: StepGraph, s: _Fixed, bound: int) -> None:
    if g.call_compile is None:
        return
    # the compiles go (mark_dynamic / dynamic=True: one compile before the steady steps), with what the
    # compiler itself ran on the device (its benchmarks, module loads); the compiled graph's launches stay
    s.gap = np.maximum(s.gap - g.call_compile, 0.0)
    s.keep_call &= ~g.call_in_compile
    s.tail = max(s.tail - g.tail_compile_ns, 0.0)
    if bound == 0 and g.call_in_region is not None:
        # low: the freshly compiled graph's first-run set-up for the new shape goes too (host stretches of
        # over FIRST_RUN_NS inside its run: cuDNN plans, cuBLAS heuristics); high: they stay
        in_run = g.call_in_region | (g.call_region_gap > 0.5 * s.gap) if g.call_region_gap is not None else g.call_in_region
        first = in_run & (s.gap > FIRST_RUN_NS)
        s.gap[first] = np.median(s.gap[g.call_in_region]) if g.call_in_region.any() else 0.0


def _fix_cudnn_autotune(g: StepGraph, s: _Fixed, bound: int) -> None:
    if g.call_trial is None:
        return
    # fixed shapes (tuned once before the steady steps) or cudnn.benchmark off: no trials, no syncs
    s.keep_call &= ~g.call_trial
    s.blocks = s.blocks & ~g.call_trial
    # a host that no longer spins in the trials' syncs runs faster (as for host_sync)
    s.gap *= HOST_AFTER_SYNCS[bound]
    s.dur[~s.blocks] *= HOST_AFTER_SYNCS[bound]
    if bound == 0:  # low: fixed shapes, the allocator's cached blocks fit again (high: benchmark off)
        alloc = g.call_kind == ALLOC
        s.dur[alloc] = 0.0
        s.blocks = s.blocks & ~alloc


def _fix_gil_contention(g: StepGraph, s: _Fixed, bound: int) -> None:
    if g.call_gil is None:
        return
    # the thread moved off the loop: the host stretches in which the launching thread waited for the lock
    # (an export: holding a GIL wait; a PyTorch trace: over GIL_WAIT_NS, the holder running through most
    # of it) shrink to what the step's other stretches take (median .. 90th percentile)
    waited = ((s.gap > GIL_WAIT_NS) & (g.call_gil > 0.5 * s.gap)) | (g.call_gil_wait > 0)
    tail_waited = (s.tail > GIL_WAIT_NS and g.tail_gil_ns > 0.5 * s.tail) or g.tail_gil_wait_ns > 0
    if waited.any() or tail_waited:
        rest = s.gap[~waited]
        typical = float(np.percentile(rest, (50, 90)[bound])) if rest.size else 0.0
        s.gap[waited] = typical
        if tail_waited:
            s.tail = typical


def _fix_gemm_below_roof(g: StepGraph, s: _Fixed, bound: int) -> None:
    if g.op_roof_ns is None:
        return
    hit = g.op_roof_ns > 0
    s.op_dur[hit] = np.minimum(s.op_dur[hit], g.op_roof_ns[hit] / GEMM_ROOF[bound])


def _fix_decode_without_kv_cache(g: StepGraph, s: _Fixed, bound: int) -> None:
    t = g.decode_tokens
    if t <= 1 or not g.op_dur.size:
        return
    floor = DECODE_KERNEL_NS[bound]
    s.op_dur = np.minimum(s.op_dur, np.maximum(s.op_dur / t, floor))  # a kernel already under the floor stays
    # every pass's GEMMs had new row counts, so cuBLAS chose their algorithms on the host each time; on the
    # batch's rows the shapes repeat (chosen once): that host work takes what the other GEMM calls' takes
    new = g.call_new_shape
    if new is not None and new.any():
        gemm_calls = np.unique(g.op_call[g.op_cat == GEMM])
        seen = gemm_calls[new[gemm_calls] == 0]
        typical = float(np.median(s.gap[seen])) if seen.size else 0.0
        s.gap = np.where(new > 0, np.maximum(s.gap - new, 0.0) + np.minimum(new, typical), s.gap)
    # the cache: torch.cat of the past K and V with the new token's, per attention op (kernels and host ops)
    att = np.flatnonzero(g.op_cat == ATTENTION)
    if not att.size:
        return
    s.op_dur[att] += 2 * floor
    launch = g.call_kind == LAUNCH
    per_launch = float(np.median(g.call_gap[launch] + g.call_dur[launch])) if launch.any() else 0.0
    np.add.at(s.gap, g.op_call[att], 2 * per_launch)


# each fix, in the order the replay applies them (a later one sees what an earlier one left)
_FIXES = (("host_sync", _fix_host_sync), ("allocator_churn", _fix_allocator_churn),
          ("pageable_memcpy", _fix_pageable_memcpy), ("input_pipeline", _fix_input_pipeline),
          ("fp32_no_tensor_cores", _fix_fp32_no_tensor_cores), ("unfused_attention", _fix_unfused_attention),
          ("single_tensor_optimizer", _fix_single_tensor_optimizer), ("memory_bound_kernels", _fix_memory_bound_kernels),
          ("decode_without_kv_cache", _fix_decode_without_kv_cache),
          ("launch_overhead", _fix_launch_overhead), ("compile_recompile", _fix_compile_recompile),
          ("cudnn_autotune", _fix_cudnn_autotune), ("gil_contention", _fix_gil_contention),
          ("gemm_below_roof", _fix_gemm_below_roof))


def _fixed(g: StepGraph, kinds: frozenset, bound: int):
    """The graph's arrays as the fixes in `kinds` leave them; bound 0: the low (best) case, 1: high."""
    s = _Fixed(g.call_gap.astype(float).copy(), g.call_dur.astype(float).copy(), g.call_blocks.copy(),
               g.op_dur.astype(float).copy(), np.ones(g.op_dur.size, dtype=bool), np.ones(g.call_gap.size, dtype=bool),
               tail=float(g.tail_ns))
    for kind, fix in _FIXES:
        if kind in kinds:
            fix(g, s, bound)
    if bound == 0 and kinds & PACED_FIXES:
        _unhindered_host(g, s)
    if kinds:  # the measured step itself is replayed at its own pace
        s.gap *= HOST_PACE[bound]
        s.dur[~s.blocks] *= HOST_PACE[bound]
    return s.gap, s.dur, s.blocks, s.op_dur, s.keep_op, s.keep_call, s.data_floor, s.node_ns, s.tail


def _unhindered_host(g: StepGraph, s: _Fixed) -> None:
    """The low bound where the fix unblocks the host: each call's host time (work before it + the call) at most
    its key's unhindered pace (call_pace), the work before it shortened first; a host time over PACE_MAX_NS is
    work of its own and stays."""
    if g.call_pace is None:
        return
    host = s.gap + s.dur
    pace = np.where(np.isnan(g.call_pace) | s.blocks | (host > PACE_MAX_NS), np.inf, g.call_pace)
    over = np.maximum(host - pace, 0.0)
    cut = np.minimum(over, s.gap)
    s.gap -= cut
    s.dur -= np.minimum(over - cut, s.dur)


def _drop_calls(g: StepGraph, rows: np.ndarray, keep_call: np.ndarray, gap: np.ndarray) -> None:
    """The launches of the kernels rows[1:] (replaced by rows[0]) go, with the host's work before them."""
    calls = np.unique(g.op_call[rows[1:]])
    calls = calls[~np.isin(calls, g.op_call[rows[:1]])]
    keep_call[calls] = False
    gap[calls] = 0.0


def replay(g: StepGraph, kinds=frozenset(), bound: int = 0) -> float:
    """The step time (ns) of the graph with the fixes in `kinds` applied (bound 0: low, 1: high)."""
    plain = not kinds and not bound  # the step as measured: replayed once per graph (each prediction starts from it)
    if plain and g.replayed_ns is not None:
        return g.replayed_ns
    host, gpu, data_floor = periods(g, kinds, bound)
    out = max(host, gpu, data_floor)
    if plain:
        g.replayed_ns = out
    return out


def periods(g: StepGraph, kinds=frozenset(), bound: int = 0) -> tuple[float, float, float]:
    """The replayed step's host period, GPU period and data floor (ns): the step time is the largest, and
    the largest is what binds it."""
    gap, dur, blocks, op_dur, keep_op, keep_call, data_floor, node_ns, tail = _fixed(g, frozenset(kinds), bound)
    bounds = np.searchsorted(g.op_call, np.arange(gap.size + 1)).tolist()
    gap_l, dur_l, block_l, keep_l = gap.tolist(), dur.tolist(), blocks.tolist(), keep_call.tolist()
    op_dur_l, keep_op_l, stream_l = op_dur.tolist(), keep_op.tolist(), g.op_stream.tolist()
    lag, node = float(g.lag_ns), float(node_ns or 0.0)
    streams: dict[int, float] = {}
    t = gpu_done = 0.0
    host_ends, gpu_ends = [], []
    for _ in range(REPEATS):
        for c in range(len(gap_l)):
            if not keep_l[c]:
                continue
            t += gap_l[c]
            for o in range(bounds[c], bounds[c + 1]):
                if not keep_op_l[o]:
                    continue
                s = stream_l[o]
                ready = t + lag if node_ns is None else 0.0
                start = max(ready, streams.get(s, 0.0) + node)
                end = start + op_dur_l[o]
                streams[s] = end
                if end > gpu_done:
                    gpu_done = end
            if block_l[c]:
                t = max(t + min(dur_l[c], RESUME_NS), gpu_done + RESUME_NS)
            else:
                t += dur_l[c]
        t += tail
        host_ends.append(t)
        gpu_ends.append(gpu_done)
    n = REPEATS - 1
    return (host_ends[-1] - host_ends[0]) / n, (gpu_ends[-1] - gpu_ends[0]) / n, data_floor


def assumes(g: StepGraph, category: str) -> str:
    """What the prediction of this category's fix assumes and what then binds the step, where the report says
    it (a KV cache for a decoder re-running its prefix: the GPU work falls by the tokens re-run, the host's
    launches stay); "" for the others."""
    if category != "decode_without_kv_cache" or g.decode_tokens <= 1:
        return ""
    kinds = frozenset((category,))
    gpu, host = [], []
    for bound in (0, 1):
        _, _, _, op_dur, keep_op, *_ = _fixed(g, kinds, bound)
        gpu.append(float(op_dur[keep_op].sum()) / 1e6)
        host.append(periods(g, kinds, bound)[0] / 1e6)
    added = 2 * int((g.op_cat == ATTENTION).sum())
    binds = ("the host's launches then bind the step" if min(host) >= max(gpu)
             else "the GPU then binds the step" if min(gpu) >= max(host) else "host and GPU then take about as long")
    return (f"a KV cache: each pass runs its new token instead of re-running {g.decode_tokens:.0f}; GPU work "
            f"{g.gpu_ns / 1e6:.2f} -> {min(gpu):.2f}-{max(gpu):.2f} ms a step, host {min(host):.2f}-{max(host):.2f} ms "
            f"with the cache's {added} concatenations; {binds}")


# finding category -> the fix the replay applies (each category names its own fix)
FIX_OF = {kind: kind for kind, _ in _FIXES}


def paced(g: StepGraph | None, category: str) -> bool:
    """Whether the prediction of this category's fix puts the host at its unhindered pace (PACE_ASSUMES)."""
    return (g is not None and category in PACED_FIXES and g.call_pace is not None
            and bool(np.isfinite(g.call_pace).any()))


def predict(g: StepGraph, categories, measured_ms: float) -> tuple[float, float] | None:
    """(low, high) step time in ms after the fixes of these finding categories; None when none of them
    is one the replay models. Where the replay of the step as measured misses the measured step time,
    the range carries that miss (its low bound scaled down by it, or its high bound up)."""
    kinds = frozenset(FIX_OF[c] for c in categories if c in FIX_OF)
    if not kinds:
        return None
    base = replay(g)
    if base <= 0:
        return None
    scale = measured_ms / (base / 1e6)
    low, high = sorted(replay(g, kinds, b) / 1e6 for b in (0, 1))
    return (low * min(1.0, scale), high * max(1.0, scale))
