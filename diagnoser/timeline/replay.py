"""The step time after a fix: one steady step replayed on its dependency graph, with the cause's
events removed or changed as the fix would.

`step_graph()` (at measure time, from the tables) reduces the median steady step to a `StepGraph`
(step_graph.py; where each fix acts: fix_marks.py): the host's CUDA calls in order (the host work
between them kept as measured), the GPU work each call enqueued, and what each fix acts on. `predict()` replays it: the host walks its calls, each
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

from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from ..native import native_module
from .kernels import ATTENTION, GEMM, OPTIMIZER
from .step_graph import (ALLOC, COPY, FIRST_RUN_NS, GRAPH, LAUNCH, SYNC, StepGraph, graph_of_step, shared_inputs,
                         tensor_core_speedup, unhindered_pace)

REPEATS = 4
RESUME_NS = 2_000  # a blocking call that finds the GPU done returns after about this long
# what each fix does, as (low, high) of the factor it applies (module doc)
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
# the fixes after which the BEFORE's host pace per call is not the AFTER's: the step waited on the GPU (the host ran
# ahead behind a long queue), or the host ran cuDNN's trials or the first run of freshly compiled graphs
PACED_FIXES = frozenset({"unfused_attention", "cudnn_autotune", "compile_recompile"})
# a call's host time (work before it + the call) over this is host work of its own (input preprocessing, Python
# compute), not a pace per call: the pace leaves it as it is
PACE_MAX_NS = 1_000_000
# what a prediction of those fixes assumes of the host (the report prints it after the range)
PACE_ASSUMES = ("low: the host at its unhindered pace, each op's calls at the faster quartile of those not held by "
                "a sync, a full launch queue, a compile or a trial")


CANDIDATES = 5  # steps around the median built as graphs, the closest replay kept


def step_graph(tv, steps, at_roof=None) -> StepGraph | None:
    """The steady step whose replay comes closest to the median step time (of up to CANDIDATES steps
    around the median: a host that runs ahead of the GPU records step ranges that do not match the
    GPU's), as a StepGraph (step_graph.py); None without steps, calls or GPU work. at_roof: (gpu rows, ns)
    of the kernels the compute gap's fix brings to their roof, at 100% of it (roofline.py)."""
    idx = steps.steady
    if not idx.size:
        return None
    dur = (steps.end[idx] - steps.start[idx]).astype(float)
    order = idx[np.argsort(np.abs(dur - np.median(dur)), kind="stable")][:CANDIDATES]
    shared = shared_inputs(tv, at_roof)
    best, err, built = None, None, []
    for i in order.tolist():
        g = graph_of_step(tv, steps, int(i), shared)
        if g is None:
            continue
        built.append(g)
        e = abs(replay(g) - float(np.median(dur)))
        if err is None or e < err:
            best, err = g, e
    if best is not None:
        best.tc_speedup = tensor_core_speedup(tv.tl.devices)
        best.call_pace = unhindered_pace(best, built)
    return best


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
    the largest is what binds it. Kept per (fixes, bound) once run: a report asks for some twice."""
    key = (frozenset(kinds), bound)
    got = g.periods_run.get(key)
    if got is None:
        got = g.periods_run[key] = _periods(g, *_fixed(g, key[0], bound))
    return got


def _periods(g: StepGraph, gap, dur, blocks, op_dur, keep_op, keep_call, data_floor, node_ns, tail):
    # The same float arithmetic in the same order as one pass over every call (t += gap; its ops; t += dur), with
    # the work that does not depend on t done once: the kept calls cut into runs that end at a blocking call
    # (where the GPU's progress sets t), each run's host times one C-level running sum, its kept ops a flat list.
    bounds = np.searchsorted(g.op_call, np.arange(gap.size + 1))
    kept_before = np.concatenate(([0], np.cumsum(keep_op)))[bounds]  # per call: kept ops before its first
    calls = np.flatnonzero(keep_call)
    first, count = kept_before[calls], kept_before[calls + 1] - kept_before[calls]
    visit = np.arange(int(count.sum())) + np.repeat(first - (np.cumsum(count) - count), count)  # kept ops, in call order
    op_call = np.repeat(np.arange(calls.size), count)  # each visited op's kept call
    stream_ids, op_stream = np.unique(g.op_stream[keep_op], return_inverse=True)
    stream_v, dur_v = op_stream.reshape(-1)[visit], op_dur[keep_op][visit]
    steps = np.empty(2 * calls.size)  # gap, dur of each kept call
    steps[0::2], steps[1::2] = gap[calls], dur[calls]
    lag, node, queued = float(g.lag_ns), float(node_ns or 0.0), node_ns is None
    native = native_module()
    if native is not None:  # the loop below in C, on the same runs as arrays (native/replay_periods.c)
        ends = np.append(np.flatnonzero(blocks[calls]), calls.size)  # each run's last call (calls.size: none blocks)
        starts = np.concatenate(([0], ends[:-1] + 1))
        blocking = ends < calls.size
        op_hi = np.searchsorted(op_call, np.where(blocking, ends + 1, ends))
        op_lo = np.concatenate(([0], op_hi[:-1]))
        block_dur = np.zeros(ends.size)
        block_dur[blocking] = dur[calls[ends[blocking]]]
        op_at = 1 + 2 * (op_call - np.repeat(starts, op_hi - op_lo))
        host, gpu = native.replay_periods(
            steps, (2 * starts).astype(np.int64), np.where(blocking, 2 * ends + 1, 2 * ends).astype(np.int64),
            op_lo.astype(np.int64), op_hi.astype(np.int64), blocking.astype(np.int8), block_dur,
            stream_v.astype(np.int64), op_at.astype(np.int64), np.asarray(dur_v, np.float64), stream_ids.size,
            lag, node, queued, float(tail), REPEATS, float(RESUME_NS))
        return host, gpu, data_floor
    runs, a, o = [], 0, 0
    for j in np.flatnonzero(blocks[calls]).tolist() + [calls.size]:
        blocking = j < calls.size
        hi = int(np.searchsorted(op_call, j + 1 if blocking else j))  # the ops of calls a..j
        at = 1 + 2 * (op_call[o:hi] - a)  # each op's call's time after its gap, in the run's running sum
        runs.append((steps[2 * a:2 * j + 1 if blocking else 2 * j].tolist(),
                     list(zip(stream_v[o:hi].tolist(), at.tolist(), dur_v[o:hi].tolist())),
                     float(dur[calls[j]]) if blocking else None))
        a, o = j + 1, hi
    streams = [0.0] * stream_ids.size  # per stream: when its last op ends
    t = gpu_done = 0.0
    host_ends, gpu_ends = [], []
    for _ in range(REPEATS):
        for run_steps, run_ops, block_dur in runs:
            times = list(accumulate(run_steps, initial=t))
            for s, at, d in run_ops:
                ready = times[at] + lag if queued else 0.0
                start = streams[s] + node
                if not start > ready:  # max(ready, start), NaN as max() gives it
                    start = ready
                end = start + d
                streams[s] = end
                if end > gpu_done:
                    gpu_done = end
            t = times[-1]
            if block_dur is not None:
                t = max(t + min(block_dur, RESUME_NS), gpu_done + RESUME_NS)
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
