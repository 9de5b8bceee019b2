"""The HTML report of grouped and chained findings: a per-kernel table, the gain-floor and
counted-once notes, the playbook link into the handbook, and how the report was made."""
from __future__ import annotations

from dataclasses import replace

from diagnoser.facts import Subject
from diagnoser.findings import arrange
from diagnoser.pipeline import Report
from diagnoser.report.render import render_html

from test_html_report import _finding, check_html, visible_text


def _kernel_findings() -> list:
    """Synthetic: one latency-bound rule on three kernels (five launches), markup in a kernel name."""
    out = []
    for launch, name, share in (("3", "void softmax<float>(float*)", 4.0), ("4", "void softmax<float>(float*)", 4.0),
                                ("9", "copy_<b>kernel</b>", 2.0), ("12", "tiny", 0.2), ("13", "tiny", 0.2)):
        f = _finding("KERN007", "latency_bound", "warning", "Latency bound", f"{name} waits", share / 100,
                     subject=Subject("kernel", launch, name), tree="kernel",
                     evidence={"sm_throughput_pct": {"value": 40.0, "unit": "%"},
                               "kernel_time_share_pct": {"value": share, "unit": "%"}})
        f.gain_expr, f.gain_env, f.gain_known = "kernel_time_share_pct / 100", {"kernel_time_share_pct": share}, True
        f.gain_of = "GPU time"
        out.append(f)
    return out


def test_grouped_finding_has_a_per_kernel_table_and_the_playbook_link():
    findings = arrange(_kernel_findings())
    assert len(findings) == 1 and len(findings[0].kernels) == 3
    report = Report(inputs=[{"path": "k.ncu-rep", "kind": "ncu-rep"}], findings=findings, not_evaluated=[],
                    settings={"params": [{"rule": "KERN007", "param": "max_sol_pct", "value": 50, "default": 60}],
                              "rule_packs": [], "settings": []})
    html = render_html(report)
    checker = check_html(html)
    text = visible_text(checker)
    assert "3 kernels show this" in text and "Per kernel" in text
    assert html.count("<tr><td><code>") == 3 and "<code>copy_<wbr>&lt;…&gt;</code>" in html and "<b>kernel" not in html
    assert '<a href="playbooks.html#kern007">KERN007 in the handbook</a>' in html
    assert "diagnose playbook KERN007" in text
    assert "--param KERN007.max_sol_pct=50 (default 60)" in text


def test_small_gain_and_shared_time_are_explained_in_html():
    tiny = [replace(f, estimated_gain=0.001, gain_env={"kernel_time_share_pct": 0.1}) for f in _kernel_findings()[3:]]
    both = _finding("TRAIN002", "host_sync", "critical", "Syncs", "syncs", 0.7)
    both.gain_expr, both.gain_env, both.gain_known = "(s_pct + l_pct) / 100", {"s_pct": 10.0, "l_pct": 60.0}, True
    launch = _finding("TRAIN004", "launch_overhead", "warning", "Launch gaps", "gaps", 0.6)
    launch.gain_expr, launch.gain_env, launch.gain_known = "l_pct / 100", {"l_pct": 60.0}, True
    findings = arrange(tiny + [both, launch])
    report = Report(inputs=[], findings=findings, not_evaluated=[])
    text = visible_text(check_html(render_html(report)))
    assert "KERN007 is a warning rule, but its estimated gain is under 1% of GPU time" in text
    assert "TRAIN002 (finding 1) already claims this share of step time; beyond it: 0%" in text
    assert "with the shipped rules, default thresholds and settings" in text
