"""Kernel Speed-of-Light facts and the kernel rule tree on real Nsight Compute reports."""
from __future__ import annotations

import math
from collections import defaultdict

import pytest

from diagnoser.ncu.analysis import CATALOGUE, kernel_analysis
from diagnoser.catalogue import catalogue
from diagnoser.engine.evaluate import evaluate
from diagnoser.engine.records import build_records
from diagnoser.findings import rank
from diagnoser.ingest.ncu_csv import read_ncu_csv
from diagnoser.ingest.ncu_report import read_ncu_report
from diagnoser.pipeline import load_pack

SMALL = {0: "none", 1: "fp32_no_tensor_cores", 2: "uncoalesced_access", 3: "small_grid",
         4: "shared_bank_conflicts", 5: "warp_divergence"}
CORPUS = {0: {"none"}, 1: {"fp32_no_tensor_cores"}, 2: {"low_occupancy", "latency_bound", "memory_bound"},
          3: {"compute_bound"}, 8: {"none"}, 9: {"none"}, 10: {"uncoalesced_access"}, 12: {"small_grid"},
          13: {"local_memory_spill"}, 14: {"shared_bank_conflicts"}, 15: {"warp_divergence"},
          16: {"atomic_contention"}, 17: {"compute_bound", "latency_bound"}}


def _by_subject(result):
    out = defaultdict(dict)
    for f in result.facts:
        out[f.subject.id if f.subject else "run"][f.name] = f.value
    return out


def first_category_per_kernel(report) -> dict[int, str]:
    """Run the shipped rules on one report; the first warning-or-critical category per launch."""
    records, _ = build_records(kernel_analysis([report]).facts)
    findings, _ = evaluate(load_pack().rules, records, catalogue())
    first: dict[int, str] = {launch.id: "none" for launch in report.launches}
    for f in rank(findings):
        if f.subject and f.severity in ("critical", "warning") and first[int(f.subject.id)] == "none":
            first[int(f.subject.id)] = f.category
    return first


@pytest.fixture(scope="module")
def small_report():
    from conftest import FIXTURES
    return read_ncu_report(FIXTURES / "ncu" / "small_kernels.ncu-rep.gz")


def test_small_kernels_first_finding_per_launch_matches_readme_table(small_report):
    assert first_category_per_kernel(small_report) == SMALL


def test_small_kernels_raw_csv_gives_the_same_diagnosis_as_the_binary(small_report, fixtures_dir):
    raw = read_ncu_csv(fixtures_dir / "ncu" / "small_kernels.raw.csv")
    assert first_category_per_kernel(raw) == first_category_per_kernel(small_report)


def test_small_kernels_raw_csv_gives_the_same_facts_as_the_binary(small_report, fixtures_dir):
    binary = _by_subject(kernel_analysis([small_report]))
    csv_ = _by_subject(kernel_analysis([read_ncu_csv(fixtures_dir / "ncu" / "small_kernels.raw.csv")]))
    assert set(binary) == set(csv_)
    for sid, facts in binary.items():
        # the CSV carries no NVIDIA rule results and writes the demangled name its own way
        skip = {"kernel_name", "ncu_top_rule", "ncu_top_rule_speedup_pct", "ncu_top_rule_message", "ncu_sol_verdict"}
        assert set(facts) - skip == set(csv_[sid]) - skip, sid
        for name in set(facts) - skip:
            a, b = facts[name], csv_[sid][name]
            if name in ("dram_bytes", "dram_tbs"):  # the CSV writes a few KB with one digit ("4" KB for 3840 B)
                assert b == pytest.approx(a, rel=0.05, abs=1e-3), (sid, name)
            elif isinstance(a, float):
                assert b == pytest.approx(a, rel=2e-3, abs=1e-3), (sid, name)  # CSV display rounding
            else:
                assert a == b, (sid, name)


def test_corpus_kernels_first_finding_per_launch_matches_readme_table(corpus_dir):
    report = read_ncu_report(corpus_dir / "ncu" / "kernels.ncu-rep.gz")
    got = first_category_per_kernel(report)
    assert len(got) == 18
    for kid, allowed in CORPUS.items():
        assert got[kid] in allowed, (kid, got[kid])


def test_discriminating_facts_on_small_kernels(small_report):
    facts = _by_subject(kernel_analysis([small_report]))
    assert facts["0"]["is_library_kernel"] and facts["0"]["tensor_pipe_pct"] > 50
    assert facts["1"]["tensor_pipe_pct"] < 1 and facts["1"]["fp32_pipe_pct"] > 50
    assert facts["2"]["global_load_efficiency_pct"] == pytest.approx(12.5)
    assert facts["2"]["global_load_sectors_per_request"] == pytest.approx(32)
    assert facts["3"]["grid_blocks_count"] == 1 and facts["3"]["grid_sm_fill_pct"] < 1
    assert facts["4"]["shared_bank_conflict_pct"] > 90
    assert facts["5"]["active_threads_per_warp_count"] == pytest.approx(8, abs=0.2)
    run = facts["run"]
    assert run["kernel_launch_count"] == 6 and run["device_sm_count"] == 132
    shares = sum(f["kernel_time_share_pct"] for k, f in facts.items() if k != "run")
    assert shares == pytest.approx(100)


def test_every_fact_is_catalogued_finite_and_in_range(small_report):
    specs = {s.name: s for s in CATALOGUE}
    result = kernel_analysis([small_report])
    for f in result.facts:
        spec = specs[f.name]
        assert (f.subject is None) == (spec.subject == "run"), f.name
        if spec.type == "number":
            assert isinstance(f.value, float) and math.isfinite(f.value), f.name
            if f.name.endswith("_pct"):
                assert 0 <= f.value <= 100, (f.name, f.value)
        assert f.unit == spec.unit
    chart = result.charts["kernel_sol"]
    assert [p["id"] for p in chart] == [str(i) for i in range(6)]
    assert {"id", "name", "sm_pct", "mem_pct", "time_share_pct", "category"} <= set(chart[0])


def test_analysis_is_deterministic(small_report):
    assert kernel_analysis([small_report]).facts == kernel_analysis([small_report]).facts


def test_basic_set_train_step_has_no_full_set_facts_and_groups_by_kernel(corpus_dir):
    report = read_ncu_report(corpus_dir / "ncu" / "train_step.ncu-rep.gz")
    result = kernel_analysis([report])
    names = {f.name for f in result.facts}
    assert {"sm_throughput_pct", "kernel_time_share_pct", "tensor_pipe_pct", "occupancy_limiter"} <= names
    assert not names & {"shared_bank_conflict_pct", "global_load_efficiency_pct", "dominant_stall_reason",
                        "local_memory_share_pct", "active_threads_per_warp_count"}
    groups = {f.subject.name or f.subject.id for f in result.facts if f.subject}  # launches of one kernel: one name
    assert 1 < len(groups) < 400
    records, _ = build_records(result.facts)
    _, missing = evaluate(load_pack().rules, records, catalogue())
    assert {"KERN004", "KERN005", "KERN006", "KERN010"} <= {m.rule for m in missing}
