"""'Not evaluated' lists rules that missing input keeps from deciding, and only those."""
from __future__ import annotations

from pathlib import Path

from diagnoser.catalogue import catalogue
from diagnoser.engine.evaluate import applicable
from diagnoser.engine.records import build_records
from diagnoser.facts import Fact
from diagnoser.pipeline import diagnose, load_pack

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
