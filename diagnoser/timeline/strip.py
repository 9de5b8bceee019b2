"""One steady step as the textbook draws it first: the GPU's streams with their kernels, the idle gaps
coloured by class, and above them the host: the op, API call or annotation under each big gap (what
held the GPU up). Chart data only, in microseconds from the step's start (report/strip_chart.py draws
it, scaled to the step, so a 100 ms training step and a 2 ms decode step both read).

The step drawn is the middle steady step (by position, so that every rank of a run draws the same
one). Rectangles are bounded: neighbours of one category on a stream less than a pixel apart merge;
a lane left with more than STRIP_MAX_RECTS is given as columns instead (each: its busy share and
main category, so a launch-bound stream shows its idle, never a solid bar); gaps shorter than
GAP_MIN_SHARE of the step are not drawn one by one, but every gap counts in the idle band
(idle_columns: per column of the step, the idle share and its main class); the EXPLAINED_GAPS
longest gaps get their host explanation.
"""
from __future__ import annotations

import numpy as np

from .gaps import IDLE_CLASSES
from .kernels import KERNEL_CATEGORIES, KernelTable
from .steps import PROFILER_STEP, Steps
from .view import Names, TimelineView, values_at

STRIP_MAX_RECTS = 400     # per stream
STRIP_MAX_LANES = 6       # the busiest streams
GAP_MIN_SHARE = 0.002     # of the step
EXPLAINED_GAPS = 12
IDLE_COLUMNS = 200        # the idle band's resolution across the step
MERGE_SHARE = 0.00025     # neighbours closer than this share of the step (under a pixel) merge
LANE_COLUMNS = 400        # a lane with more rectangles is drawn as columns
LABEL_CHARS = 80
# the host calls a gap class is named after (gaps.py): the sync that blocked, the malloc/free
CLASS_API_KINDS = {"sync": ("sync", "copy_sync"), "alloc": ("malloc", "free")}
_HOST_KIND = {"nvtx": "annotation", "annotation": "annotation", "op": "op", "python": "python"}


def middle_step(steps: Steps) -> int | None:
    """Index (into the steps' arrays) of the middle steady step; None without steps. By position, not
    by duration: the ranks of one run then draw the same step, one above the other."""
    idx = steps.steady
    return int(idx[(idx.size - 1) // 2]) if idx.size else None


def _merge(a: np.ndarray, b: np.ndarray, cat: np.ndarray, tol: float) -> tuple:
    """Merge neighbours of one category closer than tol (rows sorted by start): below a pixel apart."""
    if a.size <= 1:
        return a, b, cat
    brk = np.ones(a.size, bool)
    brk[1:] = (cat[1:] != cat[:-1]) | (a[1:] - b[:-1] > tol)
    first = np.flatnonzero(brk)
    return a[first], np.maximum.reduceat(b, first), cat[first]


def _time_before(edges: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Covered time before each edge, for intervals sorted by start that do not overlap (one stream's
    kernels, one device's gaps): O((edges + intervals) log), never an edges x intervals matrix."""
    if not a.size:
        return np.zeros(edges.size)
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    done = np.concatenate(([0.0], np.cumsum(b - a)))
    k = np.searchsorted(a, edges, side="left")  # intervals started before each edge
    last = np.maximum(k - 1, 0)
    over = np.where(k > 0, np.maximum(b[last] - edges, 0.0), 0.0)  # the last one may run past the edge
    return done[k] - over


def _columns(a: np.ndarray, b: np.ndarray, cat: np.ndarray, span: float) -> list:
    """The lane cut into LANE_COLUMNS columns: per column the busy share and its main category."""
    edges = np.linspace(0.0, span, LANE_COLUMNS + 1)
    cats = np.unique(cat)
    filled = np.zeros((cats.size, LANE_COLUMNS))
    for k, c in enumerate(cats.tolist()):
        filled[k] = np.diff(_time_before(edges, a[cat == c], b[cat == c]))
    width = span / LANE_COLUMNS
    total, main = filled.sum(axis=0), filled.argmax(axis=0)
    return [[round(float(min(t / width, 1.0)), 2), KERNEL_CATEGORIES[int(cats[m])] if t > 0 else ""]
            for t, m in zip(total, main)]


def _lane(a: np.ndarray, b: np.ndarray, cat: np.ndarray, span: float) -> dict:
    """A lane as rectangles where they are few enough, else as columns (the busy share of each)."""
    a, b, cat = _merge(a, b, cat, span * MERGE_SHARE)
    if a.size <= STRIP_MAX_RECTS:
        return {"rects": [[round(float(x), 3), round(float(y), 3), KERNEL_CATEGORIES[int(c)]]
                          for x, y, c in zip(a, b, cat)]}
    return {"columns": _columns(a, b, cat, span)}


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "\u2026"


def _explain(tv: TimelineView, s: int, e: int, gaps: list) -> list:
    """For each of the longest gaps: the host range (annotation, op, Python frame) or else the API call
    overlapping most of it, as [start_us, end_us, label, kind, gap class]."""
    r = tv.tl.ranges
    rs = r["start_ns"].to_numpy(np.int64) if len(r) else np.zeros(0, np.int64)
    re_ = r["end_ns"].to_numpy(np.int64) if len(r) else np.zeros(0, np.int64)
    # a range that spans the whole step (the step's own annotation, a loop around it) explains nothing
    cand = np.flatnonzero((re_ > s) & (rs < e) & ~((rs <= s) & (re_ >= e)))
    # the names and kinds of the step's ranges only (not an object per range of the trace)
    if cand.size:  # (the step ranges: matched once per distinct name, shared with the steps' search)
        cand = cand[~Names.of(r["name"]).subset(cand).mask(PROFILER_STEP)]
    rnames = values_at(r["name"], cand) if cand.size else np.zeros(0, object)
    rkind = values_at(r["kind"], cand) if cand.size else np.zeros(0, object)
    hs, he = tv.host_start, tv.host_end
    api = np.flatnonzero((he > s) & (hs < e))
    out = []
    for ga, gb, cls in sorted(gaps, key=lambda g: g[0] - g[1])[:EXPLAINED_GAPS]:
        a, b = s + ga * 1e3, s + gb * 1e3
        best, label, kind = None, "", ""
        kinds = CLASS_API_KINDS.get(cls)
        if kinds and api.size:  # the call the gap's class names it for (the sync, the malloc/free)
            mine = api[tv.host_is(*kinds)[api]]
            ov = np.minimum(he[mine], b) - np.maximum(hs[mine], a) if mine.size else np.zeros(0)
            if ov.size and ov.max() > 0:
                j = int(mine[int(np.argmax(ov))])
                best, label, kind = j, str(tv.host_names.uniques[tv.host_names.codes[j]]), "api"
                lo, hi = int(hs[j]), int(he[j])
        if best is None and cand.size:
            ov = np.minimum(re_[cand], b) - np.maximum(rs[cand], a)
            # innermost of the ranges covering most of the gap: the shortest among the best overlaps
            good = ov >= 0.3 * (b - a)
            if good.any():
                g = np.flatnonzero(good)
                at = int(g[np.argmin(re_[cand[g]] - rs[cand[g]])])
                j = best = int(cand[at])
                label, kind = str(rnames[at]), _HOST_KIND.get(str(rkind[at]), str(rkind[at]))
                if kind == "python":  # `dir/file.py(235): fn` -> `file.py(235): fn`
                    label = label.split("(", 1)[0].rsplit("/", 1)[-1] + ("(" + label.split("(", 1)[1] if "(" in label else "")
                lo, hi = int(rs[j]), int(re_[j])
        if best is None and api.size:
            ov = np.minimum(he[api], b) - np.maximum(hs[api], a)
            k = int(np.argmax(ov))
            if ov[k] > 0:
                j = int(api[k])
                best, label, kind = j, str(tv.host_names.uniques[tv.host_names.codes[j]]), "api"
                lo, hi = int(hs[j]), int(he[j])
        if best is None:
            continue
        item = [round((max(lo, s) - s) / 1e3, 3), round((min(hi, e) - s) / 1e3, 3), _short(label), kind, cls]
        if item not in out:  # one range under several gaps is drawn once
            out.append(item)
    return sorted(out)


def step_strip(tv: TimelineView, kt: KernelTable, steps: Steps, i: int, device: int,
               gap_start: np.ndarray, gap_end: np.ndarray, gap_cls: np.ndarray, rank: int | None) -> dict:
    """The chart data of step i on `device` (see module doc)."""
    s, e = int(steps.start[i]), int(steps.end[i])
    span = max(e - s, 1)
    first, last = kt.during(s, e)  # (the columns of those rows only)
    rows, gpu = kt.gpu_rows(first, last), kt.tv.tl.gpu
    start = kt.tv.gpu_start[rows]
    end = start + kt.dur_ns[first:last]
    sel = (gpu["device"].to_numpy()[rows] == device) & (end > s) & (start < e)
    lanes = []
    if sel.any():
        streams = gpu["stream"].to_numpy()[rows][sel]
        a = (np.maximum(start[sel], s) - s) / 1e3
        b = (np.minimum(end[sel], e) - s) / 1e3
        cat = kt.category[first:last][sel]
        busy = {int(x): float((b - a)[streams == x].sum()) for x in np.unique(streams)}
        for stream in sorted(busy, key=lambda x: (-busy[x], x))[:STRIP_MAX_LANES]:
            on = streams == stream
            order = np.argsort(a[on], kind="stable")
            lanes.append({"stream": stream, "busy_pct": round(100.0 * busy[stream] * 1e3 / span, 1),
                          **_lane(a[on][order], b[on][order], cat[on][order], span / 1e3)})
    idle = _idle_columns(np.maximum(gap_start, s), np.minimum(gap_end, e), gap_cls, s, e)
    inside = (gap_end > s) & (gap_start < e) & ((gap_end - gap_start) >= GAP_MIN_SHARE * span)
    gaps = [[round((max(int(x), s) - s) / 1e3, 3), round((min(int(y), e) - s) / 1e3, 3), IDLE_CLASSES[int(c)]]
            for x, y, c in zip(gap_start[inside], gap_end[inside], gap_cls[inside])]
    return {"rank": rank, "step": str(steps.labels[i]) if i < len(steps.labels) else str(i), "device": int(device),
            "dur_us": round(span / 1e3, 3), "lanes": lanes, "gaps": gaps, "idle_columns": idle,
            "host": _explain(tv, s, e, gaps)}


def _idle_columns(gs: np.ndarray, ge: np.ndarray, cls: np.ndarray, s: int, e: int) -> list:
    """The step cut into IDLE_COLUMNS columns: per column, the idle share and its main class, from every
    gap (the many gaps too short to draw one by one add up here: a launch-bound step shows its idle)."""
    edges = np.linspace(s, e, IDLE_COLUMNS + 1)
    out = np.zeros((len(IDLE_CLASSES), IDLE_COLUMNS))
    keep = ge > gs
    for c in np.unique(cls[keep]).tolist():
        sel = keep & (cls == c)
        out[c] = np.diff(_time_before(edges, gs[sel].astype(np.float64), ge[sel].astype(np.float64)))
    width = max(e - s, 1) / IDLE_COLUMNS  # (a step of no length: every column 0, never 0 / 0)
    total = out.sum(axis=0)
    main = out.argmax(axis=0)
    return [[round(float(t / width), 2), IDLE_CLASSES[int(m)] if t > 0 else ""] for t, m in zip(total, main)]
