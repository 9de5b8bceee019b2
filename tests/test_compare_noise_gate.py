"""The regression gate that knows its noise, on real reruns of one program in separate processes (H200,
tools/gen/calibration_pairs.py rerun; docs/compare.md): identical code passes however much the host's
speed moved; an extra kernel of 5% of the GPU work trips it on GPU work; a host delay trips it on the host
time between ops beyond the process's pace, while host work per step stays within its noise."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from diagnoser.cli import cli

T = Path(__file__).resolve().parent.parent / "fixtures" / "torch"
BASE = str(T / "cal_rerun_mlp_1_base.pt.trace.json.gz")


def _gate(after: str, pct: str = "2"):
    res = CliRunner().invoke(cli, ["compare", BASE, "--to", str(T / f"cal_rerun_mlp_{after}.pt.trace.json.gz"),
                                   "--format", "json", "--fail-on-regression", pct])
    return res.exit_code, json.loads(res.stdout)["gate"]


def test_identical_code_in_another_process_passes_with_the_noise_said():
    code, gate = _gate("2_base")
    assert code == 0 and not gate["tripped"]
    lines = gate["within_noise"]
    assert any(x.startswith("GPU work per step -0.4% +/- 1.1%") for x in lines)
    assert any(x.startswith("host work per step -9.4% +/- 200.1%") and "run-to-run noise" in x for x in lines)


def test_an_extra_kernel_of_five_percent_trips_on_gpu_work():
    code, gate = _gate("2_kernel5")
    assert code == 3
    assert gate["reasons"][0].startswith("GPU work per step +5.1% +/- 1.1% (3.14 -> 3.299 ms): worse beyond")
    assert any(r.startswith("kernel spin_kernel is new: 0.157 ms a step, 5.0%") for r in gate["reasons"])


def test_a_host_delay_at_the_step_start_trips_on_host_time_between_ops_not_on_host_work():
    # the first rerun's host delay: a busy-wait before the step's first op of 5% of the unprofiled step
    # (3.3% of the profiled one); host work per step cannot tell it from the process's speed, the time
    # between ops beyond the process's pace can (tests/test_compare_host_delay.py: the later reruns)
    code, gate = _gate("2_host5")
    assert code == 3
    assert gate["reasons"][0].startswith("host time between ops +3.3% +/- 2.5% of the step (+0.161 ms a step")
    assert "before aten::linear" in gate["reasons"][0]
    assert any(x.startswith("host work per step +9.6% +/- 200.1%") for x in gate["within_noise"])
    # the launch finding that got worse with it is the code's now: its host work changed
    assert "TRAIN003 (launch_overhead) regressed at critical" in gate["reasons"]


def test_at_pct_five_a_five_percent_kernel_sits_at_the_limit():
    code, gate = _gate("2_kernel5", "5")
    assert code == 3 and gate["reasons"][0].startswith("GPU work per step +5.1%")
