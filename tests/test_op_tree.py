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
