"""The regression gate that knows its noise, on real reruns of one program in separate processes (H200,
tools/gen/calibration_pairs.py rerun; docs/compare.md): identical code passes however much the host's
speed moved; an extra kernel of 5% of the GPU work trips it on GPU work; a 5% host delay is within the
host's run-to-run noise and the verdict says so."""
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


def test_a_host_delay_inside_the_host_noise_passes_and_the_launch_finding_is_not_blamed_on_the_code():
    code, gate = _gate("2_host5")
    assert code == 0
    assert any(x.startswith("host work per step +9.6% +/- 200.1%") for x in gate["within_noise"])
    assert any(x.startswith("TRAIN003 (launch_overhead) regressed at critical only because the host ran slower")
               for x in gate["within_noise"])


def test_at_pct_five_a_five_percent_kernel_sits_at_the_limit():
    code, gate = _gate("2_kernel5", "5")
    assert code == 3 and gate["reasons"][0].startswith("GPU work per step +5.1%")
