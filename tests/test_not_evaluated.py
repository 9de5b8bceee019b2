"""'Not evaluated' lists rules that missing input keeps from deciding, and only those; 'not applicable'
the rules the inputs show have nothing to act on (no GEMMs, no OOM, no KV cache), with the reason."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnoser.catalogue import catalogue
from diagnoser.engine.evaluate import applicable, evaluate
from diagnoser.engine.records import build_records
from diagnoser.facts import Fact
from diagnoser.findings import NotApplicable, NotEvaluated
from diagnoser.pipeline import diagnose, load_pack
from diagnoser.report.render import render_report

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_inference_trace_lists_no_training_rule_as_not_evaluated():
    report = diagnose([FIX / "torch" / "x_infer_fp32.pt.trace.json.gz"])
    assert not [n.rule for n in report.not_evaluated if n.tree == "train-slow"]


def test_counters_only_input_names_the_snapshot_it_needs():
    report = diagnose([FIX / "mem" / "leak.memory_stats.json"])
    missing = {n.rule: n for n in report.not_evaluated}
    assert {"OOM001", "OOM003"} <= set(missing)
    assert "_dump_snapshot" in missing["OOM003"].collect


def test_synthetic_missing_required_fact_is_listed_unless_present_facts_rule_it_out():
    pack = load_pack()
    cat = catalogue()
    # synthetic: a training run without copy facts -> the pageable-copy rule cannot decide
    train, _ = build_records([Fact("workload_kind", "training", "", "synthetic"), Fact("gpu_busy_pct", 50.0, "%", "synthetic")])
    _, skipped = applicable(pack.rules.values(), train, cat)
    assert "TRAIN007" in {n.rule for n in skipped}
    infer, _ = build_records([Fact("workload_kind", "inference", "", "synthetic"), Fact("gpu_busy_pct", 50.0, "%", "synthetic")])
    _, skipped = applicable(pack.rules.values(), infer, cat)
    assert "TRAIN007" not in {n.rule for n in skipped}


# --- not applicable: the inputs show what a rule is about is absent (diagnoser/absence.py) ---

SHARED = Path(__file__).resolve().parents[2] / "shared"
MW_NOASYNC = SHARED / "external" / "ncar" / "MW_noasync.sqlite.gz"
NO_OOM_SNAPSHOTS = sorted((SHARED / "external" / "mem_snapshots").glob("*.pickle*"))


@pytest.mark.skipif(not MW_NOASYNC.exists(), reason="../shared/external/ncar/MW_noasync.sqlite.gz is not present")
def test_miniweather_export_is_not_asked_for_what_it_is():
    """NCAR MiniWeather (OpenACC Fortran, an Nsight Systems export) runs no GEMM and no attention: the
    GEMM and KV-cache rules (INFER015) are not applicable, with the reason (INFER030, PyTorch's own, is silent), and nothing asks to collect the export
    it is; INFER016 needs INFER004, which was evaluated and did not fire."""
    report = diagnose([str(MW_NOASYNC)])
    assert not report.not_evaluated, [(n.rule, n.missing) for n in report.not_evaluated]
    na = {n.rule: n for n in report.not_applicable}
    assert "GEMM" in na["INFER014"].reason and "gemm_no_tensor_core_step_pct" in na["INFER014"].missing
    assert "KV cache" in na["INFER015"].reason
    # decoding without a KV cache (issue 29) is PyTorch's own mechanism: silent on an OpenACC program
    assert "INFER030" not in {f.rule for f in report.findings} and "INFER030" not in {n.rule for n in report.not_evaluated}
    assert "INFER016" not in na
    doc = json.loads(render_report(report, "json"))
    assert doc["not_evaluated"] == [] and {n["rule"] for n in doc["not_applicable"]} == {"INFER014", "INFER015"}
    md = render_report(report, "md")
    assert "## Not applicable" in md and "## Not evaluated" not in md and "nsys export" not in md
    assert "Not applicable" in render_report(report, "terminal") and 'id="not-applicable"' in render_report(report, "html")


@pytest.mark.skipif(not NO_OOM_SNAPSHOTS, reason="../shared/external/mem_snapshots is not present")
@pytest.mark.parametrize("snapshot", NO_OOM_SNAPSHOTS, ids=lambda p: p.name)
def test_snapshot_without_oom_shows_the_peak_breakdown_in_every_format(snapshot):
    """Snapshots taken without an OOM: the Markdown and the terminal show the composition at the peak and the
    top allocation sites the HTML draws; the OOM-event rule is not applicable, never 'dump it after the OOM'."""
    report = diagnose([str(snapshot)])
    assert [f.value for f in report.facts if f.name == "num_ooms"] == [0]
    assert "OOM004" in {n.rule for n in report.not_applicable}
    assert not [n for n in report.not_evaluated if "after the OOM" in n.collect]
    owners = [r["owner"].replace("_", " ") for r in report.charts["memory_composition"] if r["bytes"] > 0]
    sites = [r["site"] for r in report.charts["top_sites"]]
    md, term, html = (render_report(report, fmt) for fmt in ("md", "terminal", "html"))
    for text in (md, term):
        assert "Memory composition at the peak" in text and "Top allocation sites" in text
        assert all(o in text for o in owners) and all(s[:40] in text for s in sites)
    assert "Memory composition at the peak" in html and "Top allocation sites" in html
    assert "## Not applicable" in md and "no OOM happened" in md


def test_synthetic_absent_gemms_are_not_applicable_only_where_the_input_records_kernels():
    """Synthetic inference records without GEMM facts: a timeline (which records every kernel) with
    gemm_time_pct 0 has no GEMMs; an input that records no kernels cannot tell."""
    pack, cat = load_pack(), catalogue()
    records, _ = build_records([Fact("workload_kind", "inference", "", "synthetic"), Fact("gemm_time_pct", 0.0, "%", "synthetic"),
                                Fact("tensor_core_dtypes", "fp16", "", "synthetic")])
    _, timeline = applicable(pack.rules.values(), records, cat, kinds=["nsys-sqlite"])
    assert isinstance(next(n for n in timeline if n.rule == "INFER014"), NotApplicable)
    _, unknown = applicable(pack.rules.values(), records, cat, kinds=[])
    assert isinstance(next(n for n in unknown if n.rule == "INFER014"), NotEvaluated)
    with_gemms, _ = build_records([Fact("workload_kind", "inference", "", "synthetic"), Fact("gemm_time_pct", 30.0, "%", "synthetic"),
                                   Fact("tensor_core_dtypes", "fp16", "", "synthetic")])
    _, some = applicable(pack.rules.values(), with_gemms, cat, kinds=["nsys-sqlite"])
    assert isinstance(next(n for n in some if n.rule == "INFER014"), NotEvaluated), "GEMMs ran: it needs the split"


def test_synthetic_kv_cache_rule_is_not_applicable_without_attention_and_not_evaluated_with_it():
    pack, cat = load_pack(), catalogue()

    def skipped(attention_pct):
        records, _ = build_records([Fact(n, v, "", "synthetic") for n, v in (
            ("workload_kind", "inference"), ("kv_cache_paged", False), ("kernel_attention_pct", attention_pct),
            ("unfused_attention_pct", 0.0))])
        return {n.rule: n for n in applicable(pack.rules.values(), records, cat, kinds=["torch-trace"])[1]}
    assert isinstance(skipped(0.0)["INFER015"], NotApplicable)
    assert isinstance(skipped(12.0)["INFER015"], NotEvaluated) and "profile_memory=True" in skipped(12.0)["INFER015"].collect


def test_synthetic_rule_needing_a_finding_that_did_not_fire_is_decided():
    """INFER016 needs INFER004's finding and memory_headroom_pct: with INFER004 evaluated and not firing
    (kernels far from tiny), no memory input would change INFER016."""
    pack, cat = load_pack(), catalogue()
    facts = [("workload_kind", "inference"), ("gpu_busy_pct", 30.0), ("kernel_median_us", 80.0), ("short_kernel_pct", 5.0),
             ("idle_launch_pct", 10.0), ("kernels_per_step", 100.0), ("graph_kernel_pct", 0.0)]
    records, _ = build_records([Fact(n, v, "", "synthetic") for n, v in facts])
    _, skipped = evaluate(pack.rules, records, cat, kinds=["torch-trace"])
    assert "INFER016" not in {n.rule for n in skipped}
    tiny, _ = build_records([Fact(n, v, "", "synthetic") for n, v in facts[:2] + [("kernel_median_us", 4.0),
                                                                                   ("short_kernel_pct", 95.0)] + facts[4:]])
    findings, skipped = evaluate(pack.rules, tiny, cat, kinds=["torch-trace"])
    assert "INFER004" in {f.rule for f in findings} and "INFER016" in {n.rule for n in skipped}
