"""The step replay's vectorized paths agree with the plain loops they replaced, to the last bit.

`periods` replays the kept calls in runs between blocking calls (in C where the extension is built,
native/replay_periods.c, else in Python) and `fix_marks.elementwise_chains` finds the elementwise runs with numpy: both
are checked against the one-call-at-a-time loops (kept here as the oracles) on the step graphs of real traces, every
fix alone, all of them and none, both bounds, both replay paths, and the chains on random streams too. Both replay
paths also meet the oracle on hand-made steps (no calls, no ops, every call blocking, NaN and inf times) and on
random ones with NaN, inf and -0.0 among their times, double for double.
"""
from __future__ import annotations

import struct
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import FIXTURES
from diagnoser.ingest.torch_trace import read_torch_trace
from diagnoser.native import native_module
from diagnoser.timeline import fix_marks, replay
from diagnoser.timeline.kernels import ATTENTION, GEMM
from diagnoser.timeline.measure import timeline_metrics

# a training step with syncs, a compiled chain, a CUDA graph's launches (many kernels per call), a DDP rank
# (compute and communication streams)
TRACES = ("host_sync.pt.trace.json.gz", "cal_compile_chain_before.pt.trace.json.gz",
          "m_infer_tiny_mlp_graph.pt.trace.json.gz", "ddp_straggler.rank1.pt.trace.json.gz",
          "cal_ho_decode_no_cache_before.pt.trace.json.gz", "cal_dataloader_workers_before.pt.trace.json.gz",
          "cal_graph_decode_before.pt.trace.json.gz")


def ref_periods(g, kinds, bound):
    """Every call and op in order, the fixes' arrays tested one by one (the loop before the runs)."""
    return ref_loop(g, *replay._fixed(g, frozenset(kinds), bound))


def ref_loop(g, gap, dur, blocks, op_dur, keep_op, keep_call, data_floor, node_ns, tail):
    """ref_periods on arrays as `_fixed` gives them (or as a test makes them)."""
    bounds = np.searchsorted(g.op_call, np.arange(gap.size + 1)).tolist()
    gap_l, dur_l, block_l, keep_l = gap.tolist(), dur.tolist(), blocks.tolist(), keep_call.tolist()
    op_dur_l, keep_op_l, stream_l = op_dur.tolist(), keep_op.tolist(), g.op_stream.tolist()
    lag, node = float(g.lag_ns), float(node_ns or 0.0)
    streams: dict[int, float] = {}
    t = gpu_done = 0.0
    host_ends, gpu_ends = [], []
    for _ in range(replay.REPEATS):
        for c in range(len(gap_l)):
            if not keep_l[c]:
                continue
            t += gap_l[c]
            for o in range(bounds[c], bounds[c + 1]):
                if not keep_op_l[o]:
                    continue
                s = stream_l[o]
                ready = t + lag if node_ns is None else 0.0
                start = max(ready, streams.get(s, 0.0) + node)
                end = start + op_dur_l[o]
                streams[s] = end
                if end > gpu_done:
                    gpu_done = end
            if block_l[c]:
                t = max(t + min(dur_l[c], replay.RESUME_NS), gpu_done + replay.RESUME_NS)
            else:
                t += dur_l[c]
        t += tail
        host_ends.append(t)
        gpu_ends.append(gpu_done)
    n = replay.REPEATS - 1
    return (host_ends[-1] - host_ends[0]) / n, (gpu_ends[-1] - gpu_ends[0]) / n, data_floor


def ref_chains(cat, stream):
    out = np.full(cat.size, -1, dtype=np.int64)
    chain = np.isin(cat, fix_marks.CHAIN)
    run = 0
    for s in np.unique(stream):
        rows = np.flatnonzero(stream == s)
        j = 0
        while j < rows.size:
            if not chain[rows[j]]:
                j += 1
                continue
            k = j
            while k + 1 < rows.size and chain[rows[k + 1]]:
                k += 1
            if k > j and (cat[rows[j:k + 1]] == fix_marks.ELEMENTWISE).any():
                out[rows[j:k + 1]] = run
                run += 1
            j = k + 1
    return out


@lru_cache(maxsize=None)
def graph_of(name: str):
    return timeline_metrics(read_torch_trace(FIXTURES / "torch" / name)).step_graph


@pytest.fixture(params=TRACES)
def graph(request):
    return graph_of(request.param)


def test_the_steps_compared_have_blocking_calls_calls_of_many_kernels_streams_and_chains():
    graphs = [graph_of(name) for name in TRACES]
    assert all(g is not None for g in graphs)
    assert any(g.call_blocks.any() for g in graphs)  # runs that end at a blocking call
    assert any(np.bincount(g.op_call).max() > 1 for g in graphs)
    assert any(np.unique(g.op_stream).size > 1 for g in graphs)
    assert any((g.op_chain >= 0).any() for g in graphs)


@pytest.mark.parametrize("path", ["native", "python"])
def test_step_replay_of_every_fix_matches_the_call_by_call_loop(graph, path, monkeypatch):
    if path == "native":
        if native_module() is None:
            pytest.skip("the extension is not built here (or DIAGNOSER_NO_NATIVE is set)")
        calls = []
        real = native_module().replay_periods
        monkeypatch.setattr(replay, "native_module", lambda: type("M", (), {"replay_periods": staticmethod(
            lambda *a: calls.append(1) or real(*a))}))
    else:
        monkeypatch.setattr(replay, "native_module", lambda: None)
    fixes = [kind for kind, _ in replay._FIXES]
    for kinds in [frozenset()] + [frozenset([k]) for k in fixes] + [frozenset(fixes)]:
        for bound in (0, 1):
            graph.periods_run.clear()
            assert repr(replay.periods(graph, kinds, bound)) == repr(ref_periods(graph, kinds, bound)), (kinds, bound)
    graph.periods_run.clear()
    if path == "native":
        assert calls  # the C loop ran


def assert_both_paths_match_the_oracle(g, arrays, monkeypatch):
    """`_periods` on these arrays by the C loop (where it is built) and by the Python loop: ref_loop's doubles."""
    want = bits(ref_loop(g, *arrays))
    if native_module() is not None:
        got = replay._periods(g, *arrays)
        assert bits(got) == want, ("native", got)
    monkeypatch.setattr(replay, "native_module", lambda: None)
    got = replay._periods(g, *arrays)
    assert bits(got) == want, ("python", got)


def bits(periods):
    """The doubles as they are (-0.0 and 0.0 told apart), every NaN as one: which NaN an addition of two NaNs gives
    (x86 keeps one operand's sign) is the compiler's choice of operand order, not the source's (CPython's float
    addition keeps the right one's, the C loop built here the left one's); a report cannot tell NaNs apart."""
    return b"".join(b"nan" if v != v else struct.pack("<d", v) for v in periods)


def hand_made_graph(n_calls, ops_per_call, streams, lag_ns=5_000):
    """A StepGraph as `_periods` reads it (the ops of each call in order, their streams, the launch lag)."""
    op_call = np.repeat(np.arange(n_calls), ops_per_call).astype(np.int64)
    stream = np.resize(np.asarray(streams, np.int64), op_call.size)
    return SimpleNamespace(op_call=op_call, op_stream=stream, lag_ns=lag_ns)


def arrays_of(g, gap, dur, blocks, op_dur, keep_op=None, keep_call=None, node_ns=None, tail=0.0, data_floor=0.0):
    n, m = len(gap), g.op_call.size
    return (np.asarray(gap, float), np.asarray(dur, float), np.asarray(blocks, bool), np.asarray(op_dur, float),
            np.ones(m, bool) if keep_op is None else np.asarray(keep_op, bool),
            np.ones(n, bool) if keep_call is None else np.asarray(keep_call, bool), data_floor, node_ns, tail)


NAN, INF = float("nan"), float("inf")
# (name, graph, arrays): no calls, calls without ops, every call blocking (the last run empty), one blocking call,
# none kept, NaN and inf in the host times, a blocking call's time and the ops' times, a CUDA graph's replay (node)
g3 = hand_made_graph(3, [2, 0, 1], [7, 9])
g1 = hand_made_graph(1, [1], [0])
g0 = hand_made_graph(2, [0, 0], [0])
EDGE_CASES = [
    ("no calls", hand_made_graph(0, [], [0]), lambda g: arrays_of(g, [], [], [], [])),
    ("calls without ops", g0, lambda g: arrays_of(g, [10.0, 20.0], [3.0, 4.0], [False, True], [])),
    ("every call blocking", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [4e3, 5.0, 1e6], [True] * 3, [7e3, 8.0, 9e3])),
    ("one blocking call", g1, lambda g: arrays_of(g, [1.0], [2.0], [True], [5e3])),
    ("no call kept", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [4.0] * 3, [True, False, True], [1.0] * 3,
                                             keep_call=[False] * 3)),
    ("no op kept", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [4.0] * 3, [False, True, False], [1.0] * 3,
                                           keep_op=[False] * 3)),
    ("NaN op", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [4.0] * 3, [False, True, False], [NAN, 8.0, 9.0])),
    ("NaN op then a blocking call", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [4.0] * 3, [True, True, False],
                                                             [1.0, NAN, 9.0])),
    ("NaN blocking time", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [NAN, 4.0, 4.0], [True, False, True], [1.0] * 3)),
    ("NaN gap", g3, lambda g: arrays_of(g, [1.0, NAN, 3.0], [4.0] * 3, [False, True, False], [1.0] * 3)),
    ("inf op", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [4.0] * 3, [True, False, True], [INF, 1.0, 1.0])),
    ("inf and -inf host times", g3, lambda g: arrays_of(g, [INF, 2.0, -INF], [4.0] * 3, [False, True, False],
                                                         [1.0] * 3)),
    ("a graph's replay", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [4.0] * 3, [False, True, False], [5e3, 8.0, 9.0],
                                                 node_ns=300.0, tail=12.5)),
    ("NaN in a graph's replay", g3, lambda g: arrays_of(g, [1.0, 2.0, 3.0], [4.0] * 3, [False, True, False],
                                                        [NAN, 8.0, 9.0], node_ns=300.0)),
    ("NaN tail", g1, lambda g: arrays_of(g, [1.0], [2.0], [False], [5e3], tail=NAN)),
]


@pytest.mark.parametrize("name,g,make", EDGE_CASES, ids=[case[0] for case in EDGE_CASES])
def test_both_replay_paths_give_the_call_by_call_doubles_on_hand_made_steps(name, g, make, monkeypatch):
    assert_both_paths_match_the_oracle(g, make(g), monkeypatch)


@pytest.mark.parametrize("seed", range(40))
def test_both_replay_paths_give_the_call_by_call_doubles_on_random_steps_with_nan_and_inf(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    g = hand_made_graph(n, rng.integers(0, 4, n), rng.integers(0, 3, 200) * 5, lag_ns=int(rng.integers(1_000, 20_000)))
    m = g.op_call.size
    gap, dur, op_dur = rng.exponential(5e3, n), rng.exponential(2e3, n), rng.exponential(8e3, m)
    for a in (gap, dur, op_dur):  # a few odd values where any may come from
        odd = rng.random(a.size) < 0.05
        a[odd] = rng.choice([NAN, INF, -INF, 0.0, -0.0], int(odd.sum()))
    arrays = (gap, dur, rng.random(n) < 0.3, op_dur, rng.random(m) < 0.9, rng.random(n) < 0.9, 0.0,
              float(rng.choice([300.0, 1_500.0])) if rng.random() < 0.3 else None, float(rng.exponential(1e4)))
    assert_both_paths_match_the_oracle(g, arrays, monkeypatch)


def test_the_native_replay_refuses_indices_out_of_range():
    native = native_module()
    if native is None:
        pytest.skip("the extension is not built here (or DIAGNOSER_NO_NATIVE is set)")
    i64, f64 = (lambda *v: np.array(v, np.int64)), (lambda *v: np.array(v, np.float64))
    good = (f64(1.0, 2.0), i64(0), i64(2), i64(0), i64(1), np.zeros(1, np.int8), f64(0.0), i64(0), i64(1), f64(5.0))
    # one call (gap 1, host 2) launching one 5 ns kernel: the host repeats every 3 ns, the GPU every 5 ns
    assert native.replay_periods(*good, 1, 0.0, 0.0, True, 0.0, 4, 2000.0) == (3.0, 5.0)
    for i, bad in ((2, i64(3)), (8, i64(3)), (7, i64(1))):  # a step slice past the steps, an op's time past its run, stream
        args = list(good)
        args[i] = bad
        with pytest.raises(ValueError):
            native.replay_periods(*args, 1, 0.0, 0.0, True, 0.0, 4, 2000.0)
    with pytest.raises(TypeError):
        native.replay_periods(*good[:9], np.zeros(1, np.float32), 1, 0.0, 0.0, True, 0.0, 4, 2000.0)


def test_elementwise_chains_of_real_steps_match_the_run_by_run_loop(graph):
    assert np.array_equal(fix_marks.elementwise_chains(graph.op_cat, graph.op_stream, graph.op_call),
                          ref_chains(graph.op_cat, graph.op_stream))


@pytest.mark.parametrize("seed", range(20))
def test_elementwise_chains_on_random_streams_match_the_run_by_run_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    codes = np.array(sorted(set(fix_marks.CHAIN) | {fix_marks.ELEMENTWISE, GEMM, ATTENTION}))
    cat = rng.choice(codes, n)
    stream = rng.integers(0, 4, n) * 7
    got = fix_marks.elementwise_chains(cat, stream, np.arange(n))
    assert np.array_equal(got, ref_chains(cat, stream))
