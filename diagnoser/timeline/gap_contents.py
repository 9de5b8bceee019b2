"""What a trace shows inside idle gaps no class explains: the host ranges and operators that cover them, the
Python files whose frames (launching nothing) cover them, and, in an export, the launching thread's OS calls
and CPU samples there, each with its share of that idle. A user can act on "64% of the idle is inside
`torch/_inductor/codecache.py`" even when no rule knows the name.
"""
from __future__ import annotations

import re

import numpy as np

from .gaps import python_frames_without_calls, ranges_over
from .intervals import IntervalSet
from .host_threads import function_text, wait_text
from .view import TimelineView
from .names import lazy_pattern

PY_FILE = lazy_pattern(r"^(.+?\.py)\(\d+\): ")
SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$|: \d+/\d+$")  # emit_nvtx, `Torch-Compiled Region: 0/3`
MIN_SHARE = 0.05  # a name covering less of the idle than this is not worth naming


def _top_cover(names: np.ndarray, starts: np.ndarray, ends: np.ndarray, gs: np.ndarray, ge: np.ndarray,
               top: int) -> list[tuple[str, float]]:
    """(name, share of the gaps' total time its spans cover) for the `top` names covering most; spans of one
    name are merged first, so nested or repeated ones count once."""
    total = float((ge - gs).sum())
    if total <= 0 or names.size == 0:
        return []
    gaps = IntervalSet.of(gs, ge)
    raw = gaps.overlap(starts, ends)
    hit = raw > 0
    if not hit.any():
        return []
    uniq, codes = np.unique(names[hit].astype(str), return_inverse=True)
    bound = np.bincount(codes, weights=raw[hit].astype(np.float64), minlength=uniq.size)  # overlaps summed, unmerged
    hs, he = starts[hit], ends[hit]
    cover = []
    for c in np.argsort(-bound, kind="stable")[:4 * top].tolist():  # merge only the likely leaders
        merged = IntervalSet.of(hs[codes == c], he[codes == c])
        cover.append((round(float(gaps.overlap(merged.starts, merged.ends).sum()) / total, 2), merged.total, str(uniq[c])))
    # nested ranges cover the same idle: of those with one share, the innermost (shortest in all) names it
    cover.sort(key=lambda x: (-x[0], x[1], x[2]))
    out: list[tuple[str, float]] = []
    for c, _, n in cover:
        if c >= MIN_SHARE and (not out or c != out[-1][1]):
            out.append((n, c))
    return out[:top]


def _text(items: list[tuple[str, float]]) -> str:
    return ", ".join(f"`{n}` {100.0 * c:.0f}%" for n, c in items)


def idle_contents(tv: TimelineView, gs: np.ndarray, ge: np.ndarray, side=None, thread: np.ndarray | None = None,
                  steps: int = 1) -> str:
    """`host ranges: `X` 83%, ...; Python (frames that launch nothing): `torch/_inductor/codecache.py` 64%;
    OS calls of the launching thread: futex 4.1 ms (72%); CPU samples: ...` for the gaps; "" when the trace
    shows nothing inside them."""
    if gs.size == 0:
        return ""
    parts = []
    r = tv.tl.ranges
    if len(r):
        sub = r.iloc[ranges_over(r, gs, ge)[0]]  # (no copy of every op: only of those inside the gaps)
        uniq, inv = np.unique(sub["name"].astype(str).to_numpy(), return_inverse=True)
        names = np.array([SUFFIX.sub("", n) for n in uniq.tolist()], dtype=object)[inv] if uniq.size else uniq
        ranges = _top_cover(names, sub["start_ns"].to_numpy(np.int64), sub["end_ns"].to_numpy(np.int64), gs, ge, 3)
        if ranges:
            parts.append("host ranges " + _text(ranges))
        py = r[(r["kind"] == "python").to_numpy()]
        if len(py):
            py = python_frames_without_calls(tv)
            py = py[IntervalSet.of(gs, ge).overlap(py["start_ns"].to_numpy(np.int64), py["end_ns"].to_numpy(np.int64)) > 0]
            uniq, inv = np.unique(py["name"].astype(str).to_numpy(), return_inverse=True)
            py_file = PY_FILE().match
            files = np.array([(m.group(1) if (m := py_file(n)) else n) for n in uniq.tolist()],
                             dtype=object)[inv] if uniq.size else uniq
            top = _top_cover(files, py["start_ns"].to_numpy(np.int64), py["end_ns"].to_numpy(np.int64), gs, ge, 2)
            if top:
                parts.append("Python frames that launch nothing in " + _text(top))
    if side is not None:
        if side.sees_waits:
            waits = wait_text(side, gs, ge, thread, steps)
            if waits:
                parts.append(f"the launching thread in {waits}")
        if side.sees_compute:
            functions = function_text(side, gs, ge, thread)
            if functions:
                parts.append(f"its CPU samples {functions}")
    return "; ".join(parts)
