"""Interval arithmetic on integer-nanosecond [start, end) spans, vectorized with numpy.

Every timeline metric reduces to "how much of span X is covered by set Y": a merged (sorted,
disjoint) interval set answers that for many queries at once through a cumulative-length table.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..native import native_module


def searchsorted(values: np.ndarray, t: np.ndarray, side: str) -> np.ndarray:
    """`np.searchsorted(values, t, side)`; sorted t (the interval queries' times mostly are) by the extension's
    galloping search (native/sorted_search.c: each from the previous answer, reading `values` forwards), else
    for many sorted t and few values by one pass over t."""
    if t.ndim != 1 or t.size < NATIVE_FROM or not (t[1:] >= t[:-1]).all():
        return np.searchsorted(values, t, side=side)
    native = native_module()
    if native is not None and t.dtype == np.int64 and values.dtype == np.int64 and values.ndim == 1:
        out = np.empty(t.size, dtype=np.int64)
        native.sorted_search(np.ascontiguousarray(values), np.ascontiguousarray(t), out, side == "right")
        return out
    if t.size > max(8 * values.size, 4096):
        # t[j] is past value k from the first j where searchsorted(t, value k) places it
        pos = np.searchsorted(t, values, side="left" if side == "right" else "right")
        return np.cumsum(np.bincount(pos, minlength=t.size + 1)[:t.size])
    return np.searchsorted(values, t, side=side)


NATIVE_FROM = 64  # fewer queries: numpy's own search (the sortedness check and the call cost more than they save)


SPARSE_QUERIES = 64  # fewer queries than 1/64 of a set's intervals: no cumulative table (_cum_at)
CUM_BLOCK = 4096  # intervals per entry of the coarse cumulative table the sparse queries start from
QUERY_CHUNK = 1 << 16  # queries answered at a time (overlap)


def union_overlap(pieces, a, b) -> np.ndarray:
    """`IntervalSet.of(every start, every end).overlap(a, b)` for intervals given as (starts, ends) pieces in start
    order (each piece sorted by start, none starting before the pieces before it), merged a piece at a time: no
    interval array of every piece at once. A merged interval is final once one starts past its end, so each piece
    passes on only its last merged interval (the carry) to the next; the sets counted are disjoint, so their
    overlaps add up exactly."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    out = np.zeros(np.broadcast(a, b).shape, dtype=np.int64)
    carry = None
    for s, e in pieces:
        if carry is not None:
            s, e = np.concatenate((carry[:1], s)), np.concatenate((carry[1:], e))
        merged = IntervalSet.of(s, e)
        if not len(merged):
            continue
        if len(merged) > 1:
            out += IntervalSet(merged.starts[:-1], merged.ends[:-1]).overlap(a, b)
        carry = np.array([merged.starts[-1], merged.ends[-1]], dtype=np.int64)
    if carry is not None:
        out += IntervalSet(carry[:1], carry[1:]).overlap(a, b)
    return out


@dataclass(frozen=True)
class IntervalSet:
    """Sorted, disjoint [start, end) intervals with a cumulative covered-length table."""

    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, starts, ends) -> "IntervalSet":
        """Merge possibly overlapping intervals (empty or negative ones are dropped)."""
        s = np.asarray(starts, dtype=np.int64)
        e = np.asarray(ends, dtype=np.int64)
        keep = e > s
        if not keep.all():
            s, e = s[keep], e[keep]
        if s.size == 0:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))
        if s.size > 1 and not (s[1:] >= s[:-1]).all():  # timeline rows usually come sorted
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
        run_end = np.maximum.accumulate(e)
        # a new merged interval begins where a start lies beyond every earlier end
        new = np.empty(s.size, dtype=bool)
        new[0] = True
        np.greater(s[1:], run_end[:-1], out=new[1:])
        if new.all():  # already disjoint (so the ends increase: run_end is e): a read-only column (a
            # timeline's) is shared, not copied
            return cls(s if not s.flags.writeable else s.copy(), e if not e.flags.writeable else run_end)
        idx = np.flatnonzero(new)
        last = np.empty_like(idx)
        last[:-1] = idx[1:] - 1
        last[-1] = s.size - 1
        return cls(s[idx], run_end[last])

    @property
    def total(self) -> int:
        return int((self.ends - self.starts).sum())

    def __len__(self) -> int:
        return int(self.starts.size)

    @cached_property
    def _cum(self) -> np.ndarray:
        """Covered length before each interval (and in all, last)."""
        return np.concatenate(([0], np.cumsum(self.ends - self.starts)))

    def _covered_before(self, t: np.ndarray) -> np.ndarray:
        """Covered length in (-inf, t] for each t (the set is not empty)."""
        few = "_cum" not in self.__dict__ and t.size * SPARSE_QUERIES < self.starts.size
        if t.ndim != 1:  # (a point: the same, not in place)
            i = searchsorted(self.starts, t, "right")
            j = np.maximum(i - 1, 0)
            partial = np.maximum(np.minimum(t, self.ends[j]) - self.starts[j], 0)
            return np.where(i > 0, (self._cum_at(j) if few else self._cum[j]) + partial, 0)
        j = searchsorted(self.starts, t, "right")  # intervals starting at or before t
        j -= 1  # the last of them (-1: none)
        before = j < 0
        np.maximum(j, 0, out=j)
        covered = np.minimum(t, self.ends[j])  # (in place from here: each temporary is as long as t)
        covered -= self.starts[j]
        np.maximum(covered, 0, out=covered)
        covered += self._cum_at(j) if few else self._cum[j]
        covered[before] = 0
        return covered

    def _cum_at(self, j: np.ndarray) -> np.ndarray:
        """`self._cum[j]` without the table: for a few queries into a big set, the lengths between the
        distinct j are summed in one pass (np.add.reduceat) rather than a cumulative table built and
        kept, from the first of them (what lies before it comes from `_cum_blocks`: queries a chunk at a
        time in time order cost the span they cover, not the set up to them). Sums of ends minus sums of
        starts wrap alike in int64, so each difference is exact."""
        pos = np.unique(j)  # sorted distinct interval indices; segment k is [pos[k - 1], pos[k])
        if not pos.size:
            return np.zeros(np.shape(j), dtype=np.int64)
        first_pos = int(pos[0])
        block = first_pos // CUM_BLOCK
        before = self._cum_blocks[block] + (self.ends[block * CUM_BLOCK:first_pos]
                                            - self.starts[block * CUM_BLOCK:first_pos]).sum()
        lo = np.concatenate(([first_pos], pos[:-1]))
        seg = np.zeros(pos.size, dtype=np.int64)
        some = pos > lo  # the first segment is empty
        if some.any():
            upto, first = int(pos[-1]), lo[some] - first_pos
            seg[some] = (np.add.reduceat(self.ends[first_pos:upto], first)
                         - np.add.reduceat(self.starts[first_pos:upto], first))
        cum = np.cumsum(seg)
        cum += before
        return cum[np.searchsorted(pos, j)]

    @cached_property
    def _cum_blocks(self) -> np.ndarray:
        """Covered length before every CUM_BLOCK-th interval (the cumulative table, one entry per block)."""
        edges = np.arange(0, self.starts.size, CUM_BLOCK)
        if not edges.size:
            return np.zeros(1, np.int64)
        per_block = np.add.reduceat(self.ends, edges) - np.add.reduceat(self.starts, edges)
        return np.concatenate(([0], np.cumsum(per_block)))

    def overlap(self, a, b) -> np.ndarray:
        """Covered length inside each [a, b) query (vectorized; many queries a chunk at a time, so that the
        temporaries are a chunk's, not those of every op of a long trace)."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        if self.starts.size == 0:
            return np.zeros(np.broadcast(a, b).shape, dtype=np.int64)
        if a.ndim != 1 or a.shape != b.shape or a.size <= QUERY_CHUNK:
            after, before = self._covered_before(b), self._covered_before(a)
            if after.ndim != 1 or after.shape != before.shape:  # (broadcast: not in place)
                return np.clip(after - before, 0, None)
            after -= before
            return np.maximum(after, 0, out=after)
        if a.size * SPARSE_QUERIES >= self.starts.size:
            self._cum  # noqa: B018 (the table all the queries at once would use, built once for every chunk)
        out = np.empty(a.size, dtype=np.int64)
        for k in range(0, a.size, QUERY_CHUNK):
            out[k:k + QUERY_CHUNK] = self._covered_before(b[k:k + QUERY_CHUNK]) - self._covered_before(a[k:k + QUERY_CHUNK])
        return np.maximum(out, 0, out=out)

    def contains(self, t) -> np.ndarray:
        """Whether each time point t lies inside the set (start <= t < end)."""
        t = np.asarray(t, dtype=np.int64)
        if self.starts.size == 0:
            return np.zeros(t.shape, dtype=bool)
        if t.ndim == 1 and t.size > QUERY_CHUNK:  # a chunk of points at a time: no temporaries as long as t
            out = np.empty(t.size, dtype=bool)
            for k in range(0, t.size, QUERY_CHUNK):
                out[k:k + QUERY_CHUNK] = self.contains(t[k:k + QUERY_CHUNK])
            return out
        i = searchsorted(self.starts, t, "right")
        if t.ndim != 1:  # (a point: not in place)
            i = i - 1
            return (i >= 0) & (t < self.ends[np.maximum(i, 0)])
        i -= 1  # (in place: each temporary is as long as t)
        ok = i >= 0
        np.maximum(i, 0, out=i)
        ok &= t < self.ends[i]
        return ok

    def clip(self, lo: int, hi: int) -> "IntervalSet":
        """The part of the set inside [lo, hi)."""
        if hi <= lo:
            return IntervalSet(np.zeros(0, np.int64), np.zeros(0, np.int64))
        first = int(np.searchsorted(self.ends, lo, side="right"))  # the first interval ending after lo
        stop = int(np.searchsorted(self.starts, hi, side="left"))  # ... and those starting before hi
        s, e = self.starts[first:stop].copy(), self.ends[first:stop].copy()
        if s.size:  # sorted and disjoint: only the first and the last can stick out
            s[0], e[-1] = max(s[0], lo), min(e[-1], hi)
        return IntervalSet(s, e)

    def gaps(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The uncovered [start, end) spans inside [lo, hi)."""
        g = GapRange.of(self, lo, hi)
        return g.chunk(0, len(g))


@dataclass(frozen=True)
class GapRange:
    """The uncovered spans of an IntervalSet inside [lo, hi), built a range at a time (`chunk`): a caller
    that walks them in chunks never holds them all. Gap k (0 <= k <= n, before the empty ones at either
    end are dropped) spans from the end of the set's interval first + k - 1 (lo for k = 0) to the start
    of interval first + k (hi for k = n)."""

    of_set: IntervalSet
    lo: int
    hi: int
    first: int  # the intervals overlapping [lo, hi) are first..first + n - 1
    n: int
    a: int  # the gaps kept are a..b - 1
    b: int

    @classmethod
    def of(cls, s: IntervalSet, lo: int, hi: int) -> "GapRange":
        if hi <= lo:
            return cls(s, lo, hi, 0, 0, 0, 0)
        first = int(np.searchsorted(s.ends, lo, side="right"))  # the intervals overlapping [lo, hi)
        stop = max(int(np.searchsorted(s.starts, hi, side="left")), first)
        n = stop - first
        start0 = lo
        end0 = max(int(s.starts[first]), lo) if n else hi
        start_n = min(int(s.ends[stop - 1]), hi) if n else lo
        # the intervals are disjoint and never touch: only the first and the last gap can be empty
        a = 0 if end0 > start0 else 1
        b = n + 1 if hi > start_n else n
        return cls(s, lo, hi, first, n, a, max(a, b))

    def __len__(self) -> int:
        return self.b - self.a

    def chunk(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the kept gaps i..j - 1 (0 is the first kept gap)."""
        k0, k1 = self.a + i, self.a + min(j, len(self))
        if k1 <= k0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        s, first, n = self.of_set, self.first, self.n
        starts, ends = np.empty(k1 - k0, dtype=np.int64), np.empty(k1 - k0, dtype=np.int64)
        lo_k = max(k0, 1)  # gap k >= 1 starts where interval first + k - 1 ends
        starts[lo_k - k0:] = s.ends[first + lo_k - 1:first + k1 - 1]
        hi_k = min(k1, n)  # gap k < n ends where interval first + k starts
        ends[:hi_k - k0] = s.starts[first + k0:first + hi_k]
        if k0 == 0:
            starts[0] = self.lo
            if n:
                ends[0] = max(int(ends[0]), self.lo)
        if k1 == n + 1:
            ends[-1] = self.hi
            if n:
                starts[-1] = min(int(starts[-1]), self.hi)
        return starts, ends


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Spans covered by both sets (sweep over the four edge arrays)."""
    if len(a) == 0 or len(b) == 0:
        return IntervalSet.of([], [])
    pts = np.concatenate((a.starts, b.starts, a.ends, b.ends))
    delta = np.concatenate((np.ones(len(a) + len(b), np.int64), -np.ones(len(a) + len(b), np.int64)))
    order = np.lexsort((delta, pts))  # at equal times ends (-1) come first: spans are half-open
    pts, depth = pts[order], np.cumsum(delta[order])
    both = np.flatnonzero(depth == 2)
    return IntervalSet.of(pts[both], pts[np.minimum(both + 1, pts.size - 1)])


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Spans of a not covered by b."""
    if len(a) == 0 or len(b) == 0:
        return a
    lo = int(min(a.starts[0], b.starts[0]))
    hi = int(max(a.ends[-1], b.ends[-1]))
    gs, ge = b.gaps(lo, hi)
    return intersect(a, IntervalSet.of(gs, ge))
