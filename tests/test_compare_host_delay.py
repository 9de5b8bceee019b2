"""The regression gate's host measure: the host time between ops beyond the process's pace
(diagnoser/timeline/step_work.host_gaps, diagnoser/comparison/noise_gate.host_delay). On real reruns in separate
processes (H200, tools/gen/calibration_pairs.py rerun; docs/compare.md): identical code passes although the
host's speed moved by 10-30% between the processes; a Python busy loop or a sleep of 5% of the step between
two ops trips the gate and the verdict says where; an extra kernel is not mistaken for a host delay."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.comparison.noise_gate import host_delay

T = Path(__file__).resolve().parent.parent / "fixtures" / "torch"


def _gate(program: str, after: str, pct: str = "2"):
    res = CliRunner().invoke(cli, ["compare", str(T / f"cal_gate_{program}_2_base.pt.trace.json.gz"), "--to",
                                   str(T / f"cal_gate_{program}_3_{after}.pt.trace.json.gz"),
                                   "--format", "json", "--fail-on-regression", pct])
    return res.exit_code, json.loads(res.stdout)["gate"]


def _host_line(lines):
    return next(x for x in lines if x.startswith("host time between ops"))


def test_identical_code_in_another_process_passes_on_host_time_between_ops():
    for program, pace, host in (("mlp", "0.90x over 51 gaps", "-25.8%"), ("decode", "0.93x over 407 gaps", "-30.0%")):
        code, gate = _gate(program, "base")
        assert code == 0 and not gate["tripped"]
        line = _host_line(gate["within_noise"])
        assert line.startswith("host time between ops +0.0% +/- 2.5% of the step") and pace in line
        assert line.endswith("within run-to-run noise")
        # the host's own work per step moved by a quarter or more between the two processes, within its noise
        assert any(x.startswith(f"host work per step {host} +/- 20") for x in gate["within_noise"])


def test_a_python_busy_loop_of_five_percent_between_two_ops_trips_and_says_where():
    code, gate = _gate("mlp", "busy5")
    assert code == 3
    assert gate["reasons"] == [
        "host time between ops +4.4% +/- 2.5% of the step (+0.187 ms a step beyond the process's pace, 1.60x over "
        "51 gaps; +0.186 ms before aten::ones_like): worse beyond max(PCT 2%, its noise)"]
    code, gate = _gate("decode", "busy5")
    assert code == 3 and gate["reasons"][0].startswith("host time between ops +4.7% +/- 2.5% of the step (+0.400 ms")
    assert "before aten::index" in gate["reasons"][0]


def test_a_sleep_of_five_percent_trips_at_pct_two_and_five():
    for program, head in (("mlp", "+7.2%"), ("decode", "+6.5%")):
        for pct in ("2", "5"):
            code, gate = _gate(program, "sleep5", pct)
            assert code == 3 and gate["reasons"][0].startswith(f"host time between ops {head} +/- 2.5% of the step")


def test_a_three_percent_loop_that_ran_two_percent_is_within_the_noise():
    code, gate = _gate("mlp", "busy3")
    assert code == 0
    assert _host_line(gate["within_noise"]).startswith("host time between ops +2.0% +/- 2.5%")


def test_at_pct_five_the_busy_loop_of_five_percent_sits_under_the_limit():
    code, gate = _gate("mlp", "busy5", "5")
    assert code == 0 and _host_line(gate["within_noise"]).endswith("within PCT 5%")


def test_an_extra_kernel_trips_on_gpu_work_not_on_the_host():
    code, gate = _gate("mlp", "kernel5")
    assert code == 3 and gate["reasons"][0].startswith("GPU work per step +5.0% +/- 1.0%")
    assert not any(r.startswith("host time") for r in gate["reasons"])
    assert _host_line(gate["within_noise"]).startswith("host time between ops +0.0%")


def test_synthetic_gaps_a_uniformly_slower_process_is_no_delay_and_one_longer_gap_is():
    before = {"step_ms": 10.0, "gaps_us": {f"aten::op#{i}": 10.0 + i for i in range(20)}}
    slower = {"step_ms": 20.0, "gaps_us": {k: 2 * v for k, v in before["gaps_us"].items()}}
    d = host_delay(before, slower)
    assert abs(d["pace"] - 2.0) < 1e-9 and d["ms"] == 0 and d["pct"] == 0
    delayed = {"step_ms": 20.5, "gaps_us": dict(slower["gaps_us"], **{"aten::op#3": 2 * 13.0 + 500.0})}
    d = host_delay(before, delayed)
    assert abs(d["ms"] - 0.5) < 1e-9 and d["at"] == "aten::op#3" and abs(d["pct"] - 2.5) < 1e-9
    assert host_delay(before, {"step_ms": 1.0, "gaps_us": {}}) is None


def test_a_process_whose_host_ran_1_9x_slower_is_no_delay_and_its_launch_finding_is_not_the_codes():
    res = CliRunner().invoke(cli, ["compare", str(T / "cal_gate_mlp_11_base.pt.trace.json.gz"), "--to",
                                   str(T / "cal_gate_mlp_12_base.pt.trace.json.gz"), "--format", "json",
                                   "--fail-on-regression", "2"])
    gate = json.loads(res.stdout)["gate"]
    assert res.exit_code == 0 and not gate["tripped"]
    assert _host_line(gate["within_noise"]).startswith(
        "host time between ops +0.0% +/- 2.5% of the step (+0.002 ms a step beyond the process's pace, 1.89x")
    assert any(x.startswith("host work per step +51.5% +/- 201.2%") for x in gate["within_noise"])
    assert ("TRAIN003 (launch_overhead) new at critical only because the host ran slower (the same kernels per step; "
            "host work +51.5%, within its noise): not a regression of the code") in gate["within_noise"]
