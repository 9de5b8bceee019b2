"""OOM mechanisms on real H200 snapshots from tools/gen/oom_mechanisms.py, their healthy twins, and
real snapshots from other projects (../shared/external/mem_snapshots): a temporary buffer is told
from activations by lifetime and stack history, a leak from activations by what survives iterations."""
from __future__ import annotations

import pickle

import pytest

from diagnoser.memory.analysis import analyze_snapshot
from diagnoser.ingest.mem_snapshot import load_snapshot
from diagnoser.pipeline import diagnose
from tests.conftest import FIXTURES, REPO_ROOT

MEM = FIXTURES / "mem"
EXTERNAL = REPO_ROOT.parent / "shared" / "external" / "mem_snapshots"
GIB = float(1 << 30)


def facts_of(path):
    return {f.name: f.value for f in analyze_snapshot(load_snapshot(path)).facts if f.subject is None}


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


@pytest.fixture(scope="module")
def knn_broadcast():
    path = MEM / "o_knn_broadcast.snapshot.pickle.gz"
    return facts_of(path), diagnose([str(path)])


@pytest.fixture(scope="module")
def eval_keeps_graph():
    path = MEM / "o_eval_keeps_graph.snapshot.pickle.gz"
    return facts_of(path), diagnose([str(path)])


def test_knn_by_broadcasting_is_a_temporary_buffer_named_by_line_and_op(knn_broadcast):
    f, report = knn_broadcast
    top = serious(report)[0]
    assert (top.category, top.rule) == ("oom_temporary_buffer", "OOM007")
    assert [x.rule for x in serious(report)] == ["OOM007"]  # not activations, not capacity
    # the failing request: (x_i - x_j).pow(2) at N=1536 points, B=4, C=64 fp32 = 2.25 GiB
    assert f["oom_request_mib"] == 2304 and f["oom_request_op"] == "aten::pow"
    assert f["oom_request_site"].startswith("oom_mechanisms.py:") and f["oom_request_site"].endswith("in knn_broadcast")
    assert f["oom_request_owner"] == "temporaries"  # earlier steps' and layers' pow results died within forward
    # the live difference tensor (still alive at the OOM) is a temporary by its stack's history, not an activation
    assert f["temporaries_gib"] == pytest.approx(2.25, abs=0.01) and f["dominant_owner"] == "temporaries"
    assert f["temporary_site"] == f["oom_request_site"] and f["temporary_site_op"] == "aten::pow, aten::sub"
    assert f["temporary_site_gib"] == pytest.approx(4.5, abs=0.01) and f["temporary_site_share_pct"] > 90
    assert f["needed_without_temporary_site_gib"] < 0.4  # the expected peak once the line is fixed
    ev = top.evidence
    assert ev["temporary_site"]["value"] == f["temporary_site"] and ev["temporary_buffers_share_pct"]["value"] > 90
    assert "knn_broadcast" in top.message and "aten::pow" in top.message and "0.31 GiB" in top.verify
    assert 0.9 < top.estimated_gain <= 1


def test_knn_with_cdist_healthy_twin_raises_no_alarm():
    path = MEM / "o_knn_cdist.snapshot.pickle.gz"
    f = facts_of(path)
    assert f["num_ooms"] == 0 and f["iterations_seen"] >= 6 and f["leak_gib"] == 0
    assert f["peak_allocated_gib"] < 1  # B x N x N instead of B x N x N x C: 0.66 GiB at N=2048
    assert serious(diagnose([str(path)])) == []


def test_eval_loop_keeping_loss_graphs_is_a_leak_not_activations(eval_keeps_graph):
    f, report = eval_keeps_graph
    assert [x.rule for x in serious(report)] == ["OOM003"]  # OOM001 (activations) and OOM004 stay silent
    top = serious(report)[0]
    assert top.category == "oom_memory_leak"
    # no backward ever runs: iterations are model calls, one per batch
    assert f["iterations_seen"] >= 10 and f["iteration_growth_r2"] > 0.99
    assert f["leak_site"].startswith("oom_mechanisms.py:") and f["leak_site"].endswith("in evaluate")
    assert f["leak_iterations"] >= 9 and f["leak_share_pct"] > 85
    assert f["leak_mib_per_iter"] == pytest.approx(1103, rel=0.05)  # one batch's saved activations
    # composition still says what the memory is (saved activations); the leak says why it is there
    assert f["dominant_owner"] == "activations"
    # 31 OOM events: cuDNN's workspace tries are caught; the last one (32 MiB) is the one that raised
    assert f["num_ooms"] == 31 and f["oom_request_mib"] == 32
    assert "no_grad" in top.fix


def test_eval_loop_under_no_grad_healthy_twin_raises_no_alarm():
    path = MEM / "o_eval_no_grad.snapshot.pickle.gz"
    f = facts_of(path)
    assert f["num_ooms"] == 0 and f["iterations_seen"] >= 2 and f["leak_gib"] == 0
    assert f["peak_allocated_gib"] < 1
    assert serious(diagnose([str(path)])) == []


def test_one_forward_of_repeated_layers_is_one_iteration_not_a_leak(fixtures_dir):
    """GPT with 8 identical blocks, OOM in its first forward: blocks share a top-level forward line."""
    f = facts_of(fixtures_dir / "mem" / "activations.snapshot.pickle.gz")
    assert f["iterations_seen"] == 0 and f["leak_gib"] == 0
    assert f["dominant_owner"] == "activations" and f["temporary_buffers_share_pct"] < 5


@pytest.mark.parametrize("name,checks", [
    ("kk_memory_files_memory_ctx128_fullstep.pickle.gz",
     {"gradients_gib": 12.7, "optimizer_state_gib": 25.4, "peak_allocated_gib": 51.2}),
    ("magma27_memory_snapshot.pickle", {"peak_reserved_gib": 13.2}),
])
def test_external_snapshots_without_oom_raise_no_alarm_with_a_sensible_composition(name, checks):
    path = EXTERNAL / name
    if not path.exists():
        pytest.skip("../shared/external/mem_snapshots is not present")
    f = facts_of(path)
    assert f["num_ooms"] == 0 and f["leak_gib"] == 0
    for fact, gib in checks.items():
        assert f[fact] == pytest.approx(gib, abs=0.1), fact
    assert serious(diagnose([str(path)])) == []


def _frames(op, *names):
    cpp = [{"filename": "??", "line": 0, "name": f"at::_ops::{op}::call(at::Tensor const&)"}] if op else []
    return cpp + [{"filename": f"/x/site-packages/torch/{fn}" if "/" in fn else f"/app/{fn}", "line": i + 1,
                   "name": n} for i, (fn, n) in enumerate(names)]


def _write(tmp_path, trace, oom_size, oom_frames=None):
    mib = 1 << 20
    trace = trace + [{"action": "oom", "size": oom_size, "device_free": 1 << 40, "stream": 0,
                      "time_us": 10 * len(trace) + 10, "frames": oom_frames or trace[-1]["frames"]}]
    seg = {"device": 0, "address": 0, "total_size": 1024 * mib, "allocated_size": 0, "active_size": 0,
           "requested_size": 0, "stream": 0, "segment_type": "large", "is_expandable": False,
           "blocks": [{"address": 0, "size": 1024 * mib, "requested_size": 0, "state": "inactive", "frames": []}]}
    path = tmp_path / "synthetic.snapshot.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace], "allocator_settings": {}}))
    return facts_of(path)


def _fwd(op, line="layer.py"):
    return _frames(op, (line, "forward"), ("nn/modules/module.py", "_call_impl"), ("model.py", "forward"),
                   ("nn/modules/module.py", "_call_impl"), ("train.py", "main"))


def test_synthetic_tensor_alive_at_oom_is_temporary_when_its_stack_always_died_in_forward(tmp_path):
    """Synthetic: a stack (same op, same line) allocated and freed 3 times inside one forward, then
    alive at the OOM with a request from the same stack: both are temporaries, the site is named."""
    mib = 1 << 20
    t, trace = 0, []
    for k in range(3):
        trace += [{"action": "alloc", "addr": 0, "size": 100 * mib, "stream": 0, "time_us": len(trace),
                   "frames": _fwd("pow_Tensor_Scalar")},
                  {"action": "free_completed", "addr": 0, "size": 100 * mib, "stream": 0, "time_us": len(trace) + 1,
                   "frames": []}]
    trace.append({"action": "alloc", "addr": 0, "size": 300 * mib, "stream": 0, "time_us": 99,
                  "frames": _fwd("pow_Tensor_Scalar")})
    f = _write(tmp_path, trace, 300 * mib)
    assert f["temporaries_gib"] * 1024 == pytest.approx(300) and f["oom_request_owner"] == "temporaries"
    assert f["temporary_buffers_share_pct"] == pytest.approx(100)
    assert f["temporary_site"] == "layer.py:1 in forward" and f["temporary_site_op"] == "aten::pow"


def test_synthetic_tensor_alive_at_oom_stays_activation_when_its_stack_kept_tensors(tmp_path):
    """Synthetic: the same stack's earlier tensors are still alive (saved for backward): no history of
    dying young, so the live tensor is an activation and the request is not a temporary."""
    mib = 1 << 20
    trace = [{"action": "alloc", "addr": k * 100 * mib, "size": 100 * mib, "stream": 0, "time_us": k,
              "frames": _fwd("addmm")} for k in range(4)]
    f = _write(tmp_path, trace, 100 * mib)
    assert f["activations_gib"] * 1024 == pytest.approx(400) and f["temporaries_gib"] == 0
    assert f["oom_request_owner"] == "activations" and f["temporary_buffers_share_pct"] == 0


def test_synthetic_forward_only_loop_from_two_calling_lines_counts_every_call(tmp_path):
    """Synthetic: a 'prefill' call from one line, then 4 'decode' calls from another; each call embeds
    (a freed 1 MiB buffer at the model's first forward line) and keeps a 64 MiB output (its last line);
    no backward runs: 5 iterations, and the decode line keeps tensors from 3 earlier calls."""
    mib = 1 << 20

    def frames(model_line, caller):
        return [{"filename": "??", "line": 0, "name": "at::_ops::addmm::call(at::Tensor const&)"},
                {"filename": "/app/model.py", "line": model_line, "name": "forward"},
                {"filename": "/x/site-packages/torch/nn/modules/module.py", "line": 1, "name": "_call_impl"},
                {"filename": "/app/gen.py", "line": 7, "name": caller}]

    trace, t = [], 0
    for k, caller in enumerate(["prefill", "decode", "decode", "decode", "decode"]):
        trace += [{"action": "alloc", "addr": 512 * mib, "size": mib, "stream": 0, "time_us": t,
                   "frames": frames(10, caller)},
                  {"action": "free_completed", "addr": 512 * mib, "size": mib, "stream": 0, "time_us": t + 1,
                   "frames": []},
                  {"action": "alloc", "addr": k * 64 * mib, "size": 64 * mib, "stream": 0, "time_us": t + 2,
                   "frames": frames(12, caller)}]
        t += 3
    f = _write(tmp_path, trace, 64 * mib)
    assert f["iterations_seen"] == 5
    assert f["leak_site"] == "gen.py:7 in decode" and f["leak_iterations"] == 3  # the running call is not a leak
    assert f["leak_mib_per_iter"] == pytest.approx(64) and f["leak_alloc_site"] == "model.py:12 in forward"


@pytest.mark.parametrize("name", ["o_knn_broadcast", "o_knn_cdist", "o_eval_keeps_graph", "o_eval_no_grad"])
def test_mechanism_snapshot_facts_are_catalogued_and_bounded(name):
    from diagnoser.memory.analysis import CATALOGUE
    specs = {s.name: s for s in CATALOGUE}
    for fact in analyze_snapshot(load_snapshot(MEM / f"{name}.snapshot.pickle.gz")).facts:
        assert fact.name in specs, fact.name
        if fact.name.endswith("_pct"):
            assert 0 <= fact.value <= 100, fact.name


def test_synthetic_cache_kept_from_one_model_call_into_the_next_is_not_a_temporary(tmp_path):
    """Synthetic: a decode loop (no backward) whose every call grows a cache with torch.cat and frees
    the previous one in the next call. The previous cache outlived the call that made it: state, not
    a temporary, so neither the live cache nor the failing cat counts as one."""
    mib = 1 << 20

    def frames(model_line):
        return [{"filename": "??", "line": 0, "name": "at::_ops::cat::call(at::Tensor const&)"},
                {"filename": "/app/model.py", "line": model_line, "name": "forward"},
                {"filename": "/x/site-packages/torch/nn/modules/module.py", "line": 1, "name": "_call_impl"},
                {"filename": "/app/gen.py", "line": 7, "name": "decode"}]

    trace, t = [], 0
    for k in range(5):
        trace += [{"action": "alloc", "addr": 900 * mib, "size": mib, "stream": 0, "time_us": t, "frames": frames(10)},
                  {"action": "free_completed", "addr": 900 * mib, "size": mib, "stream": 0, "time_us": t + 1,
                   "frames": []},
                  {"action": "alloc", "addr": (k % 2) * 400 * mib, "size": (k + 1) * 64 * mib, "stream": 0,
                   "time_us": t + 2, "frames": frames(12)}]
        if k:
            trace.append({"action": "free_completed", "addr": ((k - 1) % 2) * 400 * mib, "size": k * 64 * mib,
                          "stream": 0, "time_us": t + 3, "frames": []})
        t += 4
    f = _write(tmp_path, trace, 6 * 64 * mib, frames(12))
    assert f["iterations_seen"] == 5
    assert f["temporaries_gib"] == 0 and f["oom_request_owner"] == "activations"
    assert f["temporary_buffers_share_pct"] == 0


def test_eval_leak_message_says_iterations_are_model_calls(eval_keeps_graph):
    f, report = eval_keeps_graph
    assert f["iteration_kind"] == "model call"  # no backward ever ran
    assert "earlier iterations (model calls)" in serious(report)[0].message


def test_synthetic_first_run_of_a_broadcasting_line_is_a_temporary_buffer(tmp_path):
    """Synthetic: user code (no module) keeps 1 GiB of inputs, then one line `(a[:, None] - b[None]).pow(2)`
    runs for the first time: the 3 GiB difference is made, the 3 GiB square fails. No history exists,
    but the failing statement (each op of the line once) is most of what was needed: OOM007."""
    mib = 1 << 20

    def frames(op, line):
        return [{"filename": "??", "line": 0, "name": f"at::_ops::{op}::call(at::Tensor const&)"},
                {"filename": "/app/dist.py", "line": line, "name": "pairwise"}]

    trace = [{"action": "alloc", "addr": 0, "size": 1024 * mib, "stream": 0, "time_us": 1,
              "frames": frames("randn", 4)},
             {"action": "alloc", "addr": 1024 * mib, "size": 3072 * mib, "stream": 0, "time_us": 2,
              "frames": frames("sub_Tensor", 5)}]
    f = _write(tmp_path, trace, 3072 * mib, frames("pow_Tensor_Scalar", 5))
    assert f["oom_statement_gib"] == pytest.approx(6.0) and f["oom_statement_share_pct"] == pytest.approx(600 / 7)
    assert f["temporary_site"] == "dist.py:5 in pairwise" and f["temporary_site_op"] == "aten::pow, aten::sub"
    assert f["needed_without_temporary_site_gib"] == pytest.approx(1.0)
    assert f["unknown_gib"] == pytest.approx(4.0)  # the composition itself does not guess owners


def test_synthetic_loop_line_that_fails_is_not_a_first_run_statement(tmp_path):
    """Synthetic: the failing line already ran (a loop allocating at the same stack): no statement."""
    mib = 1 << 20
    frames = [{"filename": "/app/fill.py", "line": 9, "name": "fill"}]
    trace = [{"action": "alloc", "addr": k * 512 * mib, "size": 512 * mib, "stream": 0, "time_us": k,
              "frames": frames} for k in range(4)]
    f = _write(tmp_path, trace, 512 * mib)
    assert "oom_statement_gib" not in f and f["temporary_buffers_share_pct"] == 0


def test_synthetic_first_run_of_one_huge_op_is_not_called_a_temporary(tmp_path):
    """Synthetic: a first layer's single op asks for 6 GiB with 1 GiB live: no intermediate of the
    line is alive, so nothing says its output would be short-lived (capacity or activations, not OOM007)."""
    mib = 1 << 20
    trace = [{"action": "alloc", "addr": 0, "size": 1024 * mib, "stream": 0, "time_us": 1,
              "frames": [{"filename": "/app/net.py", "line": 3, "name": "build"}]}]
    f = _write(tmp_path, trace, 6144 * mib, [{"filename": "??", "line": 0, "name": "at::_ops::conv2d::call(x)"},
                                               {"filename": "/app/net.py", "line": 8, "name": "stem"}])
    assert "oom_statement_gib" not in f and f["temporary_buffers_share_pct"] == 0
