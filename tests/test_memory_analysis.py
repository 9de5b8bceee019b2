"""OOM diagnosis: real snapshots get their category first, with the measured owner shares as evidence."""
from __future__ import annotations

import math
import pickle
import re

import pytest

from diagnoser.memory.analysis import CATALOGUE, OWNERS, analyze_snapshot, memory_analysis, phase_of_stack
from diagnoser.ingest.mem_snapshot import load_snapshot
from diagnoser.memory.model import Frame
from diagnoser.ingest.mem_stats import read_memory_stats, read_memory_summary
from diagnoser.pipeline import diagnose

SPECS = {s.name: s for s in CATALOGUE}
CASES = {  # snapshot -> (first category, rule, fact holding the dominant share)
    "activations": ("oom_activations", "OOM001", "activations_share_pct"),
    "optimizer": ("oom_optimizer_state", "OOM002", "optimizer_state_share_pct"),
    "fragmentation": ("oom_fragmentation", "OOM004", "oom_fragmentation_pct"),
    "small_leak": ("oom_memory_leak", "OOM003", "leak_share_pct"),
}


def facts_of(result):
    return {f.name: f.value for f in result.facts if f.subject is None}


def first_serious(report):
    return next(f for f in report.findings if f.severity in ("critical", "warning"))


@pytest.fixture(scope="module")
def analysed(request):
    from tests.conftest import FIXTURES
    return {n: analyze_snapshot(load_snapshot(FIXTURES / "mem" / f"{n}.snapshot.pickle.gz")) for n in CASES}


@pytest.mark.parametrize("name", list(CASES))
def test_oom_snapshot_first_finding_is_its_category_with_the_share_as_evidence(fixtures_dir, name):
    category, rule, share = CASES[name]
    report = diagnose([str(fixtures_dir / "mem" / f"{name}.snapshot.pickle.gz")])
    top = first_serious(report)
    assert (top.category, top.rule) == (category, rule)
    assert share in top.evidence and top.evidence[share]["value"] > 0
    assert 0 < top.estimated_gain <= 1 and top.gain_of == "peak memory"
    assert re.search(r"\d", top.message) and re.search(r"\d", top.verify)


def test_activations_snapshot_is_dominated_by_forward_activations(analysed):
    f = facts_of(analysed["activations"])
    assert f["dominant_owner"] == "activations" and f["activations_share_pct"] > 80
    assert f["parameters_gib"] == pytest.approx(2.0, abs=0.1)  # GPT d=2048 x 8 layers, fp32 weights
    assert f["oom_request_mib"] == 256 and f["memory_limit_is_cap"] is True
    assert f["leak_share_pct"] == 0 and f["oom_reserved_free_to_request_ratio"] < 1


def test_optimizer_snapshot_has_adam_state_twice_the_weights_in_the_making(analysed):
    f = facts_of(analysed["optimizer"])
    assert f["dominant_owner"] == "optimizer_state"
    assert f["parameters_gib"] == pytest.approx(6.0, abs=0.1)  # 24 x 8192^2 fp32
    assert f["gradients_gib"] == pytest.approx(6.0, abs=0.1)
    assert 11 < f["optimizer_state_gib"] < 12  # exp_avg done, exp_avg_sq failing on its last tensor


def test_fragmentation_snapshot_has_free_memory_only_in_small_blocks(analysed):
    f = facts_of(analysed["fragmentation"])
    assert f["oom_request_mib"] == 9
    assert f["oom_largest_free_block_mib"] < f["oom_request_mib"]
    assert f["oom_reserved_free_to_request_ratio"] > 10 and f["oom_fragmentation_pct"] > 99
    assert f["oom_shortfall_gib"] == 0  # it would have fit in the free bytes


def test_small_leak_snapshot_names_the_growing_site_and_bytes_per_iteration(analysed):
    f = facts_of(analysed["small_leak"])
    assert f["leak_site"].startswith("scenarios.py:") and f["leak_iterations"] >= 10
    # kept by the loop that calls the model (`out = model(x)`), allocated by its head
    assert f["leak_site"].endswith("in o_leak") and f["leak_alloc_site"].endswith("in forward")
    assert f["leak_mib_per_iter"] == pytest.approx(64, rel=0.05)  # bf16 logits 8 x 512 x 8192
    assert f["iteration_growth_mib_per_iter"] > 50 and f["iteration_growth_r2"] > 0.8


def test_full_corpus_leak_snapshot_is_a_leak(corpus_dir):
    report = diagnose([str(corpus_dir / "mem" / "leak.snapshot.pickle.gz")])
    top = first_serious(report)
    assert top.category == "oom_memory_leak"
    assert top.evidence["leak_share_pct"]["value"] > 70
    assert top.evidence["leak_mib_per_iter"]["value"] == pytest.approx(64, rel=0.05)


@pytest.mark.parametrize("reader,suffix", [(read_memory_stats, "memory_stats.json"),
                                           (read_memory_summary, "memory_summary.txt")])
@pytest.mark.parametrize("name", ["activations", "optimizer", "fragmentation", "leak"])
def test_counters_give_a_coarser_diagnosis(fixtures_dir, reader, suffix, name):
    path = fixtures_dir / "mem" / f"{name}.{suffix}"
    f = facts_of(memory_analysis([reader(path)]))
    assert f["num_ooms"] == 1 and f["peak_allocated_gib"] > 1
    assert "dominant_owner" not in f and "leak_site" not in f
    report = diagnose([str(path)])
    assert first_serious(report).category == "oom_unattributed"
    skipped = {ne.rule: ne for ne in report.not_evaluated}
    assert "OOM001" in skipped and "_record_memory_history" in skipped["OOM001"].collect


@pytest.mark.parametrize("name", list(CASES))
def test_facts_are_catalogued_finite_and_charts_are_bounded(analysed, name):
    result = analysed[name]
    for fact in result.facts:
        assert fact.name in SPECS, fact.name
        assert re.fullmatch(r"[a-z][a-z0-9_]*", fact.name)
        if isinstance(fact.value, float):
            assert math.isfinite(fact.value)
        if fact.name.endswith("_pct"):
            assert 0 <= fact.value <= 100
    comp = result.charts["memory_composition"]
    assert [c["owner"] for c in comp] == list(OWNERS)
    assert sum(c["share_pct"] for c in comp) == pytest.approx(100, abs=0.01)
    assert 0 < len(result.charts["memory_timeline"]) <= 500
    sites = result.charts["top_sites"]
    assert sites and sites == sorted(sites, key=lambda s: -s["bytes"])
    site_facts = [f for f in result.facts if f.subject is not None]
    assert all(f.subject.kind == "site" and (" in " in f.subject.name or f.subject.name.startswith("<"))
               for f in site_facts)


def test_analysis_is_deterministic(fixtures_dir):
    path = fixtures_dir / "mem" / "small_leak.snapshot.pickle.gz"
    a, b = analyze_snapshot(load_snapshot(path)), analyze_snapshot(load_snapshot(path))
    assert a.facts == b.facts and a.charts == b.charts


def _frames(*names):
    return [{"filename": f"/x/site-packages/torch/{fn}" if "/" in fn else f"/app/{fn}", "line": i + 1, "name": n}
            for i, (fn, n) in enumerate(names)]


def test_synthetic_snapshot_with_truncated_history_still_adds_up(tmp_path):
    """Blocks allocated before the trace window (freed inside it) count as unknown, totals stay exact."""
    mib = 1 << 20
    seg = {"device": 0, "address": 0, "total_size": 64 * mib, "allocated_size": 8 * mib, "active_size": 8 * mib,
           "requested_size": 8 * mib, "stream": 0, "segment_type": "large", "is_expandable": False,
           "blocks": [{"address": 0, "size": 8 * mib, "requested_size": 8 * mib, "state": "active_allocated",
                       "frames": _frames(("nn/modules/module.py", "convert"), ("train.py", "main"))},
                      {"address": 8 * mib, "size": 56 * mib, "requested_size": 0, "state": "inactive",
                       "frames": []}]}
    fwd = _frames(("nn/modules/linear.py", "forward"), ("nn/modules/module.py", "_call_impl"), ("train.py", "main"))
    trace = [
        {"action": "free_completed", "addr": 40 * mib, "size": 16 * mib, "stream": 0, "time_us": 10, "frames": []},
        {"action": "alloc", "addr": 16 * mib, "size": 24 * mib, "stream": 0, "time_us": 20, "frames": fwd},
        {"action": "oom", "size": 64 * mib, "device_free": 1 << 40, "stream": 0, "time_us": 30, "frames": []},
        {"action": "free_completed", "addr": 16 * mib, "size": 24 * mib, "stream": 0, "time_us": 40, "frames": []},
    ]
    path = tmp_path / "synthetic.snapshot.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace], "allocator_settings": {}}))
    f = facts_of(analyze_snapshot(load_snapshot(path)))
    assert f["peak_allocated_gib"] * 1024 == pytest.approx(8 + 24)  # the older 16 MiB went before the 24 came
    assert f["oom_allocated_gib"] * 1024 == pytest.approx(32)
    assert f["activations_gib"] * 1024 == pytest.approx(24) and f["parameters_gib"] * 1024 == pytest.approx(8)
    assert f["oom_largest_free_block_mib"] == pytest.approx(24)  # 40..64 MiB
    assert f["oom_fragmentation_pct"] == 100.0  # nothing free is as large as the 64 MiB request


def test_autograd_engine_thread_allocations_are_backward():
    stack = (Frame("??", 0, "at::empty"), Frame("engine.cpp", 0, "torch::autograd::Engine::thread_main(...)"))
    assert phase_of_stack(stack) == "backward"
    opt = (Frame("/v/site-packages/torch/optim/adam.py", 178, "_init_group"), Frame("/app/t.py", 3, "main"))
    assert phase_of_stack(opt) == "optimizer"
