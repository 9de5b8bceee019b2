"""The vectorized timeline analysis agrees with the straightforward pandas formulation it replaced.

The fast paths (sorted inputs, distinct correlation ids, categorical names) are what real traces
take; the general paths (unsorted or repeated ids, object names, overlapping intervals) are
checked here against reference implementations on random data, and whole-analysis results on
real traces must not depend on how the name columns are stored.
"""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from diagnoser.timeline.measure import timeline_metrics
from diagnoser.timeline.gaps import _cut
from diagnoser.timeline import intervals
from diagnoser.timeline.intervals import GapRange, IntervalSet, searchsorted
from diagnoser.timeline.attention import ATTENTION_MAX_KERNELS, _unfused_blocks
from diagnoser.timeline.view import Names, first_rows, lookup
from diagnoser.ingest.nsys_sqlite import read_nsys_sqlite
from diagnoser.ingest.torch_trace import read_torch_trace

RNG = np.random.default_rng(7)


# ---------------------------------------------------------------- reference implementations

def ref_launch_start(host: pd.DataFrame, gpu: pd.DataFrame) -> np.ndarray:
    """The launch call's start per gpu row through a hash map (first call per id), else -1."""
    calls = host[host["correlation"] >= 0].drop_duplicates("correlation")
    by_corr = pd.Series(calls["start_ns"].to_numpy(), index=calls["correlation"].to_numpy())
    return gpu["correlation"].map(by_corr).fillna(-1).to_numpy(dtype=np.int64)


def ref_merge(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) spans by a plain loop."""
    out: list[list[int]] = []
    for s, e in sorted((int(s), int(e)) for s, e in zip(starts, ends) if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return np.array([a for a, _ in out], dtype=np.int64), np.array([b for _, b in out], dtype=np.int64)


def ref_cut(gs, ge, cuts, windows: IntervalSet):
    """Gaps cut at the cut points, pieces inside the windows kept (sort all edges, find owners)."""
    edges = np.unique(np.concatenate((gs, ge, cuts)))
    mids = edges[:-1] + (edges[1:] - edges[:-1]) // 2
    owner = np.searchsorted(gs, mids, side="right") - 1
    inside = (owner >= 0) & (mids < ge[np.maximum(owner, 0)]) & windows.contains(mids)
    return edges[:-1][inside], edges[1:][inside], owner[inside]


def ref_unfused(is_gemm, is_delim, soft, dur) -> tuple[int, int]:
    """Nearest GEMM before/after every softmax by walking the stream, stopping at a delimiter."""
    n = is_gemm.size
    cap = ATTENTION_MAX_KERNELS.value
    covered = np.zeros(n, dtype=bool)
    count = 0
    for i in soft.tolist():
        p = i - 1
        while p >= 0 and not is_gemm[p] and not is_delim[p]:
            p -= 1
        q = i + 1
        while q < n and not is_gemm[q] and not is_delim[q]:
            q += 1
        if p < 0 or q >= n or not is_gemm[p] or not is_gemm[q] or i - p > cap + 1 or q - i > cap + 1:
            continue
        count += 1
        covered[p:q + 1] = True
    return count, int(dur[covered].sum())


# ---------------------------------------------------------------- joins and grouping

@pytest.mark.parametrize("sorted_host", [True, False])
@pytest.mark.parametrize("repeated", [True, False])
def test_launch_join_matches_the_first_call_per_correlation_id(sorted_host, repeated):
    n_host, n_gpu = 5000, 4000
    corr = np.arange(n_host, dtype=np.int64) * 3 - 30  # some unknown (negative) ids
    if repeated:
        corr = np.sort(RNG.integers(-5, n_host, n_host))
    if not sorted_host:
        corr = RNG.permutation(corr)
    host = pd.DataFrame({"start_ns": RNG.integers(0, 10**12, n_host), "correlation": corr})
    gcorr = RNG.integers(-3, 3 * n_host, n_gpu)
    for gpu_sorted in (True, False):
        gpu = pd.DataFrame({"correlation": np.sort(gcorr) if gpu_sorted else gcorr})
        keys, rows = first_rows(host["correlation"].to_numpy())
        row = lookup(keys, rows, gpu["correlation"].to_numpy())
        got = np.where(row >= 0, host["start_ns"].to_numpy()[np.maximum(row, 0)], -1)
        assert np.array_equal(got, ref_launch_start(host, gpu))


@pytest.mark.parametrize("categorical", [True, False])
def test_sum_by_name_is_groupby_sum(categorical):
    pool = ["gemm_b", "softmax", "gemm_a", "zeta", "copy"]
    names = pd.Series(RNG.choice(pool, 3000))
    names[RNG.random(3000) < 0.05] = None
    if categorical:
        names = names.astype(pd.CategoricalDtype(["zeta", "gemm_a", "unused", "softmax", "gemm_b", "copy"]))
    dur = RNG.integers(0, 10**6, 3000)
    sel = RNG.random(3000) < 0.7
    want = pd.DataFrame({"name": names, "dur_ns": dur})[sel].groupby("name")["dur_ns"].sum()
    got = Names.of(names).subset(sel).sum_by_name(dur[sel])
    assert [str(x) for x in got.index] == [str(x) for x in want.index]
    assert got.tolist() == want.tolist()


# ---------------------------------------------------------------- interval arithmetic

@pytest.mark.parametrize("trial", range(5))
def test_interval_set_matches_a_plain_merge(trial):
    n = 400
    s = RNG.integers(0, 10_000, n)
    e = s + RNG.integers(-5, 60, n)  # some empty or negative spans
    if trial % 2:
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    iv = IntervalSet.of(s, e)
    ms, me = ref_merge(s, e)
    assert np.array_equal(iv.starts, ms) and np.array_equal(iv.ends, me)
    for lo, hi in ((-10, 20_000), (500, 7_000), (int(ms[3]), int(me[10])), (int(me[3]), int(ms[10])), (900, 900)):
        c = iv.clip(lo, hi)
        cs, ce = ref_merge(np.clip(ms, lo, hi), np.clip(me, lo, hi))
        assert np.array_equal(c.starts, cs) and np.array_equal(c.ends, ce)
        gs, ge = iv.gaps(lo, hi)
        starts, ends = np.concatenate(([lo], ce)), np.concatenate((cs, [hi]))
        keep = ends > starts
        assert np.array_equal(gs, starts[keep]) and np.array_equal(ge, ends[keep])
    t = np.sort(RNG.integers(-100, 11_000, 20_000))
    for side in ("left", "right"):
        assert np.array_equal(searchsorted(iv.starts[:50], t, side), np.searchsorted(iv.starts[:50], t, side=side))
    ref_contains = np.array([any(a <= x < b for a, b in zip(ms, me)) for x in t[::50]])
    assert np.array_equal(iv.contains(t)[::50], ref_contains)
    a = np.sort(RNG.integers(0, 10_000, 10_000))
    b = a + RNG.integers(0, 300, a.size)
    want = [sum(max(0, min(y, e2) - max(x, s2)) for s2, e2 in zip(ms, me)) for x, y in zip(a[::97], b[::97])]
    assert iv.overlap(a, b)[::97].tolist() == want


@pytest.mark.parametrize("trial", range(5))
def test_gaps_built_a_chunk_at_a_time_are_the_plain_complement(trial):
    """idle_gaps walks a busy set's gaps in chunks (GapRange), never all at once: the chunks joined are
    the complement of a plain merge, for windows that start or end inside, before, after or on an edge."""
    s = RNG.integers(0, 10_000, 300)
    iv = IntervalSet.of(s, s + RNG.integers(1, 60, s.size))
    ms, me = iv.starts, iv.ends
    edges = (-10, 0, int(ms[0]), int(me[0]), int(ms[5]) + 1, int(me[-1]), int(ms[-1]), 5_000, 12_000)
    for lo in edges:
        for hi in edges + (lo,):
            cs, ce = ref_merge(np.clip(ms, lo, hi), np.clip(me, lo, hi))
            starts, ends = np.concatenate(([lo], ce)), np.concatenate((cs, [hi]))
            keep = ends > starts
            want = (starts[keep], ends[keep]) if hi > lo else (np.zeros(0, np.int64), np.zeros(0, np.int64))
            whole = GapRange.of(iv, lo, hi)
            assert len(whole) == want[0].size
            for size in (1, 2, 7, 64, 1_000):
                parts = [whole.chunk(a, a + size) for a in range(0, len(whole), size)] or [whole.chunk(0, 0)]
                gs, ge = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
                assert gs.tolist() == want[0].tolist() and ge.tolist() == want[1].tolist(), (lo, hi, size)


@pytest.mark.parametrize("epoch", [0, 1_700_000_000_000_000_000])
def test_few_queries_into_a_big_set_match_the_cumulative_table(epoch):
    """A few queries into a big set sum the lengths between them (no table); the same as the table,
    also on Unix-epoch times whose sums wrap in int64, for sorted and unsorted queries."""
    for trial in range(40):
        n = int(RNG.integers(3_000, 20_000))
        s = np.sort(RNG.integers(0, 10**7, n)) + epoch
        iv = IntervalSet.of(s, s + RNG.integers(0, 900, n))
        m = int(RNG.integers(1, len(iv) // 64))
        a = RNG.integers(-1_000, 10**7 + 1_000, m) + epoch
        if trial % 4 == 3:  # a chunk of queries late in the set (idle_gaps asks a chunk of gaps at a time)
            a = RNG.integers(6 * 10**6, 7 * 10**6, m) + epoch
        b = a + RNG.integers(0, 50_000, m)
        if trial % 2:
            a, b = np.sort(a), np.sort(b)
        few = iv.overlap(a, b)
        assert "_cum" not in iv.__dict__  # the sparse path was taken
        table = IntervalSet(iv.starts, iv.ends)
        table._cum  # noqa: B018 - build the table first: the dense path
        assert few.tolist() == table.overlap(a, b).tolist()


@pytest.mark.parametrize("dense", [True, False])
def test_many_queries_answered_a_chunk_at_a_time_match_one_pass(monkeypatch, dense):
    """Overlap over more queries than a chunk (a long trace's ops against the idle gaps) answers them a chunk
    at a time: the same numbers as one pass over all, with the cumulative table or without (a few queries into
    a big set), sorted or not, the last chunk partial."""
    monkeypatch.setattr(intervals, "QUERY_CHUNK", 100)  # a chunk alone is sparse: the table comes from all
    n = 20_000 if dense else 400_000
    s = np.sort(RNG.integers(0, 10**9, n))
    for trial in range(4):
        iv = IntervalSet.of(s, s + RNG.integers(0, 900, n))
        m = len(iv) // 5 if dense else len(iv) // 64 - 7  # dense: the cumulative table; sparse: without it
        a = RNG.integers(-1_000, 10**9, m)
        b = a + RNG.integers(-100, 10**6, m)  # some empty or negative queries
        if trial % 2:
            a, b = np.sort(a), np.sort(b)
        one = IntervalSet(iv.starts, iv.ends)
        want = np.clip(one._covered_before(b) - one._covered_before(a), 0, None)
        got = iv.overlap(a, b)
        assert ("_cum" in iv.__dict__) == dense
        assert got.dtype == want.dtype and got.tolist() == want.tolist()


@pytest.mark.parametrize("trial", range(5))
def test_gap_cutting_matches_sorting_all_edges(trial):
    busy = IntervalSet.of(*(lambda s: (s, s + RNG.integers(1, 40, s.size)))(RNG.integers(0, 50_000, 2000)))
    gs, ge = busy.gaps(-50, 52_000)
    w0 = np.sort(RNG.choice(np.concatenate((gs, ge, RNG.integers(-50, 52_000, 300))), 40, replace=False))
    windows = IntervalSet.of(w0[0::2], w0[1::2])
    cuts = np.unique(np.concatenate((windows.starts, windows.ends)))
    ps, pe, gap = _cut(gs, ge, cuts)
    gap = np.arange(gs.size) if gap is None else gap
    inside = windows.contains(ps + (pe - ps) // 2)
    rs, re_, rg = ref_cut(gs, ge, cuts, windows)
    assert np.array_equal(ps[inside], rs) and np.array_equal(pe[inside], re_) and np.array_equal(gap[inside], rg)


@pytest.mark.parametrize("trial", range(10))
def test_unfused_attention_search_matches_the_whole_stream_scan(trial):
    n = 3000
    is_gemm = RNG.random(n) < (0.02 + 0.02 * trial)
    is_delim = ~is_gemm & (RNG.random(n) < 0.01 * (trial % 3))
    soft = np.flatnonzero(~is_gemm & ~is_delim & (RNG.random(n) < 0.1))
    dur = RNG.integers(0, 10**5, n)
    assert _unfused_blocks(is_gemm, is_delim, soft, dur) == ref_unfused(is_gemm, is_delim, soft, dur)


# ---------------------------------------------------------------- whole analysis

def _restyle(tl, categorical: bool):
    """The same timeline with its name columns stored the other way (categorical / object)."""
    def conv(df, cols):
        df = df.copy()
        for c in cols:
            df[c] = df[c].astype("category") if categorical else df[c].astype(object)
        return df
    return dataclasses.replace(tl, gpu=conv(tl.gpu, ["kind", "name", "copy_kind"]), host=conv(tl.host, ["name"]),
                               ranges=conv(tl.ranges, ["name", "kind"]))


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], float):
            assert math.isclose(a[k], b[k], rel_tol=1e-12, abs_tol=0), k
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("name,source", [("launch_bound", "nsys"), ("naive_attention", "torch"),
                                         ("x_train_memory_bound", "nsys"), ("host_sync", "torch")])
def test_analysis_does_not_depend_on_how_names_are_stored(fixtures_dir, name, source):
    if source == "nsys":
        tl = read_nsys_sqlite(fixtures_dir / "nsys" / f"{name}.sqlite.gz")
    else:
        tl = read_torch_trace(fixtures_dir / "torch" / f"{name}.pt.trace.json.gz")
    a = timeline_metrics(tl)
    b = timeline_metrics(_restyle(tl, categorical=source == "torch"))
    _same(a.values, b.values)
    assert a.steps_chart == b.steps_chart and a.categories_chart == b.categories_chart and a.notes == b.notes


def test_analysis_does_not_depend_on_host_row_order_of_correlation_ids(fixtures_dir):
    """Host calls reordered by correlation id (unsorted ids) give the same launch join."""
    tl = read_nsys_sqlite(fixtures_dir / "nsys" / "host_sync.sqlite.gz")
    a = timeline_metrics(tl)
    host = tl.host.copy()
    host["correlation"] = host["correlation"].to_numpy()[::-1]  # descending ids: the general join path
    gpu = tl.gpu.copy()
    old_to_new = dict(zip(tl.host["correlation"].to_numpy(), host["correlation"].to_numpy()))
    gpu["correlation"] = [old_to_new.get(c, c) if c >= 0 else c for c in gpu["correlation"].to_numpy()]
    b = timeline_metrics(dataclasses.replace(tl, host=host, gpu=gpu))
    _same(a.values, b.values)


@pytest.mark.parametrize("categorical", [True, False])
def test_kernels_without_a_name_do_not_anchor_kernel_pattern_steps(categorical):
    """Only named kernels define a repeating pattern (groupby leaves missing names out)."""
    from diagnoser.timeline.tables import GPU_COLUMNS, HOST_COLUMNS, RANGE_COLUMNS, Timeline
    rows = [{"kind": "kernel", "name": None if i % 2 == 0 else f"k{i}", "start_ns": 1000 * i, "end_ns": 1000 * i + 400,
             "device": 0, "stream": 7, "correlation": -1, "bytes": 0, "copy_kind": "", "pageable": False,
             "grid": 1, "block": 1} for i in range(40)]
    gpu = pd.DataFrame(rows, columns=list(GPU_COLUMNS)).astype({c: t for c, t in GPU_COLUMNS.items() if t != "object"})
    if categorical:
        gpu["name"] = gpu["name"].astype("category")
    host = pd.DataFrame({c: pd.Series([], dtype=t) for c, t in HOST_COLUMNS.items()})
    ranges = pd.DataFrame({c: pd.Series([], dtype=t) for c, t in RANGE_COLUMNS.items()})
    assert timeline_metrics(Timeline("t", "torch", gpu, host, ranges)).values["step_detection"] == "none"


# ---------------------------------------------------------------- issue 22: linear forms of quadratic loops

def ref_steady_cv(d: np.ndarray) -> float:
    """The direct minimum over every warm-up cut (what steps._steady_cv replaced: a std per cut)."""
    best = float("inf")
    for k in range(0, d.size // 4 + 1):
        rest = d[k:]
        if rest.size >= 2 and rest.mean() > 0:
            best = min(best, float(rest.std() / rest.mean()))
    return best


def test_steady_cv_from_running_sums_is_the_direct_minimum():
    from diagnoser.timeline.steps import _steady_cv
    rng = np.random.default_rng(22)
    for trial in range(1200):
        n = int(rng.integers(0, 300))
        kind = trial % 6
        if kind == 0:
            d = rng.integers(0, 10, n)
        elif kind == 1:
            d = rng.normal(1e6, 1e4, n).astype(np.int64).clip(0)
        elif kind == 2:
            d = np.full(n, 42, dtype=np.int64)
        elif kind == 3:  # slow warm-up intervals first
            d = rng.integers(900, 1100, n)
            d[: n // 5] *= 50
        elif kind == 4:  # an alternating period (MiniWeather's 0.37 / 1 ms)
            d = np.where(np.arange(n) % 2, 370_000, 1_000_000).astype(np.int64)
        else:
            d = (rng.pareto(1.5, n) * 1e9).astype(np.int64)
        assert _steady_cv(d) == ref_steady_cv(d), (kind, n)


@pytest.mark.parametrize("chunk", [1 << 17, 64, 1])  # rows hashed at a time: one chunk, several, one row each
def test_grouping_rows_matches_unique_rows(chunk, monkeypatch):
    """The same groups whether the rows are hashed whole or a chunk at a time (few kernels repeated: most
    chunks hold no new key; many: hashed whole)."""
    from diagnoser.timeline import ops
    from diagnoser.timeline.ops import _group_rows
    monkeypatch.setattr(ops, "GROUP_CHUNK", chunk)
    rng = np.random.default_rng(5)
    for trial in range(60 if chunk > 1 else 10):
        n = int(rng.integers(1, 3000))
        code = rng.integers(-1, 30 if trial % 2 else 2, n)  # -1: a kernel without a name
        grid = rng.integers(0, 6 if trial % 2 else 2, n) * (1 if trial % 3 else 1 << 40)  # wide spans: the sort path
        block = rng.integers(0, 4 if trial % 2 else 1, n) * (1 if trial % 4 else -(1 << 40))
        uniq, inv = np.unique(np.stack([code, grid, block], axis=1), axis=0, return_inverse=True)
        narrow = trial % 5 == 0  # the kernels' name codes and block sizes as the tables hold them (int8, int32)
        got_uniq, got_inv = _group_rows(code.astype(np.int8) if narrow else code, grid,
                                        block.astype(np.int32) if narrow and trial % 4 else block)
        assert np.array_equal(uniq, got_uniq) and np.array_equal(inv.reshape(-1), got_inv)


def ref_parents(start, end) -> np.ndarray:
    parent = np.full(start.size, -1, dtype=np.int64)
    stack: list[int] = []
    for i in range(start.size):
        while stack and end[stack[-1]] < start[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


@pytest.mark.parametrize("shape", ["nested", "touching", "flat", "closing_chain"])
def test_parents_by_pointer_jumping_are_the_stack_walk(shape):
    from diagnoser.timeline.op_tree import parents as _parents
    rng = np.random.default_rng(9)
    for _ in range(40):
        n = int(rng.integers(0, 400))
        if shape == "closing_chain":  # a deep nest that closes before a sibling: past the jump rounds
            s = np.r_[np.arange(n), 3 * n]
            e = np.r_[2 * n - np.arange(n), 3 * n + 1]
        else:
            s = np.sort(rng.integers(0, 1000, n))
            e = s + rng.integers(0, {"nested": 200, "touching": 3, "flat": 1}[shape], n)
        assert np.array_equal(_parents(s, e), ref_parents(s, e))


# ---------------------------------------------------------------- issue 33: degenerate traces in bounded memory

def _synthetic_tiny_kernel_trace(tmp_path, n: int = 3000):
    """A SYNTHETIC trace of n launches, each of one tiny kernel at a steady period (the shape of
    bench_hostile's ten-million-event case, small): every kernel is its own inferred step."""
    events = []
    t = 0
    for i in range(n):
        t += 10 + i % 2
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1,
                       "ts": t, "dur": 2, "args": {"correlation": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t + 3, "dur": 1,
                       "args": {"correlation": i + 1, "device": 0, "stream": 7}})
    path = tmp_path / "synthetic_tiny.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return read_torch_trace(path)


def test_numbered_step_labels_read_as_the_list_they_replace(tmp_path):
    from diagnoser.timeline.steps import NumberedLabels, find_steps
    from diagnoser.timeline.setup import find_setup
    from diagnoser.timeline.view import TimelineView
    tv = TimelineView(_synthetic_tiny_kernel_trace(tmp_path))
    steps = find_steps(tv, find_setup(tv).end_ns)
    assert steps.method == "kernel_pattern" and isinstance(steps.labels, NumberedLabels)
    listed = [f"period {i}" for i in range(steps.count)]
    assert len(steps.labels) == steps.count > 1000
    assert list(steps.labels) == listed and steps.labels == listed
    assert steps.labels[-1] == listed[-1] and steps.labels[5:9] == listed[5:9] and list(steps.labels[5:9]) == listed[5:9]
    assert steps.labels[steps.warmup:][0] == listed[steps.warmup] and steps.labels[::500] == listed[::500]
    with pytest.raises(IndexError):
        steps.labels[steps.count]


@pytest.mark.parametrize("limit", [1, 7, 200, None])
def test_per_step_breakdown_of_the_first_steps_is_the_head_of_every_step(tmp_path, limit):
    """Measuring only the steps returned gives each the figures it had when every step was measured."""
    from diagnoser.timeline import gaps as gaps_module
    from diagnoser.timeline.gaps import device_busy, host_activity, idle_gaps, per_step_breakdown
    from diagnoser.timeline.setup import find_setup
    from diagnoser.timeline.steps import find_steps
    from diagnoser.timeline.view import TimelineView
    tv = TimelineView(_synthetic_tiny_kernel_trace(tmp_path))
    steps = find_steps(tv, find_setup(tv).end_ns)
    dev = device_busy(tv)[0]
    gaps = idle_gaps(dev, steps, host_activity(tv))
    every = per_step_breakdown(dev, steps, gaps)
    assert len(every) == steps.steady.size > 200
    assert sum(sum(r["idle_ns_by_class"].values()) for r in every) > 0
    assert per_step_breakdown(dev, steps, gaps, limit=limit) == every[:limit]
    # the gaps classified and summed a few at a time (chunks of 64 gaps, not GAP_CHUNK): the same figures
    gaps_module.GAP_CHUNK, chunk = 64, gaps_module.GAP_CHUNK
    try:
        assert len(gaps.start) > 64 * 4
        small = idle_gaps(dev, steps, host_activity(tv))
        assert all(np.array_equal(getattr(small, f), getattr(gaps, f)) for f in ("start", "length", "cls", "after_sync", "thread_code", "long_rows", "long_ns", "thread_ids"))
        assert per_step_breakdown(dev, steps, gaps, limit=limit) == every[:limit]
    finally:
        gaps_module.GAP_CHUNK = chunk


@pytest.mark.parametrize("kind", ["categorical", "unsorted categories", "unused categories", "object"])
def test_op_name_codes_from_categories_are_numpys_unique_of_the_ops_texts(kind):
    """find_setup's per-name grouping of the ops sorts the distinct names, not every row's string: per op the
    code np.unique of the ops' texts gives (other rows past the last code)."""
    from diagnoser.timeline.setup import _op_codes
    rows = [f"aten::op{RNG.integers(40)}" for _ in range(2000)]
    is_op = RNG.random(2000) < 0.8
    if kind == "object":
        names = pd.Series(rows, dtype=object)
    else:
        cats = sorted(set(rows)) + (["aten::never", "aaa"] if kind == "unused categories" else [])
        if kind == "unsorted categories":
            cats = cats[::-1]
        names = pd.Series(pd.Categorical(rows, categories=cats))
    uniq, inverse = np.unique(names[is_op].astype(str).to_numpy(), return_inverse=True)
    codes, n = _op_codes(names, is_op)
    # the same groups in the same order (an unused category may take a code: the ops' codes need not be 0..k-1)
    assert np.array_equal(np.unique(codes[is_op], return_inverse=True)[1].reshape(-1), inverse.reshape(-1))
    assert (codes[~is_op] == n).all() and codes[is_op].max() < n


@pytest.mark.parametrize("ordered", [True, False])
def test_first_calls_found_a_chunk_at_a_time_match_one_sort_by_name_and_start(ordered, monkeypatch):
    """Each op name's first call (earliest start, then table order) and the calls per name, scanned 100 rows at a
    time over rows sorted by start, are what one lexsort of every row by (name, start) gives."""
    import diagnoser.timeline.setup as setup
    monkeypatch.setattr(setup, "_FIRST_CHUNK", 100)
    n = 30
    codes = RNG.integers(0, n + 1, 5000).astype(np.int32)  # n: a range that is no op
    start = np.sort(RNG.integers(0, 2000, 5000)) if ordered else RNG.integers(0, 2000, 5000)  # ties within and across chunks
    order = np.lexsort((start, codes))
    head = np.concatenate(([True], codes[order][1:] != codes[order][:-1]))
    want = order[head & (codes[order] < n)]
    firsts, counts = setup._first_rows(codes, n, start)
    assert np.array_equal(firsts, want) and np.array_equal(counts, np.bincount(codes, minlength=n + 1))


def test_launching_threads_from_runs_are_numpys_unique_and_the_most_calls():
    """The distinct threads and the thread with the most calls, found among the runs of one thread (not every
    call), are np.unique's answer and its most frequent id (the lowest among equals)."""
    from types import SimpleNamespace
    from diagnoser.timeline.host_threads import launching_thread, launching_threads
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(1, 500))
        ids = rng.choice(np.array([3, 2662278912, -1, 1 << 40, 7]), int(rng.integers(1, 6)), replace=False)
        th = np.repeat(rng.choice(ids, n), rng.integers(1, 4 if trial % 2 else 40, n))  # runs long and short
        tl = SimpleNamespace(host=pd.DataFrame({"thread": th.astype(np.int64)}))
        uniq, counts = np.unique(th, return_counts=True)
        assert launching_threads(tl).tolist() == uniq.tolist()
        assert launching_thread(tl) == int(uniq[np.argmax(counts)])
    assert launching_thread(SimpleNamespace(host=pd.DataFrame({"thread": np.zeros(0, np.int64)}))) is None


def test_step_graph_op_name_codes_from_categories_are_pandas_factorize_of_the_ops():
    """The step graph's call keys number the ops' names by first appearance (pd.factorize, -1 for a missing name):
    from the Categorical's codes the same numbers, unused categories and other kinds of range left out."""
    from diagnoser.timeline.step_graph import _op_name_codes
    names = [f"aten::op{RNG.integers(30)}" if RNG.random() > 0.05 else None for _ in range(3000)]
    kind = np.where(RNG.random(3000) < 0.7, "op", "annotation")
    cats = sorted({n for n in names if n}, reverse=True) + ["aten::never"]
    r = pd.DataFrame({"name": pd.Categorical(names, categories=cats), "kind": pd.Categorical(kind)})
    want = pd.factorize(r["name"][(r["kind"] == "op").to_numpy()])[0]
    got = _op_name_codes(r)
    assert np.array_equal(got, want) and (want == -1).any()
