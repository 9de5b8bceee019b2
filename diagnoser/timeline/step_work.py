"""What the code controls, apart from what the machine does, per steady step: the GPU's work (kernel
and copy time) and the host's own work (the step's host range less the time it waited for the GPU:
in syncs, blocking copies, frees, and in launches held by a full launch queue), each as a median over
the steady steps with its step-to-step spread. The regression gate of `compare` judges them
separately (comparison/noise_gate.py): GPU work is tight from run to run; host work and wall time are not.
Pure."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..ordering import is_sorted
from .intervals import IntervalSet, union_overlap
from .tables import fits_int32
from .view import values_at

WAIT_KINDS = ("sync", "copy_sync", "free")
LAUNCH_KINDS = ("launch", "graph_launch", "copy_async", "memset")


def _spread_pct(x: np.ndarray) -> float:
    """Standard error of the median of per-step values, % of the median (1.4826 MAD / sqrt(n) x 1.25)."""
    med = float(np.median(x))
    if x.size < 2 or med <= 0:
        return 0.0
    mad = 1.4826 * float(np.median(np.abs(x - med)))
    return 100.0 * 1.25 * mad / np.sqrt(x.size) / med


def step_work(tv, steps) -> dict:
    """gpu_work_ms_per_step / host_work_ms_per_step (medians over the steady steps) and their spreads."""
    idx = steps.steady
    if idx.size == 0:
        return {}
    out: dict = {}
    gs, ge = tv.gpu_start, tv.gpu_end
    if gs.size:
        busy = IntervalSet.of(gs, ge)
        gpu = busy.overlap(steps.start[idx], steps.end[idx]).astype(float) / 1e6
        out["gpu_work_ms_per_step"] = float(np.median(gpu))
        out["gpu_work_spread_pct"] = _spread_pct(gpu)
    hs, he = tv.host_start, tv.host_end
    if hs.size:
        launch = tv.host_is(*LAUNCH_KINDS)
        if launch.any():  # (whole durations, exact as int32 or int64: np.percentile reads either as float64 would)
            ld, n = np.empty(int(np.count_nonzero(launch)), dtype=np.int32), 0  # (int64 once one does not fit)
            for a in range(0, hs.size, WAIT_CHUNK):  # (a chunk of calls at a time: no start and end copied whole)
                m = launch[a:a + WAIT_CHUNK]
                d = he[a:a + WAIT_CHUNK][m] - hs[a:a + WAIT_CHUNK][m]
                if ld.dtype != np.int64 and not fits_int32(d):
                    ld = ld.astype(np.int64)
                ld[n:n + d.size] = d
                n += d.size
            cap = max(3.0 * float(np.percentile(ld, 25, overwrite_input=True)), 20_000.0)
            del ld
        else:
            cap = 20_000.0
        waits = tv.host_is(*WAIT_KINDS)
        for a in range(0, hs.size, WAIT_CHUNK):  # the launches past the cap, a chunk of calls at a time
            d = he[a:a + WAIT_CHUNK] - hs[a:a + WAIT_CHUNK]
            waits[a:a + WAIT_CHUNK] |= launch[a:a + WAIT_CHUNK] & (d > cap)
        q0, q1 = steps.host_start[idx], steps.host_end[idx]
        if is_sorted(hs):  # (calls in start order: the waits merged a chunk at a time, not copied out whole)
            blocked = union_overlap(((hs[a:a + WAIT_CHUNK][waits[a:a + WAIT_CHUNK]], he[a:a + WAIT_CHUNK][waits[a:a + WAIT_CHUNK]])
                                     for a in range(0, hs.size, WAIT_CHUNK)), q0, q1)
        else:
            blocked = IntervalSet.of(hs[waits], he[waits]).overlap(q0, q1)
        host = ((q1 - q0).astype(float) - blocked) / 1e6
        out["host_work_ms_per_step"] = float(np.median(host))
        out["host_work_spread_pct"] = _spread_pct(host)
    return out


WAIT_CHUNK = 1 << 16  # host calls compared with the launch cap at a time (no duration column of every call)
GAP_STEPS = 50  # steady steps read for the host gaps (the first ones)
GAP_EVENTS = 400_000  # ... and no more ops and calls than this in them (halving the steps read)


def _name_codes(op_names: pd.Series, op_rows: np.ndarray, call_names: pd.Series, calls: np.ndarray) -> tuple:
    """The names of the ops then the calls picked: int32 codes into one array of both Categoricals' names (and
    that array), or the names themselves (and None) where a column is no Categorical or a picked name is missing."""
    if isinstance(op_names.dtype, pd.CategoricalDtype) and isinstance(call_names.dtype, pd.CategoricalDtype):
        a, b = op_names.array.codes[op_rows], call_names.array.codes[calls]
        if not ((a < 0).any() or (b < 0).any()):
            texts = np.concatenate((np.asarray(op_names.cat.categories, dtype=object),
                                    np.asarray(call_names.cat.categories, dtype=object)))
            return np.concatenate((a.astype(np.int32), b.astype(np.int32) + len(op_names.cat.categories))), texts
    return np.concatenate((values_at(op_names, op_rows), values_at(call_names, calls))), None


def host_gaps(tv, steps) -> dict:
    """The host's time between ops, position by position, for the regression gate (comparison/noise_gate.py):
    in each steady step, the host's busy time is the union of the CPU operators and runtime calls of every
    thread; each gap in it is keyed by what ends it (the name of the op or call that starts next and its
    occurrence in the step, `aten::linear#3`); a gap where one thread hands over to another (the main
    thread waiting for the autograd thread) is left out: that is waiting, not work. Per key, the shortest
    gap over the steady steps (extra Python between two ops adds to every step; a wake-up or a preemption
    does not come back each step). {} without op ranges (Nsight Systems without NVTX: no ops to be between).
    Chart data only: {steps, step_ms (median host range of a step), gaps_us {key: us}}."""
    tl = tv.tl
    ranges = tl.ranges
    idx = steps.steady[:GAP_STEPS]
    if idx.size == 0 or not len(ranges):
        return {}
    is_op = (ranges["kind"] == "op").to_numpy()  # (masks over the ranges: no column of every op is gathered)
    if not is_op.any():
        return {}
    rs, hs = ranges["start_ns"].to_numpy(np.int64), tv.host_start
    while True:  # the first steady steps, as many as hold GAP_EVENTS events at most (two at least)
        lo, hi = int(steps.host_start[idx].min()), int(steps.host_end[idx].max())
        in_ops, in_host = is_op & (rs >= lo) & (rs < hi), (hs >= lo) & (hs < hi)
        if idx.size <= 2 or int(in_ops.sum() + in_host.sum()) <= GAP_EVENTS:
            break
        idx = idx[: idx.size // 2]
    op_rows = np.flatnonzero(in_ops)
    del is_op, in_ops
    start = np.concatenate((rs[op_rows], hs[in_host]))
    end = np.concatenate((ranges["end_ns"].to_numpy(np.int64)[op_rows], tv.host_end[in_host]))
    # the threads as they are (only compared for equality; int64 both: the schema's, no Python int each)
    thread = np.concatenate((ranges["thread"].to_numpy(np.int64)[op_rows], tl.host["thread"].to_numpy()[in_host].astype(np.int64)))
    names, texts = _name_codes(ranges["name"], op_rows, tl.host["name"], in_host)
    order = np.argsort(start, kind="stable")
    start = start[order]  # (one at a time: each unsorted column freed as its sorted copy replaces it)
    end = end[order]
    thread = thread[order]
    names = names[order]
    if texts is not None and all(type(t) is str for t in texts):
        joint, distinct = pd.factorize(texts)  # (a name in both Categoricals gets one code: a few thousand texts)
        counted, shortest = shortest_gaps(steps, idx, start, end, thread, joint[names], distinct)
    else:  # keys are texts: names that print alike must share one
        counted, shortest = shortest_gaps_by_text(steps, idx, start, end, thread,
                                                  texts[names] if texts is not None else names)
    if not counted:
        return {}
    span = (steps.host_end[idx] - steps.host_start[idx]).astype(float) / 1e6
    return {"steps": counted, "step_ms": float(np.median(span)),
            "gaps_us": {k: shortest[k] / 1e3 for k in sorted(shortest)}}


def shortest_gaps(steps, idx, start, end, thread, code, distinct) -> tuple[int, dict]:
    """(steps read, {"name#n": shortest gap ns}) of host_gaps, in numpy: the events (start order) by name code
    into `distinct` (str names), each key as code * 2**32 + n until the texts of the keys left are made."""
    keys = vals = None  # the keys every step so far has, sorted, and their shortest gaps
    counted = 0
    for a, b, first, prev_end, prev_thread in _step_windows(steps, idx, start, end, thread):
        c = code[a:b][first]
        by_code = np.argsort(c, kind="stable")
        sc = c[by_code]
        head = np.flatnonzero(np.concatenate(([True], sc[1:] != sc[:-1])))
        n = np.empty(c.size, np.int64)  # each start's occurrence of its name in the step, from 1
        n[by_code] = np.arange(c.size) - np.repeat(head, np.diff(np.append(head, c.size))) + 1
        own = thread[a:b][first] == prev_thread  # not a hand-over from another thread
        gap = np.maximum(start[a:b][first] - prev_end, 0)[own]
        k = c[own].astype(np.int64) * (1 << 32) + n[own]  # (occurrences per step < 2**32)
        if counted:
            keys, at_old, at_new = np.intersect1d(keys, k, assume_unique=True, return_indices=True)
            vals = np.minimum(vals[at_old], gap[at_new])
        else:
            order = np.argsort(k)
            keys, vals = k[order], gap[order]
        counted += 1
    if not counted:
        return 0, {}
    texts = [f"{distinct[kc]}#{kn}" for kc, kn in zip((keys >> 32).tolist(), (keys & 0xFFFFFFFF).tolist())]
    return counted, dict(zip(texts, vals.tolist()))


def shortest_gaps_by_text(steps, idx, start, end, thread, names) -> tuple[int, dict]:
    """shortest_gaps keyed as text step by step, each name counted as the object it is (any names)."""
    shortest: dict = {}
    counted = 0
    for a, b, first, prev_end, prev_thread in _step_windows(steps, idx, start, end, thread):
        th, nm, s = thread[a:b], names[a:b], start[a:b]
        gaps, seen = {}, {}
        for name, t, st, p, pt in zip(nm[first].tolist(), th[first].tolist(), s[first].tolist(), prev_end.tolist(),
                                      prev_thread.tolist()):
            n = seen[name] = seen.get(name, 0) + 1
            if pt == t:
                gaps[f"{name}#{n}"] = max(st - p, 0)
        # the keys every step so far has, each with its shortest gap (not every step's dict kept: on a long
        # trace 50 steps of thousands of keys each)
        shortest = gaps if not counted else {k: min(g, gaps[k]) for k, g in shortest.items() if k in gaps}
        counted += 1
    return counted, shortest


def _step_windows(steps, idx, start, end, thread):
    """Per step of idx with two events or more: its events' rows a:b (start order) and _busy_starts of them."""
    for i in idx:
        lo, hi = int(steps.host_start[i]), int(steps.host_end[i])
        a, b = np.searchsorted(start, lo), np.searchsorted(start, hi)
        if b - a >= 2:
            yield (a, b, *_busy_starts(start[a:b], np.minimum(end[a:b], hi), thread[a:b], lo))


def _busy_starts(s: np.ndarray, e: np.ndarray, th: np.ndarray, lo: int):
    """Of a step's events in start order (ends cut at the step's end): the events that start a busy interval
    of the union, the end of the busy time before each (the step's start before the first) and the thread of
    the event that ended it."""
    cm = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > cm[:-1]))  # an event that starts a busy interval
    setter = np.maximum.accumulate(np.where(e >= cm, np.arange(e.size), 0))  # the event that ends it so far
    first = np.flatnonzero(new)
    prev_end = np.concatenate(([lo], cm[first[1:] - 1]))
    prev_thread = np.concatenate(([th[0]], th[setter[first[1:] - 1]]))
    return first, prev_end, prev_thread
