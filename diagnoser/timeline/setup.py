"""One-time start-up work on a timeline: context creation, lazy module loading, first-use costs.

A profile taken from the very start of a program shows work that happens once: the first CUDA call
creates the context (often a `cudaFree(0)` or the first `cudaMalloc`, hundreds of ms), the first
launch of each kernel loads its module (CUDA lazy loading), cuDNN / cuBLAS set up workspaces on
their first call, torch.compile compiles. None of it recurs in the steady state the user cares
about, so it is measured apart and never counted as launch overhead or idle time.

A host API call is start-up work when
  - its kind is setup by nature (driver/context initialisation, module or library loading), or
  - it is not a call that waits for the device (a sync, a copy, a collective), it takes at least
    SETUP_CALL_MIN_NS while the GPU does (almost) nothing, and at least
    SETUP_OUTLIER_RATIO times the median of the calls of the same name (a first call that paid
    a one-time cost; the same call in the steady state is fast). A call made once or twice has no
    steady state of its own: its long call is start-up work. A name (other than a kernel launch)
    with more than SETUP_MAX_REPEATS such calls keeps paying: that is steady-state behaviour (an
    allocator that frees on every step), not start-up. Long launches are lazy loading or JIT of
    each kernel's first launch: no limit.
Compilation ranges (torch.compile / Inductor / Triton autotuning) count as start-up work too, and so
does the first call of an operator (a PyTorch trace's op tree) that paid a one-time cost with the GPU
idle (cuDNN / cuBLAS initialisation, lazy loading): see _first_call_ops.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import settings
from .api_kinds import API_KINDS
from .intervals import IntervalSet
from .names import name_mask
from .view import TimelineView, is_sorted, take, values_at

SETUP_CALL_MIN_NS = settings.register("timeline.setup_call_min_ns", 1_000_000, "ns", "a host call this long with the GPU idle may be one-time start-up work")
SETUP_OUTLIER_RATIO = settings.register("timeline.setup_outlier_ratio", 20, "x", "a long call is start-up work only when it takes this many times the median call of its name")
SETUP_GPU_BUSY_MAX = settings.register("timeline.setup_gpu_busy_max", 0.1, "share", "a long call is start-up work only when the GPU is busy at most this share of it")
SETUP_WARMUP_RATIO = settings.register("timeline.setup_warmup_ratio", 10, "x", "a warm-up step this many times the median steady step is start-up work as a whole (CUDA init, cuDNN benchmark, compilation inside the first iteration)")
SETUP_MAX_REPEATS = settings.register("timeline.setup_max_repeats", 5, "count", "more such calls of one name (other than launches) than this are steady-state behaviour, not start-up")
COMPILE_RANGE = re.compile(r"_compile\.compile_inner|compile_fx|call_user_compiler|"
                           r"torch/_inductor/(?:codecache|autotune|select_algorithm)|"
                           r"^(?:TorchDynamo|Inductor|AOTAutograd) compil|autotune", re.I)


@dataclass
class Setup:
    """Start-up work of one timeline (ns on the trace clock)."""

    intervals: IntervalSet     # host time inside start-up calls and compilation
    end_ns: int                # when the last of it ended (-1: none)
    span_ns: int               # from the first CUDA call or GPU activity to the last event
    top: list[tuple[str, int, int]]  # (what, calls, ns), biggest first

    @property
    def pct(self) -> float:
        return 100.0 * self.intervals.total / max(self.span_ns, 1)


def _median_by_name(codes: np.ndarray, dur: np.ndarray, n: int) -> np.ndarray:
    """Median duration per code 0..n-1 (0 where a code has no rows)."""
    out = np.zeros(n + 1, dtype=np.float64)
    # codes 0..n: as int16 where they fit, numpy's stable sort is a radix sort (7x faster on 21M calls)
    order = np.argsort(codes.astype(np.int16) if n < np.iinfo(np.int16).max else codes, kind="stable")
    sc, sd = codes[order], dur[order]
    bounds = np.searchsorted(sc, np.arange(n + 1))
    for c in range(n):
        lo, hi = bounds[c], bounds[c + 1]
        if hi > lo:
            out[c] = float(np.median(sd[lo:hi]))
    return out


FEW_NAMES = 8  # a median per name taken over that name's calls alone up to this many names; past it, one sort


def _median_of_calls(codes: np.ndarray, start: np.ndarray, end: np.ndarray, n: int, wanted: np.ndarray) -> np.ndarray:
    """Median duration per code 0..n-1 of the calls (start, end) of the `wanted` codes (the others 0): the durations
    of those calls alone are made, not of every call (8 bytes a call of 21M)."""
    if wanted.size > FEW_NAMES:
        keep = np.zeros(n + 1, dtype=bool)
        keep[wanted] = True
        rows = np.flatnonzero(take(keep, codes))
        return _median_by_name(codes[rows], end[rows] - start[rows], n)
    out = np.zeros(n + 1, dtype=np.float64)
    for c in wanted.tolist():
        rows = np.flatnonzero(codes == c)
        out[c] = float(np.median(end[rows] - start[rows]))
    return out


def _at_least(start: np.ndarray, end: np.ndarray, ns: int) -> np.ndarray:
    """end - start >= ns, a chunk of rows at a time (no durations of every row)."""
    out = np.empty(start.size, dtype=bool)
    for a in range(0, start.size, _FIRST_CHUNK):
        np.greater_equal(end[a:a + _FIRST_CHUNK] - start[a:a + _FIRST_CHUNK], ns, out=out[a:a + _FIRST_CHUNK])
    return out


def find_setup(tv: TimelineView) -> Setup:
    tl = tv.tl
    hs, he = tv.host_start, tv.host_end
    firsts = [a.min() for a in (hs, tv.gpu_start) if a.size]
    lasts = [a.max() for a in (he, tv.gpu_end) if a.size]
    r = tl.ranges
    if r.size:
        lasts.append(int(r["end_ns"].max()))
    span = int(max(lasts) - min(firsts)) if firsts and lasts else 0
    if hs.size == 0:
        return Setup(IntervalSet.of([], []), -1, span, [])
    names = tv.host_names
    codes = np.where(names.codes >= 0, names.codes, len(names.uniques))
    counts = np.bincount(codes, minlength=len(names.uniques) + 1)
    long = _at_least(hs, he, SETUP_CALL_MIN_NS.value)
    by_nature = tv.host_api == API_KINDS.index("setup")
    # calls that wait for the device by nature (syncs, copies, collectives) are never start-up work:
    # a long one waits for work, however idle the trace shows the GPU
    waits = tv.host_is("sync", "copy_sync", "copy_async", "memset", "nccl")
    cand = np.flatnonzero(long & ~by_nature & ~waits)
    del long, waits
    one_time = by_nature.copy()
    if cand.size:
        c, d = codes[cand], he[cand] - hs[cand]
        median = _median_of_calls(codes, hs, he, len(names.uniques), np.unique(c))
        outlier = (counts[c] <= 2) | (d >= SETUP_OUTLIER_RATIO.value * median[c])
        gpu = IntervalSet.of(tv.gpu_start, tv.gpu_end)
        busy = gpu.overlap(hs[cand], he[cand]) / np.maximum(d, 1)
        hit = cand[outlier & (busy <= SETUP_GPU_BUSY_MAX.value)]
        repeats = np.bincount(codes[hit], minlength=len(names.uniques) + 1)
        launch = np.isin(tv.host_api[hit], [API_KINDS.index("launch"), API_KINDS.index("graph_launch")])
        one_time[hit[launch | (repeats[codes[hit]] <= SETUP_MAX_REPEATS.value)]] = True
    rows = np.flatnonzero(one_time)
    comp = r[name_mask(r["name"], COMPILE_RANGE) & r["kind"].isin(["python", "annotation", "nvtx"]).to_numpy()] \
        if len(r) else r
    first = _first_call_ops(tv)
    starts = np.concatenate((hs[rows], comp["start_ns"].to_numpy(np.int64), first["start_ns"].to_numpy(np.int64)))
    ends = np.concatenate((he[rows], comp["end_ns"].to_numpy(np.int64), first["end_ns"].to_numpy(np.int64)))
    intervals = IntervalSet.of(starts, ends)
    top = _top_items(tv, rows, he[rows] - hs[rows], comp, first)
    return Setup(intervals, int(ends.max()) if ends.size else -1, span, top)


def _first_call_ops(tv: TimelineView) -> pd.DataFrame:
    """Operators (a PyTorch trace's op tree, outermost ops) whose FIRST call paid a one-time cost: at least
    SETUP_CALL_MIN_NS with the GPU (almost) idle, and SETUP_OUTLIER_RATIO times the median call of the
    name (or a name called at most twice): cuDNN / cuBLAS handles and plans, lazy kernel loading, the
    context created inside the first `.to('cuda')`. Only a name's first call counts: the same op slow
    in the steady state is steady-state work."""
    r = tv.tl.ranges
    is_op = (r["kind"] == "op").to_numpy() if len(r) else np.zeros(0, bool)
    if not is_op.any():
        return r.iloc[np.zeros(0, np.int64)]
    # (columns over every range, the ops' name codes in one int32 column: no row list or copy of the ops)
    start, end = r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)
    codes, n = _op_codes(r["name"], is_op)
    del is_op
    firsts, counts = _first_rows(codes, n, start)
    c = codes[firsts]
    s, d = start[firsts], end[firsts] - start[firsts]
    long = d >= SETUP_CALL_MIN_NS.value
    wanted = np.zeros(n + 1, dtype=bool)
    wanted[np.unique(c[long])] = True  # (a short first call is never one: only these names' medians are taken)
    rows = np.flatnonzero(take(wanted, codes))
    median = _median_by_name(codes[rows], end[rows] - start[rows], n)
    del rows
    outlier = (counts[c] <= 2) | (d >= SETUP_OUTLIER_RATIO.value * median[c])
    gpu = IntervalSet.of(tv.gpu_start, tv.gpu_end)
    e = s + d  # (the first calls' ends only)
    busy = gpu.overlap(s, e) / np.maximum(d, 1)
    # an op that spends its time waiting for the device (a sync, a blocking copy, a collective inside
    # it) waits for work, however idle the GPU looks: never start-up work
    w = tv.host_is("sync", "copy_sync", "copy_async", "memset", "nccl")
    waiting = IntervalSet.of(tv.host_start[w], tv.host_end[w]).overlap(s, e) / np.maximum(d, 1)
    hit = firsts[long & outlier & (busy <= SETUP_GPU_BUSY_MAX.value) & (waiting <= SETUP_GPU_BUSY_MAX.value)]
    return r.iloc[np.sort(hit)]


def _op_codes(names: pd.Series, is_op: np.ndarray) -> tuple[np.ndarray, int]:
    """Per range, the code of its name's text (0..n-1, numbered as `np.unique` of the ops' texts would: equal
    texts one code) for an op, n for a range that is no op; and n. A Categorical's codes map through its
    categories' texts (sorting every row's string was n log n string comparisons: 1.1 s at 1.78M events)."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        cat = names.array.codes
        if cat.size and int(cat[is_op].min()) >= 0:
            texts = np.empty(len(names.cat.categories), dtype=object)
            texts[:] = [str(c) for c in names.cat.categories]
            uniq, rank = np.unique(texts, return_inverse=True)
            codes = take(rank.reshape(-1).astype(np.int32), cat)
            codes[~is_op] = uniq.size
            return codes, int(uniq.size)
    op_rows = np.flatnonzero(is_op)
    uniq, inverse = np.unique(names.iloc[op_rows].astype(str).to_numpy(), return_inverse=True)
    codes = np.full(is_op.size, uniq.size, dtype=np.int32)
    codes[op_rows] = inverse.reshape(-1)
    return codes, int(uniq.size)


_FIRST_CHUNK = 1 << 16


def _first_rows(codes: np.ndarray, n: int, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per code 0..n-1 present: the row of its first call (earliest start, then table order), sorted by code;
    and the rows per code (n + 1 counts). Rows sorted by start (the schema's order) are scanned a chunk at a
    time; else one sort of every row by (code, start)."""
    if not is_sorted(start):
        order = np.lexsort((start, codes))
        sc = codes[order]
        head = np.concatenate(([True], sc[1:] != sc[:-1]))
        firsts = order[head & (sc < n)]
        return firsts, np.bincount(codes, minlength=n + 1)
    first = np.full(n + 1, -1, dtype=np.int64)
    counts = np.zeros(n + 1, dtype=np.int64)
    for i in range(0, codes.size, _FIRST_CHUNK):
        u, at, k = np.unique(codes[i:i + _FIRST_CHUNK], return_index=True, return_counts=True)
        counts[u] += k
        new = first[u] < 0
        first[u[new]] = i + at[new]
    first = first[:n]
    return first[first >= 0], counts


def _top_items(tv: TimelineView, rows: np.ndarray, dur: np.ndarray, comp: pd.DataFrame,
               first: pd.DataFrame | None = None) -> list[tuple[str, int, int]]:
    """What the start-up time went to, by API name (plus compilation and first op calls), biggest first (dur: the
    host calls' `rows`' durations)."""
    items: dict[str, list[int]] = {}
    names = values_at(tv.tl.host["name"], rows)
    for k, ns in enumerate(dur.tolist()):
        it = items.setdefault(str(names[k]), [0, 0])
        it[0] += 1
        it[1] += ns
    if len(comp):
        items["compilation (torch.compile / Inductor)"] = [len(comp), IntervalSet.of(comp["start_ns"], comp["end_ns"]).total]
    if first is not None and len(first):
        items["first calls of ops (cuDNN/cuBLAS set-up, lazy loading)"] = [
            len(first), IntervalSet.of(first["start_ns"], first["end_ns"]).total]
    return sorted(((k, v[0], v[1]) for k, v in items.items()), key=lambda t: (-t[2], t[0]))


def setup_text(setup: Setup, limit: int = 3) -> str:
    """`cudaFree 6009 ms (1 call), cudaLaunchKernel 3056 ms (1 call), ...` for messages."""
    parts = [f"{what} {ns / 1e6:.0f} ms" + (f" ({n} call{'s' if n != 1 else ''})" if n else "")
             for what, n, ns in setup.top[:limit]]
    return ", ".join(parts)


def with_warmup(setup: Setup, steps) -> Setup:
    """Count the warm-up step(s) as start-up work when they dwarf the steady steps: the first
    iteration that initialises CUDA, benchmarks cuDNN algorithms or compiles is start-up as a whole,
    whatever calls it is made of."""
    if steps.warmup == 0 or steps.steady.size == 0:
        return setup
    idx = steps.steady
    steady = float(np.median(steps.end[idx] - steps.start[idx]))
    ws, we = steps.start[:steps.warmup], steps.end[:steps.warmup]
    warm = int((we - ws).sum())
    if steady <= 0 or warm < float(SETUP_WARMUP_RATIO.value) * steady:
        return setup
    intervals = IntervalSet.of(np.concatenate((setup.intervals.starts, ws)), np.concatenate((setup.intervals.ends, we)))
    item = (f"warm-up step ({warm / steady:.0f}x the steady {steady / 1e6:.1f} ms step)", 0, warm)
    top = sorted([item, *setup.top], key=lambda t: (-t[2], t[0]))
    return Setup(intervals, max(setup.end_ns, int(we.max())), setup.span_ns, top)
