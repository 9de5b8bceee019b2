"""Training/inference steps on a Timeline: find them, map them to GPU time, drop warm-up.

Steps come from the best marker available, in this order:
  1. ProfilerStep#N annotations (torch.profiler's `prof.step()`),
  2. NVTX ranges named like a step (`step_3`, `iter 3`, `train_step#3`),
  3. the repeating optimizer step (`Optimizer.step#...` annotation or an NVTX `optimizer` range):
     one step ends where each optimizer step ends,
  3b. graph replays (cudaGraphLaunch / hipGraphLaunch) when they launch most of the GPU time: one
     step per replay,
  4. a repeating kernel: the kernel launched at the steadiest, longest period (once per step),
     so a trace with no markers at all is still cut into steps.
A marker gives a host-time range; the step's window on the GPU ends when both the host range and
the GPU work it launched have finished, so a host running ahead of the GPU does not shorten steps.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import settings
from .tables import Timeline
from .intervals import IntervalSet
from .names import COMM_KERNEL, name_mask, optimizer_ranges
from .view import TimelineView

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
# `step_3`, `iter 3`, `train_step#3`, a span of iterations (`Step 30 to 40`), or a serving engine's
# bracketed step (`step[DECODE bs=32]`); NVTX ranges or torch user annotations (record_function)
NVTX_STEP = re.compile(r"^(?:train[_ ]?|training[_ ]?|eval[_ ]?|infer(?:ence)?[_ ]?|decode[_ ]?|prefill[_ ]?)?"
                       r"(?:step|iter|iteration)s?(?:[ _#:.-]?(\d+)(?:\s*(?:to|-|\.\.)\s*\d+)?|\[[^\]]*\]|\([^)]*\))$", re.I)

# Phases a step is cut into when the code annotates them (NVTX names, torch annotations, ops).
PHASE_PATTERNS = {
    "data": re.compile(r"^(?:data|data[_ ]?load(?:ing|er)?|load[_ ]?batch|get[_ ]?batch|input|batch|"
                       r"preprocess(?:ing)?)$|^enumerate\(DataLoader\)|DataLoader.*__next__", re.I),
    "forward": re.compile(r"^(?:forward|fwd|forward[_ ]pass)$|^DistributedDataParallel\.forward$", re.I),
    "backward": re.compile(r"^(?:backward|bwd|backward[_ ]pass)$|^autograd::engine::evaluate_function", re.I),
    "optimizer": re.compile(r"^(?:optimizer|optim|optimizer[_ .]step|opt[_ .]step)$|^Optimizer\.(?:step|zero_grad)#", re.I),
}

MIN_PATTERN_OCCURRENCES = settings.register("timeline.min_pattern_occurrences", 4, "count", "a kernel must repeat this often to define steps when the trace has no step markers")
MAX_PATTERN_PERIOD_CV = settings.register("timeline.max_pattern_period_cv", 0.2, "ratio", "a repeating kernel defines steps only when its launch period is this steady (std / mean of its launch "
    "intervals, up to the first quarter of them left out as warm-up)")


class NumberedLabels(Sequence):
    """"period 0", "period 1", ...: the labels of inferred steps, made when read (a trace of tiny kernels
    can cut into millions of periods: a string each was ~65 bytes per step held for the whole run)."""

    def __init__(self, prefix: str, count: int, first: int = 0):
        self.prefix, self.count, self.first = prefix, count, first

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i):
        if isinstance(i, slice):
            lo, hi, step = i.indices(self.count)
            if step == 1:
                return NumberedLabels(self.prefix, max(0, hi - lo), self.first + lo)
            return [self[j] for j in range(lo, hi, step)]
        i = i.__index__()
        if i < 0:
            i += self.count
        if not 0 <= i < self.count:
            raise IndexError("step label index out of range")
        return f"{self.prefix}{self.first + i}"

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"NumberedLabels({self.prefix!r}, {self.count}, {self.first})"


@dataclass
class Steps:
    """Steps of one Timeline. Arrays are per step, all steps (warm-up included)."""

    method: str                 # profiler_step | nvtx | optimizer | graph_launch | kernel_pattern | none
    labels: Sequence[str]       # the step numbers/names as recorded (a list, or NumberedLabels)
    host_start: np.ndarray      # host-side range of each step (ns)
    host_end: np.ndarray
    start: np.ndarray           # window of each step on the GPU-completion clock (ns)
    end: np.ndarray
    warmup: int                 # how many leading steps are warm-up (excluded from steady state)
    notes: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return int(self.start.size)

    @property
    def steady(self) -> np.ndarray:
        """Indices of the steady-state steps."""
        return np.arange(self.warmup, self.count)

    @property
    def steady_span(self) -> tuple[int, int]:
        """From the first steady step's start to the last one's end."""
        idx = self.steady
        return int(self.start[idx[0]]), int(self.end[idx[-1]])

    @property
    def steady_windows(self) -> IntervalSet:
        """The steady steps' windows; time between step ranges (start-up, evaluation) is not in them."""
        idx = self.steady
        return IntervalSet.of(self.start[idx], self.end[idx])


def _non_nested(df: pd.DataFrame) -> pd.DataFrame:
    """Drop ranges lying inside an earlier kept range (re-entrant or duplicated markers)."""
    df = df.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable")
    keep, last_end = [], None
    for s, e in zip(df["start_ns"].to_numpy(), df["end_ns"].to_numpy()):
        if last_end is not None and e <= last_end:
            keep.append(False)
            continue
        keep.append(True)
        last_end = e
    return df[np.array(keep, dtype=bool)] if len(df) else df


def _marker_steps(tl: Timeline) -> tuple[str, pd.DataFrame] | None:
    r = tl.ranges
    prof = r[(r["kind"] == "annotation").to_numpy() & name_mask(r["name"], PROFILER_STEP)]
    if len(prof) >= 1:
        return "profiler_step", _non_nested(prof)
    nvtx = r[r["kind"].isin(["nvtx", "annotation"]).to_numpy() & name_mask(r["name"], NVTX_STEP)]
    if len(nvtx) >= 1:
        return "nvtx", _non_nested(nvtx)
    return None


def _optimizer_steps(tl: Timeline) -> pd.DataFrame | None:
    opt = _non_nested(optimizer_ranges(tl))
    if len(opt) < 2:
        return None
    ends = opt["end_ns"].to_numpy()
    first = _first_activity(tl)
    starts = np.concatenate(([min(first, int(opt["start_ns"].iloc[0]))], ends[:-1]))
    return pd.DataFrame({"name": [f"optimizer step {i}" for i in range(len(ends))],
                         "start_ns": starts, "end_ns": ends})


def _first_activity(tl: Timeline) -> int:
    cands = [int(t["start_ns"].min()) for t in (tl.gpu, tl.host) if len(t)]
    return min(cands) if cands else 0


GRAPH_KERNEL_SHARE = settings.register("timeline.graph_kernel_share", 0.5, "share", "graph replays (cudaGraphLaunch) define steps when they launch at least this share of GPU time")


def _graph_launch_steps(tv: TimelineView) -> pd.DataFrame | None:
    """One step per graph replay (cudaGraphLaunch / hipGraphLaunch), when replays launch most GPU
    time: a replayed graph is one iteration, and its kernels share one launch call, so their launch
    times cannot cut steps."""
    graph_rows = np.flatnonzero(tv.host_is("graph_launch"))
    if graph_rows.size == 0:
        return None
    row = tv.launch_row
    dur = tv.gpu_end - tv.gpu_start
    from_graph = np.isin(row, graph_rows)
    if dur[from_graph].sum() < GRAPH_KERNEL_SHARE.value * max(int(dur.sum()), 1):
        return None
    # on the GPU clock: a replay starts with its first kernel and lasts until the next replay's
    # first kernel (the last one until its last kernel ends); replays with no kernel are skipped
    rows = np.flatnonzero(from_graph)
    g = row[rows]
    order = np.argsort(g, kind="stable")
    g, rows = g[order], rows[order]
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    starts = np.minimum.reduceat(tv.gpu_start[rows], first)
    last_end = np.maximum.reduceat(tv.gpu_end[rows], first)
    order = np.argsort(starts, kind="stable")
    starts, last_end = starts[order], last_end[order]
    ends = np.concatenate((np.maximum(starts[1:], last_end[:-1]) if starts.size > 1 else [], last_end[-1:]))
    ends = np.maximum(ends.astype(np.int64), starts)
    return pd.DataFrame({"name": [f"graph replay {i}" for i in range(starts.size)],
                         "start_ns": starts, "end_ns": ends})


# _steady_cv: cuts whose cv from running sums lies this close (relative) to the smallest are
# recomputed exactly, at most this many (running sums in long double, shifted by the mean, err
# below 1e-15 relative for 1e7 intervals: the exact minimum is always among them)
STEP_END_CHUNK = 1 << 16  # GPU rows placed in their steps at a time (when each step's launched work ends)
CV_TIE_WINDOW = 1e-11
CV_EXACT_CUTS = 16


def _steady_cv_exact(rest: np.ndarray) -> float:
    if rest.size >= 2 and rest.mean() > 0:
        return float(rest.std() / rest.mean())
    return float("inf")


def _steady_cv(d: np.ndarray) -> float:
    """std / mean of the launch intervals once warm-up is over: the smallest over leaving out up to the
    first quarter of them (slow first tokens while plans and caches are built must not disqualify the
    kernel that marks every step; a period that alternates all along stays unsteady).

    Linear: every cut's cv from suffix sums of x and x^2 (shifted by the mean, in long double), then the
    few cuts within CV_TIE_WINDOW of the smallest recomputed exactly as numpy does, so the value is the
    one the direct minimum over all cuts gives."""
    cuts = d.size // 4 + 1
    if d.size < 2:
        return float("inf")
    m = d.size - np.arange(cuts)
    # which cuts numpy would take (size >= 2, mean > 0): exact for integer intervals (int64 sums)
    total = np.cumsum(d[::-1])[::-1][:cuts]
    valid = (m >= 2) & (total > 0)
    if not valid.any():
        return float("inf")
    y = d.astype(np.longdouble)
    shift = y[cuts - 1:].mean()
    y -= shift
    s1 = np.cumsum(y[::-1])[::-1][:cuts]
    s2 = np.cumsum((y * y)[::-1])[::-1][:cuts]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mean_y = s1 / m
        cv = np.sqrt(np.maximum(s2 / m - mean_y * mean_y, 0)) / (mean_y + shift)
    cv = np.where(valid & np.isfinite(cv), cv, np.inf).astype(np.float64)
    lo = float(cv.min())
    if not np.isfinite(lo):  # (sums beyond long double: the direct way, at the valid cuts)
        near = np.flatnonzero(valid)[:CV_EXACT_CUTS]
    else:
        near = np.flatnonzero(cv <= lo + lo * CV_TIE_WINDOW)
        near = near[np.lexsort((near, cv[near]))][:CV_EXACT_CUTS]
    return min(_steady_cv_exact(d[k:]) for k in np.sort(near))


def _kernel_pattern_steps(tv: TimelineView) -> pd.DataFrame | None:
    """Cut at the launches of the kernel that repeats at the steadiest, longest period.

    The period is judged on the GPU clock (a host running ahead launches in irregular bursts, the
    GPU executes at a steady pace); the cuts are the anchor kernel's launch calls on the host.
    """
    kern = tv.is_kernel & ~tv.gpu_names.mask(COMM_KERNEL)
    if not kern.any():
        return None
    launched, known = tv.launch_ns, tv.launch_known
    if known[kern].any():
        kern &= known  # a cut needs the host time of the launch
    # else: no launch call in the trace at all (no CUDA API tracing): cut on the GPU clock
    names = tv.gpu_names
    rows = np.flatnonzero(kern & (names.codes >= 0))  # (a kernel without a name is no anchor)
    # group by the name as text, in sorted order
    distinct, text_code = np.unique(np.array([str(u) for u in names.uniques], dtype=object), return_inverse=True)
    code = text_code[names.codes[rows]]
    s, t = tv.gpu_start[rows], launched[rows]
    by_s, by_t = np.lexsort((s, code)), np.lexsort((t, code))
    bounds = np.searchsorted(code[by_s], np.arange(distinct.size + 1))
    best = None
    for c in range(distinct.size):
        lo, hi = bounds[c], bounds[c + 1]
        if hi - lo < MIN_PATTERN_OCCURRENCES.value:
            continue
        d = np.diff(s[by_s[lo:hi]])[1:]  # the first interval holds warm-up
        if d.size < 2 or d.mean() <= 0:
            continue
        cv = _steady_cv(d)
        if cv > MAX_PATTERN_PERIOD_CV.value:
            continue
        key = (float(np.median(d)), -cv, str(distinct[c]))
        if best is None or key > best[0]:
            best = (key, t[by_t[lo:hi]])
    if best is None:
        return None
    t = best[1]
    return pd.DataFrame({"start_ns": t[:-1], "end_ns": t[1:]})  # named "period i" by find_steps


def find_steps(tv: TimelineView, setup_end_ns: int = -1) -> Steps:
    """Cut a Timeline into steps (see module doc) and place each on the GPU-completion clock.

    `setup_end_ns`: when one-time start-up work ended (timeline/setup.py): a trace without steps is
    analysed from there on (steps found otherwise drop their first step as warm-up, as always)."""
    tl = tv.tl
    notes: list[str] = []
    found = _marker_steps(tl)
    if found is not None:
        method, ranges = found
    else:
        ranges = _optimizer_steps(tl)
        method = "optimizer"
        if ranges is None:
            ranges = _graph_launch_steps(tv)
            method = "graph_launch"
        if ranges is None:
            ranges = _kernel_pattern_steps(tv)
            method = "kernel_pattern"
        if ranges is None:
            method = "none"
            lo = _first_activity(tl)
            hi = max([int(t["end_ns"].max()) for t in (tl.gpu, tl.host) if len(t)] or [lo])
            after = tv.gpu_start[tv.gpu_start >= setup_end_ns] if setup_end_ns >= 0 else tv.gpu_start[:0]
            if after.size:  # the steady part: from the end of start-up work on
                lo = max(lo, setup_end_ns)
                ranges = pd.DataFrame({"name": ["after start-up"], "start_ns": [lo], "end_ns": [hi]})
                notes.append("no step markers and no repeating pattern: the trace after its one-time start-up "
                             "work is treated as one step")
            else:
                ranges = pd.DataFrame({"name": ["whole trace"], "start_ns": [lo], "end_ns": [hi]})
                notes.append("no step markers and no repeating pattern: the whole trace is treated as one step")
        else:
            notes.append(f"no ProfilerStep or NVTX step ranges: steps inferred from the {method.replace('_', ' ')}")
    hs = ranges["start_ns"].to_numpy(dtype=np.int64)
    he = ranges["end_ns"].to_numpy(dtype=np.int64)
    labels = (NumberedLabels("period ", len(ranges)) if "name" not in ranges
              else [str(x) for x in ranges["name"].tolist()])

    # GPU work launched inside each host step range; the step is over when that work is done
    last_gpu = np.full(hs.size, np.iinfo(np.int64).min, dtype=np.int64)
    for a in range(0, tv.gpu_start.size, STEP_END_CHUNK):  # (a chunk of GPU rows at a time: no launch times of all)
        rows = slice(a, a + STEP_END_CHUNK)
        launched = tv.launch_ns_of(rows)
        idx = np.searchsorted(hs, launched, side="right")
        idx -= 1
        inside = idx >= 0
        np.maximum(idx, 0, out=idx)  # (rows before the first step are not inside)
        inside &= tv.launch_known[rows]
        inside &= launched < he[idx]
        if inside.any():
            np.maximum.at(last_gpu, idx[inside], tv.gpu_end[rows][inside])
    end = np.maximum(he, last_gpu)
    end = np.maximum.accumulate(end)
    start = np.empty_like(hs)
    start[0] = hs[0]
    if hs.size > 1:
        start[1:] = np.maximum(end[:-1], hs[1:])
    warmup = 1 if hs.size > 1 else 0
    if warmup == 0:
        notes.append("only one step: the warm-up step could not be excluded")
    return Steps(method, labels, hs, he, start, end, warmup, notes)


def phase_ms(tl: Timeline, steps: Steps) -> dict[str, float]:
    """Mean host time per steady step spent in each annotated phase (only phases present)."""
    out: dict[str, float] = {}
    r = tl.ranges
    idx = steps.steady
    for phase, pat in PHASE_PATTERNS.items():
        kinds = ["nvtx", "annotation"] if phase != "backward" else ["nvtx", "annotation", "op"]
        sel = r[name_mask(r["name"], pat) & r["kind"].isin(kinds).to_numpy()]
        if sel.empty:
            continue
        ivs = IntervalSet.of(sel["start_ns"].to_numpy(), sel["end_ns"].to_numpy())
        per_step = ivs.overlap(steps.host_start[idx], steps.host_end[idx])
        if per_step.sum() > 0:
            out[phase] = float(per_step.mean()) / 1e6
    return out
