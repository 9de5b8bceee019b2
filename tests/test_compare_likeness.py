"""`diagnose compare` compares like with like (issue 20): steps cut the same way or no step numbers, unrelated
inputs refused, the next limit of a fixed kernel not called a regression, a gate a change of step definition
cannot fool. Real files: the NCAR MiniWeather pairs (../shared/external, skipped when absent) and fixtures/."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.comparison.core import compare_runs
from diagnoser.comparison.gate import gate
from diagnoser.comparison.likeness import step_basis
from diagnoser.comparison.next_limit import is_next_limit
from diagnoser.comparison.render import render_markdown
from diagnoser.comparison.sides import Side
from diagnoser.pipeline import load_pack

ROOT = Path(__file__).resolve().parents[1]
T, M, NCU = ROOT / "fixtures" / "torch", ROOT / "fixtures" / "mem", ROOT / "fixtures" / "ncu"
NCAR = ROOT.parent / "shared" / "external" / "ncar"
needs_ncar = pytest.mark.skipif(not (NCAR / "MW_baseline.sqlite.gz").exists(), reason="../shared/external/ncar is absent")
STEP_FACTS = {"step_time_ms_p50", "gpu_busy_pct", "kernel_time_ms_per_step"}


@pytest.fixture(scope="module")
def pack():
    return load_pack()


def verdicts(c) -> dict:
    return {f["rule"]: f["verdict"] for f in c["findings"]}


# ---------------------------------------------------------------- steps cut differently: MiniWeather under Nsight Systems

@needs_ncar
def test_miniweather_nsys_no_step_headline(pack):
    """MW_noasync has no steps (the trace after start-up is one 'step'); MW_baseline 922 steps cut at a kernel.
    The 747 ms -> 0.237 ms "3155x better" step headline is gone; each kernel's totals say what changed."""
    c = compare_runs([str(NCAR / "MW_noasync.sqlite.gz")], [str(NCAR / "MW_baseline.sqlite.gz")], pack)
    basis = c["steps_basis"]
    assert basis["comparable"] is False
    assert (basis["before"]["step_detection"], basis["after"]["step_detection"]) == ("none", "kernel_pattern")
    assert not STEP_FACTS & {h["fact"] for h in c["headlines"]}
    assert c["phases"] == [] and c["timeline_kernels"] == []
    # the same simulation both times: the hot kernel launched ~924 times on each side, a launch of comparable length
    top = next(r for r in c["kernel_totals"] if r["name"] == "semi_discrete_step_257_gpu")
    nb, na = top["launches"]
    assert abs(nb - na) <= 0.01 * nb and 900 < nb < 950
    halo = next(r for r in c["kernel_totals"] if r["name"] == "compute_tendencies_z_410_gpu")
    assert abs(halo["us_per_launch"]["change_pct"]) < 10
    md = render_markdown(c, 5.0, gate(c, 5.0))
    assert "Steps not compared" in md and "3155" not in md and "0.237 ms" not in md
    # per-step facts are shown, never judged, across the two step definitions
    per_step = {r["fact"]: r for r in c["facts"] if r["subject"] is None and r["fact"] == "syncs_per_step"}
    assert per_step["syncs_per_step"]["moved"] == "steps differ"
    sync = next(f for f in c["findings"] if f["rule"] == "INFER002")  # host syncs: gone from the loop
    check = next(x for x in sync["verify_check"]["checks"] if x["fact"] == "syncs_per_step")
    assert check["holds"] is None and "cut steps differently" in check["why"]
    assert sync["verdict"] == "improved" and sync["cost_unit"] == "share of the step"


@needs_ncar
def test_gate_not_fooled_by_step_definition(pack):
    """baseline -> noasync (the fix undone): the gate trips on the finding that is new (host syncs, critical), not on
    a 0.237 -> 747 ms "step" that is a step on one side only; and the pass direction says what it could not gate."""
    r = compare_runs([str(NCAR / "MW_baseline.sqlite.gz")], [str(NCAR / "MW_noasync.sqlite.gz")], pack)
    reasons = gate(r, 5.0)
    assert reasons and all("step" not in x and "busy" not in x for x in reasons), reasons
    assert any(x.startswith("INFER002") for x in reasons)
    # the same ~4,150 launches took 3x the wall time: that is a regression the gate names (issue 30)
    assert any(x.startswith("wall time of the same work") for x in reasons)
    res = CliRunner().invoke(cli, ["compare", str(NCAR / "MW_noasync.sqlite.gz"), "--to", str(NCAR / "MW_baseline.sqlite.gz"),
                                   "--fail-on-regression", "5"])
    assert res.exit_code == 0, res.output
    assert "not gated: step time" in res.output


def _side(method, count, launches=None):
    """Synthetic side: its step cut and its kernels' launches per step ({name: launches})."""
    from types import SimpleNamespace
    from diagnoser.result_tables import KernelRow, ResultTables
    rows = [KernelRow(n, 1, 1, lp, 1.0, 0.0, 0.0, 0.0, 0.0) for n, lp in (launches or {}).items()]
    return Side([], SimpleNamespace(tables=ResultTables(kernels=rows)),
                run={"step_detection": method, "step_count": count, "step_time_ms_mean": 1.0})


def test_step_basis_rules():
    """Synthetic sides: markers of any kind compare with markers; otherwise steps compare when they hold the
    same work (the kernels both run, launched as often per step), whatever cut them."""
    one, many = {"k": 1, "j": 2}, {"k": 32, "j": 64}
    assert step_basis(_side("profiler_step", 5, one), _side("profiler_step", 1, many))["comparable"] is True  # micro-batching
    assert step_basis(_side("optimizer", 1, one), _side("profiler_step", 2, one))["comparable"] is True
    assert step_basis(_side("kernel_pattern", 4, one), _side("profiler_step", 2, one))["comparable"] is True
    assert step_basis(_side("kernel_pattern", 10, one), _side("kernel_pattern", 400, one))["comparable"] is True
    assert step_basis(_side("none", 1, one), _side("none", 1, one))["comparable"] is True  # two whole runs of one job
    mw = step_basis(_side("none", 1, {"k": 924}), _side("kernel_pattern", 922, {"k": 1}))
    assert mw["comparable"] is False and "924 launches per step against 1" in mw["why"]
    twice = step_basis(_side("kernel_pattern", 8, one), _side("kernel_pattern", 8, {"k": 2, "j": 4}))
    assert twice["comparable"] is False
    assert step_basis(_side("nvtx", 8, one), _side("kernel_pattern", 8, {"other": 1}))["comparable"] is False
    assert step_basis(_side("none", 1, one), _side("none", 1, many))["comparable"] is False
    assert step_basis(Side([], None), _side("nvtx", 3)) == {}  # an Nsight Compute report has no steps at all


def test_one_script_under_two_profilers(pack):
    """fixtures/nsys/X (steps cut at a kernel) against fixtures/torch/X (ProfilerStep#) of one script: the same
    work per step, so the step numbers are compared (and agree within the noise)."""
    n = "m_train_unet_no_cache"
    c = compare_runs([str(ROOT / "fixtures" / "nsys" / f"{n}.sqlite.gz")], [str(T / f"{n}.pt.trace.json.gz")], pack)
    basis = c["steps_basis"]
    assert basis["comparable"] is True and basis["before"]["step_detection"] == "kernel_pattern", basis
    step = next(h for h in c["headlines"] if h["fact"] == "kernel_time_ms_per_step")
    assert abs(step["change_pct"]) < 5


def test_marked_steps_keep_their_headlines(pack):
    """Steps from markers on both sides (ProfilerStep#; optimizer steps against ProfilerStep#): headlines as before."""
    c = compare_runs([str(T / "m_setup_convnet_from_start.pt.trace.json.gz")],
                     [str(T / "m_setup_convnet_scheduled.pt.trace.json.gz")], pack)
    assert c["steps_basis"]["comparable"] is True and "kernel_totals" not in c
    assert STEP_FACTS <= {h["fact"] for h in c["headlines"]}
    res = CliRunner().invoke(cli, ["compare", str(T / "p_mlp_run1.pt.trace.json.gz"), "--to",
                                   str(T / "p_mlp_microbatch.pt.trace.json.gz"), "--fail-on-regression", "5"])
    assert res.exit_code == 3 and "step time" in res.output  # 5 -> 1 ProfilerStep: still steps of one program


# ---------------------------------------------------------------- unrelated inputs refused

@pytest.mark.parametrize("before,after,said", [
    (NCU / "k_cuda.raw.csv.gz", T / "m_train_convnet_fp32.pt.trace.json.gz", "another kind"),
    (M / "o_eval_keeps_graph.snapshot.pickle.gz", T / "m_train_convnet_fp32.pt.trace.json.gz", "another kind"),
    (T / "m_train_convnet_fp32.pt.trace.json.gz", T / "naive_attention.pt.trace.json.gz", "no kernel name in common"),
    (M / "o_eval_keeps_graph.snapshot.pickle.gz", M / "activations.snapshot.pickle.gz", "not the same program"),
], ids=["ncu-vs-torch", "snapshot-vs-torch", "two-models", "two-scripts"])
def test_unrelated_inputs_refused(before, after, said):
    res = CliRunner().invoke(cli, ["compare", str(before), "--to", str(after)])
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "--force" in lines[0] and "Traceback" not in res.output
    forced = CliRunner().invoke(cli, ["compare", str(before), "--to", str(after), "--force"])
    assert forced.exit_code in (0, 3), forced.output
    assert "compared with --force although" in forced.output


@needs_ncar
def test_ncu_report_against_unrelated_trace(pack):
    """The case of issue 20: an ncu report against a PyTorch trace printed "3 fixed"."""
    res = CliRunner().invoke(cli, ["compare", str(NCAR / "MW_Baseline.ncu-rep"), "--to", str(T / "m_train_convnet_fp32.pt.trace.json.gz")])
    assert res.exit_code == 1 and "fixed" not in res.output and "Nsight Compute report" in res.output


def test_same_program_pairs_accepted(pack):
    """A fix that replaces most kernels (fp32 -> bf16 GEMMs) still shares some; snapshots of one script."""
    c = compare_runs([str(T / "m_train_convnet_fp32.pt.trace.json.gz")], [str(T / "m_train_convnet_bf16.pt.trace.json.gz")], pack)
    assert verdicts(c)["TRAIN008"] == "fixed"
    c = compare_runs([str(M / "o_knn_broadcast.snapshot.pickle.gz")], [str(M / "o_knn_cdist.snapshot.pickle.gz")], pack)
    assert verdicts(c)["OOM007"] == "fixed"


# ---------------------------------------------------------------- the next limit of a fixed kernel

@needs_ncar
def test_div_to_mult_next_limit_not_regression(pack):
    """KERN013's fix (divisions -> reciprocal multiplies) turns compute_tendencies_x_279 memory bound, as its Verify
    step says it should: KERN003 on that kernel is its next limit; KERN003 on the other kernels is unchanged."""
    c = compare_runs([str(NCAR / "MW_Baseline.ncu-rep")], [str(NCAR / "MW_DivToMult.ncu-rep")], pack)
    got = verdicts(c)
    assert got["KERN013"] == "fixed" and got["KERN003"] == "unchanged", got
    k3 = next(f for f in c["findings"] if f["rule"] == "KERN003")
    nxt = [s for s in k3["subjects"] if s["verdict"] == "next limit"]
    assert [s["after"]["name"] for s in nxt] == ["compute_tendencies_x_279_gpu"]
    assert "KERN013" in nxt[0]["why"] and "sol_bound_side eq memory" in nxt[0]["why"]
    assert gate(c, 5.0) == []
    r = compare_runs([str(NCAR / "MW_DivToMult.ncu-rep")], [str(NCAR / "MW_Baseline.ncu-rep")], pack)
    assert verdicts(r)["KERN013"] == "new" and gate(r, 5.0)  # undone, the kernel is slower: no next limit then


class _F:  # synthetic finding: only what is_next_limit reads
    def __init__(self, category, kid="3"):
        self.category = category
        self.subject = type("S", (), {"kind": "kernel", "id": kid})()


def test_only_a_bound_is_a_next_limit():
    """A defect a fix brought in (register spills) stays new; a bound on a kernel no fix made faster stays new."""
    fixed = {("kernel", "3"): {"rule": "KERN005", "predicted": [], "duration_us": [8486.0, 369.0]}}
    assert is_next_limit(_F("compute_bound"), _F("compute_bound"), fixed)
    assert not is_next_limit(_F("local_memory_spill"), _F("local_memory_spill"), fixed)
    assert not is_next_limit(_F("memory_bound", "4"), _F("memory_bound", "4"), fixed)


def _side_of(kind, identity, kernels=()):
    from types import SimpleNamespace
    from diagnoser.result_tables import KernelRow, ResultTables
    report = SimpleNamespace(inputs=[{"path": "synthetic", "kind": kind}], identities=[identity],
                             tables=ResultTables(kernels=[KernelRow(k, 1, 1, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0) for k in kernels]))
    return Side([], report)


def test_program_evidence_synthetic():
    """Synthetic identities: two main scripts that share a file of the user's are two versions of one program;
    two that share nothing are two programs; no evidence refuses nothing."""
    from diagnoser.comparison.likeness import refusal
    v1 = _side_of("torch-trace", {"programs": ["train_v1.py"], "python_files": ["model.py", "train_v1.py"]}, ["gemm"])
    v2 = _side_of("torch-trace", {"programs": ["train_v2.py"], "python_files": ["model.py", "train_v2.py"]}, ["gemm"])
    other = _side_of("torch-trace", {"programs": ["bench.py"], "python_files": ["bench.py"]}, ["gemm"])
    bare = _side_of("torch-trace", {}, ["gemm"])
    assert refusal(v1, v2) is None and refusal(v1, bare) is None
    assert "bench.py" in refusal(v1, other) and "train_v1.py" in refusal(v1, other)
    assert "no kernel name" in refusal(bare, _side_of("torch-trace", {}, ["conv"]))
    assert refusal(_side_of("ncu-rep", {}), _side_of("torch-trace", {})).startswith("BEFORE is input of another kind")
