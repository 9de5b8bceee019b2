"""The extension's search of sorted queries (native/sorted_search.c) against np.searchsorted, and the interval
queries (timeline/intervals.py) the same with and without it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnoser.native import native_module
from diagnoser.timeline import intervals
from diagnoser.timeline.intervals import IntervalSet

NATIVE = native_module()
needs_native = pytest.mark.skipif(NATIVE is None, reason="the C extension is not built (or DIAGNOSER_NO_NATIVE is set)")
I64 = np.iinfo(np.int64)


def native_search(values, queries, side):
    out = np.empty(len(queries), dtype=np.int64)
    NATIVE.sorted_search(np.asarray(values, np.int64), np.asarray(queries, np.int64), out, side == "right")
    return out


@needs_native
@settings(max_examples=400, deadline=None)
@given(values=st.lists(st.integers(min_value=I64.min, max_value=I64.max), max_size=300),
       queries=st.lists(st.integers(min_value=I64.min, max_value=I64.max), max_size=300),
       reuse=st.integers(min_value=0, max_value=3), side=st.sampled_from(["left", "right"]))
def test_any_sorted_int64_input(values, queries, reuse, side):
    values = np.sort(np.array(values, dtype=np.int64))
    queries = np.array(queries, dtype=np.int64)
    if reuse and values.size:  # queries equal to values: where left and right differ
        queries = np.concatenate([queries, values[::reuse]])
    queries.sort()
    assert (native_search(values, queries, side) == np.searchsorted(values, queries, side=side)).all()


@needs_native
@pytest.mark.parametrize("n, m", [(0, 10), (10, 0), (1, 1), (1_000_000, 1000), (1000, 1_000_000), (300_000, 300_000)])
@pytest.mark.parametrize("side", ["left", "right"])
def test_big_and_edge_sizes(n, m, side):
    rng = np.random.default_rng(n + m)
    values = np.sort(rng.integers(0, 1 << 40, n))
    queries = np.sort(np.concatenate([rng.integers(-5, (1 << 40) + 5, m), values[:m // 3]]))
    assert (native_search(values, queries, side) == np.searchsorted(values, queries, side=side)).all()


@needs_native
def test_refuses_what_it_cannot_read():
    with pytest.raises(TypeError):  # not int64
        NATIVE.sorted_search(np.zeros(3, np.int32), np.zeros(3, np.int64), np.empty(3, np.int64), False)
    with pytest.raises(ValueError):  # out of another length
        NATIVE.sorted_search(np.zeros(3, np.int64), np.zeros(3, np.int64), np.empty(2, np.int64), False)
    read_only = np.zeros(3, np.int64)
    read_only.setflags(write=False)
    with pytest.raises((TypeError, ValueError, BufferError)):
        NATIVE.sorted_search(np.zeros(3, np.int64), np.zeros(3, np.int64), read_only, False)


@settings(max_examples=150, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000)), min_size=1, max_size=200),
       queries=st.lists(st.tuples(st.integers(-100, 10**6 + 6000), st.integers(0, 20000)), min_size=64, max_size=400),
       ordered=st.booleans())
def test_interval_queries_same_with_and_without_the_extension(spans, queries, ordered):
    s = IntervalSet.of([a for a, _ in spans], [a + d for a, d in spans])
    a = np.array([q for q, _ in queries], dtype=np.int64)
    if ordered:
        a.sort()
    b = a + np.array([d for _, d in queries], dtype=np.int64)
    with_native = (s.overlap(a, b), s.contains(a), intervals.searchsorted(s.starts, a, "left"))
    saved = intervals.native_module
    intervals.native_module = lambda: None
    try:
        without = (s.overlap(a, b), s.contains(a), intervals.searchsorted(s.starts, a, "left"))
    finally:
        intervals.native_module = saved
    for x, y in zip(with_native, without):
        assert (x == y).all()
    assert (with_native[2] == np.searchsorted(s.starts, a, side="left")).all()
