"""The op tree of a timeline: CPU operators nested per host thread, and the launch call that links each
kernel to the innermost operator around it (as TraceLens's Trace2Tree links CPU ops to their kernels).

Built once per timeline (TimelineView.op_tree; TimelineView.modelled_op_tree over the ops the perf model
covers, the per-op roofline's) and read by every analysis that asks which op a kernel or a gap belongs to:
the op distribution (ops.py), the per-op roofline (roofline.py), the host's top-level operators in the
idle-gap classes (gaps.py). O(n log n): one sort, then pointer jumping per thread.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..ordering import is_sorted

PARENT_JUMP_ROUNDS = 40  # pointer-jumping rounds before the stack walk takes over (a chain of ranges closing one by one)
NESTING_DEPTH = 256  # deepest nesting an innermost-op search walks up


@dataclass(frozen=True)
class OpTree:
    """Op ranges in tree order: by thread, then start, the enclosing range first (longer first on a tie).

    `rows[i]` is op i's row in the table it was built from; `parent[i]` the op (tree index) innermost
    around it on its thread, -1 at the top; `top_level[i]` whether it ends after every earlier op of its
    thread has ended (not within one: the ops the host's idle-gap classes judge). Row and parent indices
    are int32 below 2**31 ops and the threads are kept per thread, not per op: the tree lives on its
    timeline's view through the idle-gap analysis, where a long trace's memory peaks."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    parent: np.ndarray
    top_level: np.ndarray
    threads: np.ndarray  # the distinct threads, sorted
    bounds: np.ndarray   # ops of threads[k] are tree indices bounds[k] .. bounds[k + 1] - 1

    @classmethod
    def of(cls, start, end, thread) -> "OpTree":
        """The tree of ranges given as columns (any order; row i of the columns is `rows` value i)."""
        return cls._of([np.asarray(start, np.int64), np.asarray(end, np.int64), np.asarray(thread, np.int64)])

    @classmethod
    def _of(cls, columns: list) -> "OpTree":
        """The tree of [start, end, thread] int64 columns; the list is emptied, so that columns made for the
        tree (some rows of a table) are freed as soon as their sorted copies are made."""
        start, end, thread = columns
        columns.clear()
        index = np.int32 if start.size < 2 ** 31 else np.int64
        rows = _tree_order(start, end, thread, index)
        th = thread if rows is None else thread[rows]  # sorted: each thread's first op is where the thread changes
        first = np.flatnonzero(np.r_[True, th[1:] != th[:-1]]) if th.size else np.zeros(0, np.int64)
        threads, bounds = th[first], np.r_[first, th.size].astype(np.int64)
        del th, thread
        if rows is None:  # the rows were in tree order already: the columns are the tree's
            rows, s, e = np.arange(start.size, dtype=index), start, end
        else:
            s, e = start[rows], end[rows]
        del start, end
        parent = np.full(s.size, -1, index)
        top = np.zeros(s.size, bool)
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            p = parents(s[a:b], e[a:b])
            parent[a:b] = np.where(p >= 0, p + a, -1)
            del p
            # ends after every earlier op of its thread has ended (the first op of a thread always)
            top[a] = True
            np.greater(e[a + 1:b], np.maximum.accumulate(e[a:b - 1]), out=top[a + 1:b])
        return cls(rows, s, e, parent, top, threads, bounds)

    @classmethod
    def of_table(cls, table, rows: np.ndarray | None = None) -> "OpTree":
        """The tree of a frame's ranges (start_ns, end_ns, thread columns), or of some of its rows (a mask:
        the tree's `rows` then count those rows only), without a copy of the frame."""
        cols = [table[c].to_numpy(np.int64) for c in ("start_ns", "end_ns", "thread")]
        return cls._of(cols if rows is None else [c[rows] for c in cols])

    def __len__(self) -> int:
        return int(self.rows.size)

    def innermost(self, t: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """For each time t on a host thread, the innermost op of that thread holding it (tree index), or -1."""
        t, thread = np.asarray(t, np.int64), np.asarray(thread, np.int64)
        out = np.full(t.size, -1, np.int64)
        for k, th in enumerate(self.threads.tolist()):
            sel = np.flatnonzero(thread == th)
            if not sel.size:
                continue
            a, b = int(self.bounds[k]), int(self.bounds[k + 1])
            ts = t[sel]
            j = np.searchsorted(self.start[a:b], ts, side="right") - 1  # the thread's last op starting by t
            out[sel] = _innermost(self.end, self.parent, ts, np.where(j >= 0, j + a, -1))
        return out

    def at_launch(self, tv, launch: np.ndarray) -> np.ndarray:
        """For each launch call (host rows of `tv`), the innermost op around it on its thread (tree index), or -1."""
        thread = tv.tl.host["thread"].to_numpy()[launch].astype(np.int64)
        return self.innermost(tv.host_start[launch], thread)


def _tree_order(start: np.ndarray, end: np.ndarray, thread: np.ndarray, index) -> np.ndarray | None:
    """The rows by thread, then start, the longer first on a tie (`np.lexsort((-end, start, thread))`, as
    `index`); None when that is the rows' own order. Rows sorted by start (a table's order) are only
    reordered where starts tie and across threads: no sort of every row by three keys."""
    if not is_sorted(start):
        return np.lexsort((-end, start, thread)).astype(index)
    rows = None
    tie = np.flatnonzero(start[1:] == start[:-1])
    if tie.size:  # every row of a run of equal starts, sorted longest first within its run
        at = np.union1d(tie, tie + 1)
        rows = np.arange(start.size, dtype=index)
        rows[at] = at[np.lexsort((-end[at], start[at]))]
    th = thread if rows is None else thread[rows]
    if th.size and not (th == th[0]).all():  # several threads: each thread's rows together, in that order
        order = np.argsort(th, kind="stable")
        rows = order.astype(index) if rows is None else rows[order]
    return rows


_ROUND_CHUNK = 1 << 16


def parents(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of each range's innermost enclosing range (ranges sorted by start, properly nested), -1 at top.

    What a stack walk gives (pop while the top ended before this start) is the last earlier range that
    has not ended by this start, max{j < i: end[j] >= start[i]}. Found by pointer jumping, vectorized:
    a candidate that ended too early is replaced by its own candidate (every range between the two ended
    before that one's start, so before this one's too). Real traces settle in a few rounds; a long chain
    of ranges closing one after another would take a round per range, so past PARENT_JUMP_ROUNDS the
    (linear) stack walk finishes the job."""
    index = np.int32 if start.size < 2 ** 31 else np.int64
    cand = np.arange(-1, start.size - 1, dtype=index)
    # a range that starts after every earlier one has ended has no parent: settled at once (the top
    # level of a long trace would otherwise take log n rounds of jumping along its siblings)
    ended = np.maximum.accumulate(end) if end.size else end  # latest end among ranges 0..j
    # the first round (every range's candidate the one before it) a chunk of ranges at a time, on views of
    # the columns: what it reads of cand is still the initial i - 1, so the chunks are independent
    todo = []
    for lo in range(1, start.size, _ROUND_CHUNK):
        hi = min(lo + _ROUND_CHUNK, start.size)
        t = (np.flatnonzero(end[lo - 1:hi - 1] < start[lo:hi]) + lo).astype(index)  # candidate i - 1 ended early
        nxt = t - 2  # its own candidate
        nxt[ended[t - 1] < start[t]] = -1  # every range up to i - 1 ended before this one starts
        cand[t] = nxt
        todo.append(t[nxt >= 0])
    todo = np.concatenate(todo) if todo else np.zeros(0, index)
    for _ in range(PARENT_JUMP_ROUNDS - 1):
        if not todo.size:
            return cand
        c = cand[todo]
        early = end[c] < start[todo]
        todo, c = todo[early], c[early]
        nxt = cand[c]
        none_open = ended[c] < start[todo]  # every range up to c ended before this one starts
        nxt[none_open] = -1
        cand[todo] = nxt
        todo = todo[nxt >= 0]
    return cand if not todo.size else _parents_by_stack(start, end)


def _parents_by_stack(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    parent = np.full(start.size, -1, dtype=np.int64)
    stack: list[int] = []
    ends = end.tolist()
    for i, s in enumerate(start.tolist()):
        while stack and ends[stack[-1]] < s:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def _innermost(end, parent, t: np.ndarray, j: np.ndarray) -> np.ndarray:
    """For each time t, the innermost range containing it, or -1, from j: the last range of its thread starting
    at or before t (-1: none), whose enclosing ranges (`parent`, tree indices) are walked up."""
    for _ in range(NESTING_DEPTH):
        open_ = j >= 0
        out = open_ & (end[np.maximum(j, 0)] < t)
        if not out.any():
            break
        j = np.where(out, parent[np.maximum(j, 0)], j)
    return j


def calls_inside(ranges, tv) -> np.ndarray:
    """How many host API calls start inside each range of a frame, on the range's own thread (0: the host
    computed there without a CUDA call)."""
    host_thread = tv.tl.host["thread"].to_numpy()
    thread = ranges["thread"].to_numpy()
    start, end = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    counts = np.zeros(len(ranges), dtype=np.int64)
    one = thread.size > 0 and bool((thread == thread[0]).all())
    for t in (thread[:1] if one else pd.unique(thread)).tolist():  # (the rows of each thread by a mask: no groups)
        if t != t:  # a missing thread: no calls counted (as groupby leaves it out)
            continue
        rows = slice(None) if one else np.flatnonzero(thread == t)
        calls = np.sort(tv.host_start[host_thread == t])
        counts[rows] = np.searchsorted(calls, end[rows], side="right") - np.searchsorted(calls, start[rows], side="left")
    return counts
