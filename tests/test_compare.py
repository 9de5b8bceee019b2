"""`diagnose compare`: per-finding verdicts, headline numbers and the CI gate on real before/after pairs
(fixtures/ and, when present, ../shared/external), plus verify_check validation and the gate's noise floor."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.comparison.core import SCHEMA, compare_runs
from diagnoser.comparison.gate import gate
from diagnoser.comparison.sides import step_noise
from diagnoser.comparison.verdicts import check_verify
from diagnoser.pipeline import load_pack

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures"
T, M = FIX / "torch", FIX / "mem"
SHARED = ROOT.parent / "shared" / "external"


@pytest.fixture(scope="module")
def pack():
    return load_pack()


def verdicts(c) -> dict:
    return {f["rule"]: f["verdict"] for f in c["findings"]}


def headline(c, fact) -> dict:
    return next(h for h in c["headlines"] if h["fact"] == fact)


# (before, after, {rule: verdict}, headline fact that must move the right way)
PAIRS = [
    (T / "m_train_convnet_slow_loader.pt.trace.json.gz", T / "m_train_convnet_gpu_batches.pt.trace.json.gz",
     {"TRAIN001": "fixed"}, "step_time_ms_p50"),
    (T / "m_train_convnet_fp32.pt.trace.json.gz", T / "m_train_convnet_bf16.pt.trace.json.gz",
     {"TRAIN008": "fixed"}, "step_time_ms_p50"),
    (T / "m_infer_einsum_attention.pt.trace.json.gz", T / "m_infer_sdpa_attention.pt.trace.json.gz",
     {"INFER001": "fixed", "INFER008": "fixed"}, "step_time_ms_p50"),
    (T / "naive_attention.pt.trace.json.gz", T / "sdpa_attention.pt.trace.json.gz",
     {"INFER001": "fixed"}, "kernel_time_ms_per_step"),
    (T / "m_power_iteration_readback.pt.trace.json.gz", T / "m_power_iteration_check_every_50.pt.trace.json.gz",
     {"INFER013": "fixed"}, "gpu_busy_pct"),
    (T / "m_train_unet_no_cache.pt.trace.json.gz", T / "m_train_unet_cached.pt.trace.json.gz",
     {"TRAIN014": "fixed"}, "step_time_ms_p50"),
    (T / "m_setup_convnet_from_start.pt.trace.json.gz", T / "m_setup_convnet_scheduled.pt.trace.json.gz",
     {"TRAIN015": "fixed"}, "gpu_busy_pct"),
    (T / "p_opt_single_tensor.pt.trace.json.gz", T / "p_opt_fused.pt.trace.json.gz",
     {"TRAIN010": "fixed"}, "step_time_ms_p50"),
    (M / "o_eval_keeps_graph.snapshot.pickle.gz", M / "o_eval_no_grad.snapshot.pickle.gz",
     {"OOM003": "fixed"}, "peak_allocated_gib"),
    (M / "o_knn_broadcast.snapshot.pickle.gz", M / "o_knn_cdist.snapshot.pickle.gz",
     {"OOM007": "fixed"}, "peak_allocated_gib"),
]


@pytest.mark.parametrize("before,after,expected,moved", PAIRS, ids=[p[0].name.split(".")[0] for p in PAIRS])
def test_real_fixture_pairs(pack, before, after, expected, moved):
    c = compare_runs([str(before)], [str(after)], pack)
    assert c["schema"] == SCHEMA
    got = verdicts(c)
    for rule, verdict in expected.items():
        assert got.get(rule) == verdict, (rule, got)
        f = next(f for f in c["findings"] if f["rule"] == rule)
        assert f["verify_check"]["holds"] is True and f["verify_check"]["checks"], f
    assert headline(c, moved)["moved"] == "right"
    # reversed, the fix is undone: the finding is new in AFTER and the gate trips
    r = compare_runs([str(after)], [str(before)], pack)
    assert all(verdicts(r).get(rule) == "new" for rule in expected), verdicts(r)
    assert gate(r, 5.0)


def test_same_run_twice_is_no_regression(pack):
    p = str(T / "m_train_convnet_bf16.pt.trace.json.gz")
    c = compare_runs([p], [p], pack)
    assert set(verdicts(c).values()) <= {"unchanged"}
    assert all(h["moved"] == "same" for h in c["headlines"])
    assert gate(c, 5.0) == []


def test_cli_json_gate_and_html(tmp_path):
    runner = CliRunner()
    before, after = T / "m_train_convnet_fp32.pt.trace.json.gz", T / "m_train_convnet_bf16.pt.trace.json.gz"
    res = runner.invoke(cli, ["compare", str(before), "--to", str(after), "--format", "json", "--fail-on-regression", "5"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "diagnoser.compare/1" and doc["gate"]["tripped"] is False
    step = headline(doc, "step_time_ms_p50")
    assert step["speedup"] > 5 and step["better"] == "lower"
    res = runner.invoke(cli, ["compare", str(after), "--to", str(before), "--fail-on-regression", "5"])
    assert res.exit_code == 3 and "step time" in res.output
    out = tmp_path / "c.html"
    res = runner.invoke(cli, ["compare", str(before), "--to", str(after), "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert "chart-steps-before" in html and "chart-steps-after" in html and "TRAIN008" in html
    res = runner.invoke(cli, ["compare", str(before), "--to", str(tmp_path / "missing.json")])
    assert res.exit_code == 1


def test_gate_noise_floor():
    """A headline worse by less than the step-to-step noise never trips; beyond max(PCT, noise) it does."""
    c = {"headlines": [{"fact": "step_time_ms_p50", "label": "step time", "unit": "ms", "before": 10.0, "after": 10.8,
                        "change_pct": 8.0, "better": "lower", "noise_pct": 12.0}], "kernels": [], "findings": []}
    assert gate(c, 5.0) == []
    c["headlines"][0]["noise_pct"] = 2.0
    assert gate(c, 5.0) and gate(c, 10.0) == []


def _step(dur_ms):
    from diagnoser.result_tables import StepRow
    return StepRow("synthetic", 0.0, dur_ms, dur_ms, {})


def test_step_noise():
    steps = [_step(v) for v in (10, 10.5, 9.5, 10, 10)]
    pct, basis = step_noise(steps)
    assert pct == pytest.approx(10.0) and "range of 5" in basis
    many = [_step(10.0)] * 18 + [_step(30.0), _step(1.0)]  # p10..p90 ignores the outliers
    assert step_noise(many)[0] < 100
    assert step_noise([_step(5)])[0] == 0.0


def test_check_verify_ops(pack):
    rule = pack.rules["KERN013"]
    ok = check_verify(rule, {"kernel_duration_us": 10.0, "sol_bound_side": "sm"},
                      {"kernel_duration_us": 6.0, "sol_bound_side": "memory"})
    assert ok["holds"] is True
    slower = check_verify(rule, {"kernel_duration_us": 10.0}, {"kernel_duration_us": 12.0, "sol_bound_side": "memory"})
    assert slower["holds"] is False
    unknown = check_verify(pack.rules["TRAIN001"], {"idle_data_pct": 50.0}, {})
    assert unknown["holds"] is None


def test_every_shipped_rule_has_verify_check(pack):
    assert all(r.verify_check for r in pack.rules.values() if r.shipped)


def test_validate_requires_verify_check(tmp_path, monkeypatch):
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    text = (rules / "train_slow.yaml").read_text()
    first = next(line for line in text.splitlines() if line.startswith("    verify_check:"))
    (rules / "train_slow.yaml").write_text(text.replace(first + "\n", "", 1))
    monkeypatch.setattr("diagnoser.resources.rules_dir", lambda: rules)
    res = CliRunner().invoke(cli, ["rules", "validate", str(rules)])
    assert res.exit_code == 1 and "missing `verify_check`" in res.output


def test_validate_checks_verify_check_params(tmp_path):
    bad = tmp_path / "mine.yaml"
    bad.write_text("""tree: mine
rules:
  - id: MINE001
    name: my-rule
    title: A rule of mine
    category: input_pipeline
    severity: warning
    params: {min_idle_data_pct: 20}
    when: {all: [{fact: idle_data_pct, op: gte, param: min_idle_data_pct}]}
    message: "{idle_data_pct}"
    fix: "fix it"
    verify: "idle_data_pct falls"
    verify_check: [{fact: idle_data_pct, op: lt, param: no_such_param}]
""")
    res = CliRunner().invoke(cli, ["rules", "validate", str(bad)])
    assert res.exit_code == 1 and "no_such_param" in res.output


# ---------------------------------------------------------------- ../shared/external pairs (skip when absent)

NCAR = SHARED / "ncar"
KINETO = SHARED / "kineto" / "jan2021"


@pytest.mark.skipif(not (NCAR / "MW_DivToMult.ncu-rep").exists(), reason="../shared/external/ncar is absent")
def test_ncar_div_to_mult(pack):
    c = compare_runs([str(NCAR / "MW_Baseline.ncu-rep")], [str(NCAR / "MW_DivToMult.ncu-rep")], pack)
    assert verdicts(c)["KERN013"] == "fixed"
    k = next(k for k in c["kernels"] if k["name"] == "compute_tendencies_x_279_gpu")
    assert k["before"]["id"] == k["after"]["id"] == "2" and k["duration_us"]["speedup"] > 1.5
    assert headline(c, "kernel_gpu_time_total_ms")["moved"] == "right"
    assert gate(c, 5.0) == []  # the tiny halo kernels' jitter (<1% of GPU time) is not a regression


@pytest.mark.skipif(not (KINETO / "resnet50_num_workers_4").exists(), reason="../shared/external/kineto is absent")
def test_kineto_num_workers(pack):
    c = compare_runs([str(KINETO / "resnet50_num_workers_0")], [str(KINETO / "resnet50_num_workers_4")], pack)
    assert verdicts(c)["TRAIN001"] == "fixed"
    assert headline(c, "step_time_ms_p50")["moved"] == "right"
    assert c["noise_pct"] > 0 and "steady steps" in c["before"]["noise_basis"]


# ---------------------------------------------------------------- GPU pairs made by tools/gen/compare_pairs.py

def test_same_script_twice_exits_0():
    """Two real runs of the same unchanged script: no regression under --fail-on-regression 5."""
    res = CliRunner().invoke(cli, ["compare", str(T / "p_mlp_run1.pt.trace.json.gz"), "--to",
                                   str(T / "p_mlp_run2.pt.trace.json.gz"), "--format", "json", "--fail-on-regression", "5"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert not doc["gate"]["reasons"]
    assert {f["verdict"] for f in doc["findings"]} <= {"unchanged"}
    assert doc["noise_pct"] > 0  # the step-to-step spread is measured, and it is what a change must exceed


def test_fix_that_makes_it_worse_exits_3():
    """Micro-batching the same step 32 ways: launch-bound, slower; the gate trips on step time."""
    res = CliRunner().invoke(cli, ["compare", str(T / "p_mlp_run1.pt.trace.json.gz"), "--to",
                                   str(T / "p_mlp_microbatch.pt.trace.json.gz"), "--format", "json",
                                   "--fail-on-regression", "5"])
    assert res.exit_code == 3
    doc = json.loads(res.stdout)
    assert doc["gate"]["tripped"] and any("step time" in r for r in doc["gate"]["reasons"])
    assert {f["rule"]: f["verdict"] for f in doc["findings"]}["TRAIN003"] == "regressed"
    assert headline(doc, "step_time_ms_p50")["moved"] == "wrong"


def test_several_ranks_per_side(pack):
    """Each side is one 2-rank DDP run: the all-reduce in one bucket -> buckets that overlap backward."""
    before = [str(T / f"x_ddp_comm_wait.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    after = [str(T / f"x_ddp_overlap_control.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    c = compare_runs(before, after, pack)
    assert verdicts(c)["TRAIN006"] == "fixed"
    assert headline(c, "step_time_ms_p50")["moved"] == "right"
    # overlapped NCCL kernels run longer in sum (kernel time per step rises), but the step got faster: no trip
    assert headline(c, "kernel_time_ms_per_step")["moved"] == "wrong"
    assert gate(c, 5.0) == []


def test_timeline_kernels_matched_by_name_and_config(pack):
    """naive -> SDPA attention: the softmax kernel is gone, the fused flash kernel is new, the projection
    GEMMs (same name, grid and block) are matched and about as fast."""
    c = compare_runs([str(T / "naive_attention.pt.trace.json.gz")], [str(T / "sdpa_attention.pt.trace.json.gz")], pack)
    rows = c["timeline_kernels"]
    soft = next(r for r in rows if "SoftMax" in r["kernel_name"])
    assert soft["before"] and soft["after"] is None
    flash = next(r for r in rows if "flash" in r["kernel_name"])
    assert flash["before"] is None and flash["after"]
    same = [r for r in rows if r["before"] and r["after"] and r["kernel_name"].startswith("nvjet")]
    assert same and all(abs(r["ms_per_step"]["change_pct"]) < 20 for r in same)


def test_kernel_twins_in_one_report(pack):
    """K10's twins (fixtures/ncu/k_cuda): each kernel paired with its fixed version by --kernels/--to-kernels."""
    k = str(FIX / "ncu" / "k_cuda.raw.csv.gz")
    c = compare_runs([k], [k], pack, kernels=["0", "2", "5", "7", "9", "11"], to_kernels=["1", "3", "1", "8", "10", "12"])
    got = verdicts(c)
    assert got["KERN005"] == got["KERN004"] == got["KERN013"] == got["KERN015"] == "fixed", got
    # the shuffle / padded twins are LSU-bound (fixtures/README.md): the next limit of kernels the fixes made
    # 2-23x faster, not a new problem (it was `new` at warning, tripping the gate, before issue 20)
    assert got.get("KERN014") == "next limit"
    k14 = next(f for f in c["findings"] if f["rule"] == "KERN014")
    assert {s["after"]["name"] for s in k14["subjects"]} == {"jacobi_warp_shuffle", "tile_sweep_padded"}
    assert gate(c, 5.0) == []
    assert all(r["duration_us"]["moved"] == "right" for r in c["kernels"] if r["before"] and r["after"])
    assert headline(c, "kernel_gpu_time_total_ms")["speedup"] > 5
    res = CliRunner().invoke(cli, ["compare", k, "--kernels", "0,99", "--to", k, "--to-kernels", "1,3"])
    assert res.exit_code == 1 and "99" in res.output
