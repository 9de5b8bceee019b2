"""From the engine's raw findings to the report's list: grouping across kernels, the gain floor
that makes noise info, time explained twice counted once, and message clean-ups."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser import settings
from diagnoser.cli import cli
from diagnoser.engine.evaluate import evaluate
from diagnoser.engine.records import build_records
from diagnoser.facts import Fact, Subject
from diagnoser.findings import Finding, apply_gain_floor, arrange
from diagnoser.catalogue import catalogue
from diagnoser.pipeline import diagnose, load_pack
from diagnoser.report.finding_parts import subject_label
from diagnoser.report.render import render_markdown
from diagnoser.rulespec.expr import budget_names, render_template

ROOT = Path(__file__).resolve().parents[1]
HOST_SYNC_TRACE = ROOT / "fixtures" / "torch" / "host_sync.pt.trace.json.gz"
TRAIN_STEP_NCU = ROOT.parent / "shared" / "corpus" / "ncu" / "train_step.ncu-rep.gz"
LONG_NAME = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)"
             "::[lambda() (instance 3)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, "
             "(unsigned long)2>, (int)4>(int, T1, T2)")


def _finding(rule="R001", severity="warning", gain=0.5, gain_of="step time", subject=None, expr="x_pct / 100",
             env=None) -> Finding:
    """A synthetic finding as the engine makes one."""
    return Finding(rule=rule, name="n", category="c", tree="t", severity=severity, title="T", message="m",
                   evidence={}, estimated_gain=gain, gain_of=gain_of, subject=subject, fix="f", verify="v",
                   gain_expr=expr, gain_env=env if env is not None else {"x_pct": gain * 100}, gain_known=True)


@pytest.mark.skipif(not TRAIN_STEP_NCU.exists(), reason="../shared/corpus (train_step.ncu-rep.gz) is not present")
def test_training_step_ncu_report_reads_in_a_minute_one_finding_per_rule():
    """400 launches, every rule's findings on many kernels: one finding per rule, a bounded report."""
    report = diagnose([str(TRAIN_STEP_NCU)])
    rules = [f.rule for f in report.findings]
    assert len(rules) == len(set(rules)), "one finding per rule"
    grouped = [f for f in report.findings if f.kernels]
    assert grouped, "a rule on several kernels becomes one finding with a per-kernel list"
    for f in grouped:
        assert f.count == sum(k.count for k in f.kernels)
        assert abs(f.estimated_gain - min(1.0, sum(k.estimated_gain for k in f.kernels))) < 1e-9
        assert len({k.subject.name for k in f.kernels}) == len(f.kernels)
    md = render_markdown(report, top=10)
    assert len(md.splitlines()) <= 400
    assert "| kernel | first launch | launches | gain |" in md


def test_rule_on_several_kernels_becomes_one_finding_with_each_kernel():
    raw = [_finding(subject=Subject("kernel", str(i), f"k{i % 3}"), gain=0.004, env={"x_pct": 0.4},
                    expr="x_pct / 100") for i in range(9)]
    [group] = arrange(raw)
    assert len(group.kernels) == 3 and group.count == 9
    assert group.severity == "warning", "9 x 0.4% = 3.6%: above the floor together"
    assert group.evidence["kernels"]["value"] == 3 and group.evidence["launches"]["value"] == 9


def test_gain_under_the_floor_is_info_unless_the_setting_says_otherwise():
    small = _finding(gain=0.004)
    demoted = apply_gain_floor(small)
    assert demoted.severity == "info" and demoted.rule_severity == "warning"
    assert apply_gain_floor(_finding(gain=0.004, gain_of="peak memory")).severity == "warning", "only gains of a time"
    assert apply_gain_floor(_finding(severity="critical", gain=0.02)).severity == "critical"
    with settings.overridden({"findings.warning_min_gain_pct": 0.1}):
        assert apply_gain_floor(small).severity == "warning"
    assert settings.registered()["findings.warning_min_gain_pct"].default == 1.0


def test_host_sync_trace_counts_the_launch_gaps_once():
    """TRAIN002 claims idle_sync_pct + idle_launch_pct; TRAIN004 (after it) claims idle_launch_pct again."""
    report = diagnose([str(HOST_SYNC_TRACE)])
    by_rule = {f.rule: f for f in report.findings}
    first, chained = by_rule["TRAIN002"], by_rule["TRAIN004"]
    assert report.findings[0] is first and chained.estimated_gain > 0.5
    assert chained.overlaps == ["TRAIN002"] and chained.marginal_gain < 0.01
    md = render_markdown(report)
    assert "`TRAIN002` (finding 1) already claims this share of step time; beyond it: <1%" in md or \
        "`TRAIN002` (finding 1) already claims this share of step time; beyond it: 0%" in md


def test_chained_findings_in_either_order_claim_the_shared_share_once():
    both = _finding(rule="A001", severity="critical", gain=0.7, expr="(s_pct + l_pct) / 100",
                    env={"s_pct": 10.0, "l_pct": 60.0})
    launch = _finding(rule="B001", severity="warning", gain=0.6, expr="l_pct / 100", env={"l_pct": 60.0})
    ranked = arrange([launch, both])
    assert [f.rule for f in ranked] == ["A001", "B001"] and ranked[1].marginal_gain == 0.0
    # same severity: what a finding adds beyond the ones above decides its place, not its own gain
    data = _finding(rule="C001", severity="critical", gain=0.2, expr="d_pct / 100", env={"d_pct": 20.0})
    ranked = arrange([_finding(rule="B001", severity="critical", gain=0.6, expr="l_pct / 100", env={"l_pct": 60.0}),
                      data, both])
    assert [(f.rule, round(f.marginal_gain, 3)) for f in ranked] == [("A001", 0.7), ("C001", 0.2), ("B001", 0.0)]
    flipped = arrange([_finding(rule="A001", severity="warning", gain=0.7, expr="(s_pct + l_pct) / 100",
                                env={"s_pct": 10.0, "l_pct": 60.0}),
                       _finding(rule="B001", severity="critical", gain=0.6, expr="l_pct / 100", env={"l_pct": 60.0})])
    assert [f.rule for f in flipped] == ["B001", "A001"] and abs(flipped[1].marginal_gain - 0.1) < 1e-9
    assert budget_names("kernel_time_share_pct / 100 * (100 - sm_pct) / 100") == {"kernel_time_share_pct"}


def test_absent_facts_read_as_one_na():
    assert render_template("top stall {reason} {share:.0f}%; {t:.0f} us", {}) == "top stall n/a; n/a"
    assert render_template("top stall {reason} {share:.0f}%", {"reason": "long_scoreboard", "share": 41.2}) == \
        "top stall long_scoreboard 41%"


def test_kernel_name_is_short_in_the_message_and_full_in_the_evidence():
    """Synthetic latency-bound copy kernel (the rules' own test case) under its real demangled name."""
    subject = Subject("kernel", "11", LONG_NAME)
    values = {"sm_throughput_pct": 41.0, "memory_throughput_pct": 54.0, "sol_max_pct": 54.0, "is_library_kernel": False,
              "theoretical_occupancy_pct": 100.0, "occupancy_achieved_of_theoretical_pct": 71.0, "waves_per_sm": 4.0,
              "grid_sm_fill_pct": 100.0, "kernel_time_share_pct": 5.0, "kernel_duration_us": 200.0,
              "achieved_occupancy_pct": 71.0}
    records, _ = build_records([Fact(k, v, "", "synthetic", subject) for k, v in values.items()])
    findings, _ = evaluate(load_pack().rules, records, catalogue())
    assert findings
    for f in findings:
        assert LONG_NAME not in f.message and "unrolled_elementwise_kernel<\u2026>" in f.message
        assert f.evidence["kernel_name"]["value"] == LONG_NAME


def test_subject_named_like_its_id_is_not_repeated():
    f = _finding(subject=Subject("rank", "1", "rank 1"))
    assert subject_label(f) == ("rank 1", "")
    assert subject_label(_finding(subject=Subject("kernel", "3", "softmax"))) == ("kernel 3", "softmax")


def test_json_report_keeps_the_rule_severity_and_marginal_gain():
    report = json.loads(CliRunner().invoke(cli, [str(HOST_SYNC_TRACE), "--format", "json"]).output)
    chained = next(f for f in report["findings"] if f["rule"] == "TRAIN004")
    assert chained["overlaps"] == ["TRAIN002"] and chained["marginal_gain"] < 0.01
    assert report["findings"][0]["rule"] == "TRAIN002" and report["findings"][0]["marginal_gain"] > 0.7
