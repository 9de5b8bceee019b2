"""The op tree (diagnoser/timeline/op_tree.py): built once per timeline, read by the op distribution, the per-op
roofline and the idle-gap classes. Synthetic nestings check its parents, top-level ops and innermost-op lookups;
a real trace checks that the tables grouping and compare read are the rows the report draws."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from diagnoser.ingest.torch_trace import read_torch_trace
from diagnoser.result_tables import row_dict
from diagnoser.timeline.analysis import measured_analysis
from diagnoser.timeline.measure import measure_timeline
from diagnoser.timeline.op_tree import OpTree

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_synthetic_nesting_on_two_threads_gives_parents_top_level_and_innermost_ops():
    # thread 7: A [0, 100) holds B [10, 50) (which holds C [20, 30)) and D [60, 90); E [100, 120) starts as A ends
    # and G [10, 15) inside B; thread 3: F [5, 40). Rows given out of order (G shares B's start: the longer first)
    start = [60, 0, 20, 10, 100, 5, 10]
    end = [90, 100, 30, 50, 120, 40, 15]
    thread = [7, 7, 7, 7, 7, 3, 7]
    tree = OpTree.of(start, end, thread)
    names = np.array(["D", "A", "C", "B", "E", "F", "G"])[tree.rows]
    assert names.tolist() == ["F", "A", "B", "G", "C", "D", "E"]  # by thread, start, the longer first on a tie
    parent = {n: (names[p] if p >= 0 else None) for n, p in zip(names, tree.parent)}
    # E starts the instant A ends: A still holds a launch at that instant (its parent), yet E is not within A
    # (it ends after every earlier op): top-level, as the idle-gap classes count the host's operators
    assert parent == {"F": None, "A": None, "B": "A", "G": "B", "C": "B", "D": "A", "E": "A"}
    assert dict(zip(names, tree.top_level)) == {"F": True, "A": True, "B": False, "G": False, "C": False,
                                                "D": False, "E": True}
    at = tree.innermost(np.array([25, 12, 55, 95, 30, 200]), np.array([7, 7, 7, 7, 3, 7]))
    assert [names[j] if j >= 0 else None for j in at] == ["C", "G", "A", "A", "F", None]
    assert tree.innermost(np.array([25]), np.array([99])).tolist() == [-1]  # a thread with no ops


def test_a_real_traces_kernel_and_op_tables_are_the_rows_the_report_draws():
    tl = read_torch_trace(FIXTURES / "torch" / "fp32_matmul.pt.trace.json.gz")
    result = measured_analysis([measure_timeline(tl)])
    assert result.tables.kernels and result.tables.ops and result.tables.steps
    assert result.charts["top_kernels"] == [row_dict(r) for r in result.tables.kernels]
    assert result.charts["top_ops"] == [row_dict(r) for r in result.tables.ops]
    assert [s["dur_ms"] for s in result.charts["steps"]] == [s.dur_ms for s in result.tables.steps]
    # every op with GPU time got it from kernels the tree put inside it: their sum is the kernels' launched time
    assert sum(r.gpu_share_pct for r in result.tables.ops) <= 100.0 + 1e-9
    assert "host_gaps" not in result.charts and result.tables.host_gaps


def _nested(rng, n: int, thread: int) -> list[tuple[int, int, int]]:
    """n properly nested ranges on one thread, opened and closed at random (ties in start: a range opened
    at the instant its parent was, longer than it)."""
    out, stack, t = [], [], 0
    while len(out) < n or stack:
        if len(out) + len(stack) < n and (not stack or rng.random() < 0.55):
            stack.append(t)
        else:
            out.append((stack.pop(), t + 1, thread))
        t += int(rng.integers(0, 3))
    return out


def test_tree_order_and_parents_from_rows_sorted_by_start_match_one_lexsort_and_a_stack_walk(monkeypatch):
    """Rows sorted by start (a table's order: no sort of three keys, ties reordered longest first, threads
    gathered) and rows in any order build the same tree as one lexsort by (thread, start, -end) and a stack
    walk per thread; the first round of pointer jumping 7 ranges at a time finds the same parents."""
    import diagnoser.timeline.op_tree as op_tree
    monkeypatch.setattr(op_tree, "_ROUND_CHUNK", 7)
    rng = np.random.default_rng(3)
    ranges = np.array(_nested(rng, 300, 11) + _nested(rng, 200, 4) + _nested(rng, 5, 2 ** 40), dtype=np.int64)
    for order in (np.argsort(ranges[:, 0], kind="stable"), rng.permutation(len(ranges))):
        start, end, thread = (np.ascontiguousarray(ranges[order, k]) for k in range(3))
        tree = OpTree.of(start, end, thread)
        rows = np.lexsort((-end, start, thread))
        s, e, th = start[rows], end[rows], thread[rows]
        parent, top = np.full(s.size, -1), np.zeros(s.size, bool)
        for t in np.unique(th):
            k = np.flatnonzero(th == t)
            p = op_tree._parents_by_stack(s[k], e[k])
            parent[k] = np.where(p >= 0, p + k[0], -1)
            top[k] = e[k] > np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e[k])[:-1]))
        assert np.array_equal(tree.rows, rows) and np.array_equal(tree.start, s) and np.array_equal(tree.end, e)
        assert np.array_equal(tree.parent, parent) and np.array_equal(tree.top_level, top)
        assert (start[1:] == start[:-1]).any() and parent.max() >= 0  # ties and nesting were exercised


def test_rows_of_the_tree_and_calls_inside_match_a_row_list_and_groupby():
    """The ops' table rows from the tree's indices (`true_rows`, from the few rows that are not ops) are
    `np.flatnonzero(mask)[idx]`; the calls counted inside ranges thread by thread (a mask per thread, no groups)
    are what a groupby by thread counts."""
    from types import SimpleNamespace

    import pandas as pd

    from diagnoser.timeline.op_tree import calls_inside
    from diagnoser.timeline.view import true_rows
    rng = np.random.default_rng(5)
    for p_false in (0.01, 0.3, 0.9):
        mask = rng.random(5000) >= p_false
        idx = rng.integers(0, int(mask.sum()), 700)
        assert np.array_equal(true_rows(mask, idx), np.flatnonzero(mask)[idx])
    host = pd.DataFrame({"thread": rng.choice([3, 9, 2 ** 40], 4000), "start": np.sort(rng.integers(0, 10 ** 6, 4000))})
    tv = SimpleNamespace(tl=SimpleNamespace(host=host), host_start=host["start"].to_numpy())
    for threads in ([3, 9, 2 ** 40, 17], [9]):
        s = rng.integers(0, 10 ** 6, 900)
        ranges = pd.DataFrame({"thread": rng.choice(threads, 900), "start_ns": s, "end_ns": s + rng.integers(0, 5000, 900)})
        want = np.zeros(len(ranges), np.int64)
        for t, g in ranges.groupby("thread", sort=False):
            calls = np.sort(tv.host_start[host["thread"].to_numpy() == t])
            want[g.index] = (np.searchsorted(calls, g["end_ns"], side="right") - np.searchsorted(calls, g["start_ns"]))
        got = calls_inside(ranges, tv)
        assert np.array_equal(got, want) and got.max() > 0
