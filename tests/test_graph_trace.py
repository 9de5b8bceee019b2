"""CUDA graphs under Nsight Systems' default `--cuda-graph-trace=graph`: the export holds one
CUPTI_ACTIVITY_KIND_GRAPH_TRACE row per replay and none of the graph's kernels. Real exports (H200,
tools/gen/run_graph_nsys.sh): a batch-1 tiny MLP replayed as a CUDA graph, traced whole and traced by
node, and its eager twin (tools/gen/mech_scenarios.py infer_tiny_mlp_{graph,eager})."""
from __future__ import annotations

import pytest

from diagnoser.ingest.nsys_sqlite import read_nsys_sqlite
from diagnoser.pipeline import diagnose

WHOLE = "fixtures/nsys/g_tiny_mlp_graph_wholegraph.sqlite.gz"
NODES = "fixtures/nsys/g_tiny_mlp_graph_nodes.sqlite.gz"
EAGER = "fixtures/nsys/g_tiny_mlp_eager.sqlite.gz"


def _facts(rep) -> dict:
    return {f.name: f.value for f in rep.facts if f.subject is None}


def test_whole_graph_replays_are_gpu_work_launched_by_their_graph_launch():
    tl = read_nsys_sqlite(WHOLE)
    graphs = tl.gpu[tl.gpu["name"] == "CUDA graph 1 (traced whole)"]
    assert len(graphs) == 20 and (graphs["kind"] == "kernel").all()
    launches = tl.host[tl.host["name"].astype(str).str.startswith("cudaGraphLaunch")]
    assert set(graphs["correlation"]) <= set(launches["correlation"])
    assert any("--cuda-graph-trace=node" in n for n in tl.notes)


def test_graph_replayed_decode_is_no_host_sync_alarm_whichever_way_nsys_traced_it():
    """Before, the whole-graph export read as a GPU idle 98% of the step behind a sync (INFER013
    critical, GPU busy 1.8%): the replays' own time was missing."""
    for path in (WHOLE, NODES):
        rep = diagnose([path])
        assert not [f.rule for f in rep.findings if f.severity in ("critical", "warning")], path
        f = _facts(rep)
        assert f["step_detection"] == "graph_launch" and f["graph_kernel_pct"] > 90
    whole, nodes = _facts(diagnose([WHOLE])), _facts(diagnose([NODES]))
    assert whole["gpu_busy_pct"] >= nodes["gpu_busy_pct"]  # a graph's span also covers its nodes' gaps
    assert any("traced whole" in n for n in diagnose([WHOLE]).notes)


def test_the_eager_twin_is_launch_bound():
    rep = diagnose([EAGER])
    assert rep.findings[0].rule == "INFER003" and rep.findings[0].severity == "critical"
    assert _facts(rep)["gpu_busy_pct"] == pytest.approx(10.5, abs=3)
