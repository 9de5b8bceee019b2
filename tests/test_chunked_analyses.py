"""The analyses that work a chunk (or a window) of rows at a time, so that a long timeline's memory peak stays low,
give the figures of their whole-array forms.

On real fixtures (Nsight Systems exports with CPU samples, OS calls, CPU optimizer steps; PyTorch traces with an op
tree, optimizer ranges, copies), every chunk size shrunk to a few rows measures the same metrics, tables and charts
as the defaults; and each piece against a plain reference on synthetic arrays (random intervals, named so).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from diagnoser import ordering
from diagnoser.ingest.nsys_sqlite import read_nsys_sqlite
from diagnoser.ingest.torch_trace import read_torch_trace
from diagnoser.timeline import gaps as gaps_module
from diagnoser.timeline import gil, intervals, kernels, ops, program, setup, step_work, steps, view
from diagnoser.timeline.gaps import LAUNCH, Gaps, HostActivity, CallSpans, classify_gaps
from diagnoser.idle_classes import IDLE_CLASSES
from diagnoser.timeline.intervals import IntervalSet
from diagnoser.timeline.measure import timeline_metrics
from diagnoser.timeline.tables import GPU_COLUMNS, HOST_COLUMNS, RANGE_COLUMNS, Timeline, empty_table

# every chunk (and the few-names cut) the analyses take rows by, shrunk: 5 rows, 7 queries, ...
SMALL = [(gaps_module, "GAP_CHUNK", 5), (intervals, "QUERY_CHUNK", 7), (ops, "GROUP_CHUNK", 3),
         (view, "_TAKE_CHUNK", 4), (kernels, "ROW_CHUNK", 6), (program, "DISTINCT_CHUNK", 2),
         (setup, "_FIRST_CHUNK", 5), (setup, "FEW_NAMES", 0), (step_work, "WAIT_CHUNK", 3), (steps, "STEP_END_CHUNK", 4),
         (ordering, "SORTED_CHUNK", 3), (gil, "GAP_CHUNK", 3)]

FIXTURES = [("nsys", "launch_bound"), ("nsys", "s_cupy_pageable_upload"), ("nsys", "t_train_cpu_adamw"),
            ("nsys", "s_train_gil_thread"), ("nsys", "m_train_convnet_slow_loader"),
            ("torch", "host_sync"), ("torch", "naive_attention"), ("torch", "cal_ho2_gil_thread_before"),
            ("torch", "cal_compile_chain_before"), ("torch", "cal_dataloader_workers_before")]


def _read(fixtures_dir, source: str, name: str) -> Timeline:
    if source == "nsys":
        return read_nsys_sqlite(fixtures_dir / "nsys" / f"{name}.sqlite.gz")
    return read_torch_trace(fixtures_dir / "torch" / f"{name}.pt.trace.json.gz")


def _measured(m) -> dict:
    """What a report is written from: the facts, tables and charts (the step graph as its own fields)."""
    out = {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name not in ("comm", "step_graph", "rank")}
    out["rank"] = repr(m.rank)
    out["comm"] = None if m.comm is None else repr(dataclasses.astuple(m.comm))
    out["step_graph"] = None if m.step_graph is None else repr(m.step_graph)
    return out


@pytest.mark.parametrize("source,name", FIXTURES)
def test_every_chunk_shrunk_measures_the_same(fixtures_dir, monkeypatch, source, name):
    whole = _measured(timeline_metrics(_read(fixtures_dir, source, name)))
    for module, attr, size in SMALL:
        monkeypatch.setattr(module, attr, size)
    chunked = _measured(timeline_metrics(_read(fixtures_dir, source, name)))
    assert whole.keys() == chunked.keys()
    for k in whole:
        assert whole[k] == chunked[k], k


@pytest.mark.parametrize("source,name", FIXTURES)
def test_kernel_rows_kept_as_runs_measure_as_an_index_does(fixtures_dir, monkeypatch, source, name):
    """The kernel table's rows as runs (RowRuns, no index of every row) or as an index array: the same metrics,
    tables and charts. The fixtures' steady rows are one slice each, so every 37th is dropped from the selection
    (synthetic holes, the same for both: the 1M-kernel replicated export has 84 runs)."""
    taken = []
    rows_of = kernels._rows

    def holed(mask):
        mask = mask.copy()
        mask[::37] = False
        taken.append(rows_of(mask))
        return taken[-1]
    monkeypatch.setattr(kernels, "_rows", holed)
    monkeypatch.setattr(kernels, "RUN_ROWS", 10**12)  # never runs
    as_index = _measured(timeline_metrics(_read(fixtures_dir, source, name)))
    assert not any(isinstance(r, view.RowRuns) for r in taken)
    monkeypatch.setattr(kernels, "RUN_ROWS", 1)  # runs wherever the rows are not one slice
    taken.clear()
    as_runs = _measured(timeline_metrics(_read(fixtures_dir, source, name)))
    assert all(isinstance(r, (slice, view.RowRuns)) for r in taken)  # (8 rows less the first: one slice)
    assert as_index.keys() == as_runs.keys()
    for k in as_index:
        assert as_index[k] == as_runs[k], k


def test_the_few_names_median_path_is_the_sorted_one(fixtures_dir, monkeypatch):
    """Start-up medians per name taken over each name's calls alone, or by one sort of the wanted names' calls."""
    tv = view.TimelineView(_read(fixtures_dir, "nsys", "t_train_cpu_adamw"))
    monkeypatch.setattr(setup, "FEW_NAMES", 10_000)
    few = setup.find_setup(tv)
    monkeypatch.setattr(setup, "FEW_NAMES", 0)
    assert repr(setup.find_setup(tv)) == repr(few)


# ------------------------------------------------------------ the pieces, against plain references (synthetic)

def _spans(rng, n: int, horizon: int, longest: int) -> tuple[np.ndarray, np.ndarray]:
    s = np.sort(rng.integers(0, horizon, n))
    return s, s + rng.integers(-3, longest, n)  # (some empty or negative: dropped when merged)


def test_call_spans_merged_around_the_long_gaps_classify_as_every_span_merged(monkeypatch):
    """Synthetic calls and gaps: the launch spans (and every call) meeting the long gaps, merged, give every gap the
    class (and every long gap the launch and CUDA-call shares) that all spans merged give."""
    empty = IntervalSet.of([], [])
    long_launch = long_other = 0
    for trial in range(12):
        rng = np.random.default_rng(trial)
        monkeypatch.setattr(gaps_module, "GAP_CHUNK", int(rng.integers(1, 40)))
        hs, he = _spans(rng, 300, 20_000_000, 60_000)
        calls = rng.random(hs.size) < 0.6
        os_, oe = _spans(rng, 20, 20_000_000, 400_000)  # launching operators (a torch trace's)
        edges = np.unique(rng.integers(0, 21_000_000, 160))
        gs, ge = edges[0:-1:2], edges[1::2]  # disjoint and sorted, some shorter than the launch cutoff
        gs = gs[:ge.size]
        every = IntervalSet.of(np.concatenate((hs[calls], os_)), np.concatenate((he[calls], oe)))
        spans = CallSpans(hs, he, calls, IntervalSet.of(os_, oe))
        long = (ge - gs) > gaps_module.LAUNCH_GAP_MAX_NS.value
        around = spans.around(gs[long], ge[long])
        assert len(around) < len(every)  # (spans inside short gaps or outside every gap left out)
        assert np.array_equal(around.overlap(gs[long], ge[long]), every.overlap(gs[long], ge[long]))
        all_calls = CallSpans(hs, he, None, empty).around(gs[long], ge[long])  # (every call: act.cuda)
        assert np.array_equal(all_calls.overlap(gs[long], ge[long]), IntervalSet.of(hs, he).overlap(gs[long], ge[long]))
        act = HostActivity(empty, empty, every, empty, empty, empty, empty, np.zeros(0, np.int64),
                           np.zeros(0, np.int64), np.zeros(0, np.int64))
        want = classify_gaps(gs, ge, act, empty)
        assert np.array_equal(classify_gaps(gs, ge, dataclasses.replace(act, launch=around), empty), want)
        long_launch += int((want[long] == LAUNCH).sum())
        long_other += int((want[long] != LAUNCH).sum())
    assert long_launch and long_other  # (the shares decided both ways)


def test_call_spans_are_never_classified_unmerged():
    """A HostActivity still holding unmerged spans is refused loudly, not read as no launches."""
    empty = IntervalSet.of([], [])
    spans = CallSpans(np.array([0]), np.array([500_000]), np.array([True]), empty)
    act = HostActivity(empty, empty, spans, empty, empty, empty, empty, np.zeros(0, np.int64), np.zeros(0, np.int64),
                       np.zeros(0, np.int64))
    with pytest.raises(TypeError):
        classify_gaps(np.array([0]), np.array([1_000_000]), act, empty)


@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 16])
def test_gap_sums_a_chunk_at_a_time_are_the_plain_sums(monkeypatch, chunk):
    rng = np.random.default_rng(chunk)
    monkeypatch.setattr(gaps_module, "GAP_CHUNK", chunk)
    s = np.sort(rng.integers(0, 10**15, 1000))
    e = s + rng.integers(0, 10**9, s.size)
    e[[5, 17, 600]] = s[[5, 17, 600]] + [1 << 31, 5 << 32, (1 << 31) - 1]  # (two of 2**31 ns or more, one just under)
    cls = rng.integers(0, len(IDLE_CLASSES), s.size).astype(np.int8)
    long = np.flatnonzero(e - s > (1 << 31) - 1)
    assert long.tolist() == [5, 17]
    g = Gaps(0, s, np.minimum(e - s, (1 << 31) - 1).astype(np.int32), cls, long_rows=long, long_ns=(e - s)[long])
    assert g.ns_by_class() == {c: int((e - s)[cls == i].sum()) for i, c in enumerate(IDLE_CLASSES)}
    sel = rng.random(s.size) < 0.3
    sel[[5, 600]] = True
    assert g.ns(sel) == int((e - s)[sel].sum()) == g.ns(np.flatnonzero(sel))
    assert g.ns(np.zeros(s.size, bool)) == 0 == g.ns(np.zeros(0, np.int64))
    assert np.array_equal(g.ends(), e) and g.ends().dtype == np.int64
    for pick in (sel, np.flatnonzero(sel), np.flatnonzero(sel)[::-1], slice(3, 20), slice(None), np.array([17, 5, 17])):
        assert np.array_equal(g.end_of(pick), e[pick]) and np.array_equal(g.lengths(pick), (e - s)[pick])
        assert np.array_equal(g.spans(pick)[0], s[pick])
    for lo, hi in ((int(s[10]), int(e[40])), (-5, 0), (int(s[-1]), 1 << 62), (int(e[3]), int(e[3]) + 1), (int(s[6]) - 1, int(s[6]))):
        assert np.array_equal(g.overlapping(lo, hi), (e > lo) & (s < hi)), (lo, hi)


@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 16])
def test_sortedness_a_chunk_at_a_time_is_the_plain_test(monkeypatch, chunk):
    """Synthetic arrays, a descent at every position (chunk edges included): as `(a[1:] >= a[:-1]).all()`."""
    monkeypatch.setattr(ordering, "SORTED_CHUNK", chunk)
    for n in (0, 1, 2, 3, 7, 8):
        a = np.arange(n, dtype=np.int64)
        assert ordering.is_sorted(a) and ordering.is_sorted(np.full(n, 5))
        for i in range(1, n):
            b = a.copy()
            b[i] = b[i - 1] - 1
            assert ordering.is_sorted(b) is bool((b[1:] >= b[:-1]).all()) is False


def test_row_runs_are_the_index_they_stand_for():
    """Synthetic masks of runs (single rows, long runs, runs at the edges): take, part, rows_at and positions_of
    against the plain index array."""
    rng = np.random.default_rng(7)
    mask = np.zeros(5_000, bool)
    for a in rng.integers(0, 5_000, 40).tolist():
        mask[a:a + int(rng.integers(1, 300))] = True
    mask[10] = mask[12] = mask[0] = mask[-1] = True  # single rows, the first and the last
    rows = np.flatnonzero(mask)
    runs = view.RowRuns.of_mask(mask)
    values = rng.integers(-10**12, 10**12, mask.size)
    assert len(runs) == rows.size and np.array_equal(runs.take(values), values[rows])
    assert runs.take(values).dtype == values.dtype
    assert np.array_equal(runs.rows_at(np.arange(rows.size)), rows)
    for a, b in [(0, 1), (0, rows.size), (3, 4), (5, 900), (rows.size - 2, rows.size + 10), (7, 7)]:
        got = runs.part(a, b)
        assert np.array_equal(np.arange(mask.size)[got], rows[a:b]), (a, b)
    probe = np.array([-5, 0, 9, 10, 11, 12, 13, 2_500, 4_999, 5_000, 10**6], dtype=np.int64)
    assert np.array_equal(runs.positions_of(probe), np.searchsorted(rows, probe, side="left"))
    assert len(view.RowRuns.of_mask(np.zeros(0, bool))) == 0 == len(view.RowRuns.of_mask(np.zeros(9, bool)))
    assert view.RowRuns.of_mask(np.zeros(0, bool)).take(values).size == 0
    ends = view.RowRuns.of_mask(np.array([True, False, True, True]))  # runs at both ends
    assert ends.starts.tolist() == [0, 2] and ends.stops.tolist() == [1, 4]


@pytest.mark.parametrize("piece", [1, 3, 50, 10**6])
def test_a_union_merged_a_piece_at_a_time_overlaps_as_the_whole_does(piece):
    """Synthetic sorted intervals (overlapping, nested, empty, negative) cut into pieces of `piece` intervals:
    union_overlap is IntervalSet.of(all).overlap for every query."""
    rng = np.random.default_rng(piece)
    s, e = _spans(rng, 600, 10**6, 40_000)
    e[::17] = s[::17] + 200_000  # long ones that swallow the next pieces
    a = np.sort(rng.integers(-1_000, 10**6, 90))
    b = a + rng.integers(0, 60_000, 90)
    pieces = ((s[k:k + piece], e[k:k + piece]) for k in range(0, s.size, piece))
    assert np.array_equal(intervals.union_overlap(pieces, a, b), IntervalSet.of(s, e).overlap(a, b))
    assert np.array_equal(intervals.union_overlap(iter(()), a, b), np.zeros(a.size, np.int64))


def test_launch_durations_past_int32_are_read_whole(fixtures_dir, monkeypatch):
    """step_work's launch-duration cap from int32 durations, and from int64 once one does not fit (a launch
    made to last 3 s on a real trace: synthetic), as a plain percentile of int64 durations gives it."""
    tv = view.TimelineView(_read(fixtures_dir, "torch", "host_sync"))
    st = steps.find_steps(tv)
    want = step_work.step_work(tv, st)
    monkeypatch.setattr(step_work, "WAIT_CHUNK", 5)
    assert step_work.step_work(tv, st) == want
    launch = np.flatnonzero(tv.host_is(*step_work.LAUNCH_KINDS))
    he = tv.host_end.copy()
    he[launch[len(launch) // 2]] = tv.host_start[launch[len(launch) // 2]] + 3 * 10**9
    caps = []
    percentile = np.percentile
    monkeypatch.setattr(step_work.np, "percentile", lambda x, q, **k: caps.append(x.dtype) or percentile(x, q, **k))
    monkeypatch.setattr(tv, "host_end", he, raising=False)
    got = step_work.step_work(tv, st)
    assert caps == [np.dtype(np.int64)]
    assert got.keys() == want.keys()


def _kept_gaps(fixtures_dir, source: str, name: str):
    """A real trace's device, steps, host activity and kept idle gaps, as _utilization builds them."""
    from diagnoser.timeline.measure import _steps_measured
    tl = _read(fixtures_dir, source, name)
    tv = view.TimelineView(tl)
    _, st, _, _ = _steps_measured(tl, tv)
    dev = gaps_module.device_busy(tv)[0]
    act = gaps_module.merged_around(dev, st, gaps_module.host_activity(tv))
    return dev, st, act, gaps_module.idle_gaps(dev, st, act)


def test_kept_gaps_of_2_31_ns_or_more_keep_their_whole_length(fixtures_dir, monkeypatch):
    """A real trace's kept gaps, and the same with the device's work after one gap moved 3 s later (synthetic): the
    long gap's whole length is kept aside, every sum and end exact, whatever the chunk."""
    dev, st, act, kept = _kept_gaps(fixtures_dir, "torch", "host_sync")
    assert kept.length.dtype == np.int32 and not kept.long_rows.size and len(kept) > 10
    i = len(kept) // 2
    at = int(kept.start[i])
    shift = 3 * 10**9
    later = dev.compute.starts > at
    moved = dataclasses.replace(dev, compute=IntervalSet(np.where(later, dev.compute.starts + shift, dev.compute.starts),
                                                         np.where(later, dev.compute.ends + shift, dev.compute.ends)),
                                compute_start=np.where(dev.compute_start > at, dev.compute_start + shift, dev.compute_start))
    stretched = dataclasses.replace(st, end=np.where(st.end > at, st.end + shift, st.end),
                                    start=np.where(st.start > at, st.start + shift, st.start))
    for chunk in (1 << 16, 3):
        monkeypatch.setattr(gaps_module, "GAP_CHUNK", chunk)
        wide = gaps_module.idle_gaps(moved, stretched, act)
        assert wide.long_rows.size >= 1 and int(wide.long_ns.max()) >= shift
        whole = wide.ends() - wide.start
        assert int(whole.max()) >= shift and wide.ns(np.ones(len(wide), bool)) == int(whole.sum())
        assert sum(wide.ns_by_class().values()) == int(whole.sum())


def test_kept_gaps_threads_as_codes_widen_past_127_threads(fixtures_dir, monkeypatch):
    """The kept gaps' launching threads are int8 codes into the ids seen; a trace whose every call is on its own
    thread (a real trace's thread column renumbered so: synthetic) widens them, and the ids read back are the
    same whatever the chunk."""
    dev, st, act, kept = _kept_gaps(fixtures_dir, "nsys", "launch_bound")
    assert kept.thread_code.dtype == np.int8 and 0 < kept.thread_ids.size <= 127
    many = dataclasses.replace(dev, host_thread=np.arange(dev.host_thread.size, dtype=np.int64) + 10**6)
    got = {}
    for chunk in (1 << 16, 7):
        monkeypatch.setattr(gaps_module, "GAP_CHUNK", chunk)
        wide = gaps_module.idle_gaps(many, st, act)
        assert wide.thread_code.dtype in (np.int16, np.int32) and wide.thread_ids.size > 127
        got[chunk] = wide.threads(slice(None))
        assert set(got[chunk].tolist()) <= set(many.host_thread.tolist()) | {-1}
    assert np.array_equal(got[1 << 16], got[7])
    assert np.array_equal(kept.threads(np.arange(len(kept))), kept.thread_ids[kept.thread_code])


@pytest.mark.parametrize("chunk", [1, 5, 1 << 16])
def test_contains_a_chunk_at_a_time_is_the_plain_test(monkeypatch, chunk):
    rng = np.random.default_rng(chunk)
    monkeypatch.setattr(intervals, "QUERY_CHUNK", chunk)
    s, e = _spans(rng, 200, 10**6, 20_000)
    iv = IntervalSet.of(s, e)
    for t in (np.sort(rng.integers(-10, 10**6 + 30_000, 700)), rng.integers(-10, 10**6, 700), np.zeros(0, np.int64)):
        want = np.array([bool(((iv.starts <= x) & (x < iv.ends)).any()) for x in t.tolist()], dtype=bool)
        assert np.array_equal(iv.contains(t), want)
    assert bool(iv.contains(int(iv.starts[0]))) and not bool(iv.contains(int(iv.ends[-1])))


@pytest.mark.parametrize("chunk", [1, 2, 7, 1 << 16])
def test_distinct_names_a_chunk_at_a_time_keep_the_order_they_first_appear(monkeypatch, chunk):
    rng = np.random.default_rng(chunk)
    monkeypatch.setattr(program, "DISTINCT_CHUNK", chunk)
    names = pd.Series(rng.choice(["b", "a", "c", "d", "e"], 500)).astype(pd.CategoricalDtype(["e", "d", "c", "b", "a", "z"]))
    names[rng.random(500) < 0.1] = None
    table = pd.DataFrame({"name": names})
    where = rng.random(500) < 0.5
    assert program._distinct(table) == [str(x) for x in names.dropna().unique()]
    assert program._distinct(table, where=where) == [str(x) for x in names[where].dropna().unique()]


@pytest.mark.parametrize("chunk", [1, 3, 1 << 16])
def test_name_sums_a_chunk_at_a_time_are_groupby_sums(monkeypatch, chunk):
    rng = np.random.default_rng(chunk)
    monkeypatch.setattr(view, "_TAKE_CHUNK", chunk)
    names = pd.Series(rng.choice(["gemm", "softmax", "copy", "zeta"], 400))
    names[rng.random(400) < 0.05] = None
    dur = rng.integers(0, 10**6, 400)
    dur[:3] = 1 << 51  # (past 2**52 in all: the int64 path takes over part-way)
    for categorical in (True, False):
        col = names.astype("category") if categorical else names
        want = pd.DataFrame({"name": col, "dur_ns": dur}).groupby("name", observed=True)["dur_ns"].sum()
        got = view.Names.of(col).sum_by_name(dur)
        assert [str(x) for x in got.index] == [str(x) for x in want.index] and got.tolist() == want.tolist()


def test_only_the_narrowable_columns_may_be_int32():
    """The schema takes int32 host threads and GPU bytes and grids (an export's ids are 24 bits, its sizes fit);
    nowhere else, and no narrower."""
    gpu = empty_table(GPU_COLUMNS).astype({"bytes": "int32", "grid": "int32"})
    host = empty_table(HOST_COLUMNS).astype({"thread": "int32"})
    Timeline("x", "nsys", gpu, host, empty_table(RANGE_COLUMNS)).validate()
    with pytest.raises(ValueError, match="host.thread"):
        Timeline("x", "nsys", gpu, host.astype({"thread": "int16"}), empty_table(RANGE_COLUMNS)).validate()
    with pytest.raises(ValueError, match="ranges.thread"):
        Timeline("x", "nsys", gpu, host, empty_table(RANGE_COLUMNS).astype({"thread": "int32"})).validate()
    with pytest.raises(ValueError, match="gpu.start_ns"):
        Timeline("x", "nsys", gpu.astype({"start_ns": "int32"}), host, empty_table(RANGE_COLUMNS)).validate()


def test_an_export_reads_its_host_threads_as_int32_with_the_same_ids(fixtures_dir):
    tl = read_nsys_sqlite(fixtures_dir / "nsys" / "s_train_gil_thread.sqlite.gz")
    th = tl.host["thread"].to_numpy()
    assert th.dtype == np.int32 and (th >= 0).all()
    assert set(np.unique(th).tolist()) & set(tl.host_threads.os_calls["thread"].tolist())  # joins the OS calls' ids


def _edited_export(src, dest, sql: str):
    """A gzipped fixture export unpacked to dest and changed by one SQL statement (synthetic edits of real data)."""
    import gzip
    import shutil
    import sqlite3
    with gzip.open(src) as f, open(dest, "wb") as out:
        shutil.copyfileobj(f, out)
    with sqlite3.connect(dest) as conn:
        conn.execute(sql)
    return dest


def test_an_export_narrows_copy_sizes_and_grids_only_where_they_fit(fixtures_dir, tmp_path):
    """A real export's copy sizes and grids read as int32, the same values; one copy past 2**31 bytes (the fixture
    edited so: synthetic) keeps the column int64, its size exact."""
    src = fixtures_dir / "nsys" / "s_cupy_pageable_upload.sqlite.gz"
    tl = read_nsys_sqlite(src)
    assert tl.gpu["bytes"].dtype == np.int32 and tl.gpu["grid"].dtype == np.int32
    assert int(tl.gpu["bytes"].sum()) > 0 and int(tl.gpu["grid"].max()) > 0
    wide = read_nsys_sqlite(_edited_export(src, tmp_path / "big_copy.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET "
                                           "bytes = 5000000000 WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_MEMCPY)"))
    assert wide.gpu["bytes"].dtype == np.int64 and int(wide.gpu["bytes"].max()) == 5_000_000_000
    assert wide.gpu["grid"].dtype == np.int32


def test_an_export_narrows_devices_streams_and_blocks_only_where_they_fit(fixtures_dir, tmp_path, monkeypatch):
    """A real export's devices read as int8, its streams and blocks as int16, the same values and the same report
    as read at the schema's int32; a stream id past int16 and a device index past int8 (the fixture edited so:
    synthetic) widen their columns only, values exact."""
    from diagnoser.pipeline import diagnose
    from diagnoser.report.render import render_report
    from diagnoser.timeline import tables
    src = fixtures_dir / "nsys" / "sdpa_attention.sqlite.gz"
    tl = read_nsys_sqlite(src)
    assert (tl.gpu["device"].dtype, tl.gpu["stream"].dtype, tl.gpu["block"].dtype) == (np.int8, np.int16, np.int16)
    assert int(tl.gpu["block"].max()) > 0
    narrow_report = render_report(diagnose([str(src)]), "json")
    schema_only = {"host": tables.NARROWABLE["host"],
                   "gpu": {c: t for c, t in tables.NARROWABLE["gpu"].items() if c in ("bytes", "grid")}}
    with monkeypatch.context() as m:
        m.setattr(tables, "NARROWABLE", schema_only)
        m.setattr("diagnoser.ingest.nsys_tables.NARROWABLE", schema_only)
        wide = read_nsys_sqlite(src)
        assert (wide.gpu["device"].dtype, wide.gpu["stream"].dtype, wide.gpu["block"].dtype) == (np.int32,) * 3
        assert render_report(diagnose([str(src)]), "json") == narrow_report
    for c in ("device", "stream", "block"):
        np.testing.assert_array_equal(tl.gpu[c].to_numpy(), wide.gpu[c].to_numpy())
    ids = read_nsys_sqlite(_edited_export(src, tmp_path / "wide_ids.sqlite", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "
                                          "streamId = 40000, deviceId = 300 WHERE rowid = (SELECT min(rowid) FROM "
                                          "CUPTI_ACTIVITY_KIND_KERNEL)"))
    assert (ids.gpu["device"].dtype, ids.gpu["stream"].dtype, ids.gpu["block"].dtype) == (np.int16, np.int32, np.int16)
    assert int(ids.gpu["stream"].max()) == 40000 and int(ids.gpu["device"].max()) == 300


def test_narrowest_picks_the_first_type_every_part_fits():
    from diagnoser.timeline.tables import narrowest
    assert narrowest("gpu", "device", [np.array([0, 3], np.int32), 0]) == "int8"
    assert narrowest("gpu", "device", [np.array([-1, 200], np.int32)]) == "int16"
    assert narrowest("gpu", "device", [np.array([1 << 20], np.int32)]) is None
    assert narrowest("gpu", "stream", [np.zeros(0, np.int32), 32767]) == "int16"
    assert narrowest("gpu", "stream", [-32769]) is None


@pytest.mark.parametrize("seed", range(6))
def test_merged_places_are_the_stable_sort_of_the_parts(seed, monkeypatch):
    """Sorted parts merged by rank (synthetic starts with many ties, empty parts, chunks smaller than a part)
    place every row where a stable argsort of the concatenation does; unsorted parts are sorted whole."""
    from diagnoser.ingest import nsys_names
    monkeypatch.setattr(nsys_names, "MERGE_CHUNK", 7)
    rng = np.random.default_rng(seed)
    parts = [np.sort(rng.integers(0, 40, size)) for size in rng.integers(0, 60, 4)] + [np.zeros(0, np.int64)]
    if seed % 3 == 2:
        parts[0] = rng.integers(0, 40, 50)  # (not in order)
    bounds = np.cumsum([0] + [p.size for p in parts])
    dest = nsys_names._places(parts, bounds)
    order = np.argsort(np.concatenate(parts), kind="stable")
    expected = np.empty(order.size, np.int64)
    expected[order] = np.arange(order.size)
    if dest is None:
        np.testing.assert_array_equal(expected, np.arange(order.size))
    else:
        np.testing.assert_array_equal(dest, expected)
    following = [np.arange(5), np.arange(4, 9), np.zeros(0, np.int64), np.arange(9, 12)]
    assert nsys_names._places(following, np.cumsum([0] + [p.size for p in following])) is None


def test_the_matches_of_one_categorical_column_are_worked_out_once_for_it_and_its_subsets():
    """Names.of on a categorical column, on subsets of its rows and on a later read of it share the distinct names'
    work (their strings, lower-cased, each pattern's hits); the masks are those of a plain search; the shared
    entry goes with the column's categories."""
    import gc
    import re

    names = ["aten::mm", "ProfilerStep#3", "cudaLaunchKernel", None, "aten::MM", "ncclKernel_AllReduce"]
    col = pd.Series(pd.Categorical(names * 3))
    pattern = re.compile(r"aten::mm|nccl", re.I)
    whole, part = view.Names.of(col), view.Names.of(col[col.index % 2 == 0])
    assert whole._cache is part._cache is view.Names.of(col.copy())._cache
    assert whole.mask(pattern).tolist() == [n is not None and bool(pattern.search(n)) for n in names * 3]
    assert part.mask(pattern).tolist() == [n is not None and bool(pattern.search(n)) for n in (names * 3)[::2]]
    assert ("search", pattern) in whole._cache
    other = view.Names.of(pd.Series(pd.Categorical(["x"])))
    assert other._cache is not whole._cache and not other.mask(pattern).any()
    assert view.Names.of(pd.Series(names, dtype=object))._cache is not whole._cache  # plain columns: their own
    before = len(view._SHARED_CACHES)
    del whole, part, col, other
    gc.collect()
    assert len(view._SHARED_CACHES) < before
