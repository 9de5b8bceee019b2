"""Predictions in other units, checked against the real twins in fixtures/ (docs/calibration.md, "Other units"):
an OOM finding's peak after its fix (GiB) against the twin snapshot's own peak, a kernel finding's launch time
after its fix (us) against the twin kernel's own duration in the same Nsight Compute report.

`python tests/test_other_unit_predictions.py` prints the table of docs/calibration.md.
"""
from __future__ import annotations

import json
import statistics
import sys
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import FIXTURES, REPO_ROOT  # noqa: E402
from diagnoser.findings import Finding, leaves  # noqa: E402
from diagnoser.pipeline import diagnose, predict_peak_all  # noqa: E402
from diagnoser.report.finding_parts import predicted_all_text  # noqa: E402
from diagnoser.report.json_report import report_json  # noqa: E402
from diagnoser.report.render import render_markdown  # noqa: E402

MEM, NCU = FIXTURES / "mem", FIXTURES / "ncu"
EXTERNAL = REPO_ROOT.parent / "shared" / "external"

# (before snapshot, its finding, twin snapshot, what differs besides the fix)
MEMORY_PAIRS = [
    ("q_kv_prealloc_oom", "OOM009", "q_kv_sized", "cache sized for 2560 positions; three requests served"),
    ("o_knn_broadcast", "OOM007", "o_knn_cdist", "the twin ran on to 2048 points; the OOM was at 1536"),
    ("o_eval_keeps_graph", "OOM003", "o_eval_no_grad", ""),
    ("l_mmd_broadcast", "OOM008", "l_mmd_cdist", ""),
    ("l_pairs_device", "OOM008", "l_pairs_chunked", "512 rows a chunk"),
]
# (report, finding, kernel id before, kernel id of the twin, what the twin is)
KERNEL_PAIRS = [
    ("k_cuda", "KERN005", "0", "1", "transpose_tile_padded"),
    ("k_cuda", "KERN005", "2", "3", "tile_sweep_padded"),
    ("k_cuda", "KERN013", "7", "8", "scale_reciprocal_f32"),
    ("k_cuda", "KERN013", "9", "10", "scale_reciprocal_f64"),
    ("k_cuda", "KERN004", "5", "1", "transpose_tile_padded (the same 8192^2 transpose through shared memory)"),
    ("k_cuda", "KERN004", "6", "1", "transpose_tile_padded (the same 8192^2 transpose through shared memory)"),
    ("k_cuda", "KERN015", "11", "12", "jacobi_warp_shuffle"),
    ("q_reduce", "KERN015", "0", "1", "row_sum_warp_shuffle"),
    ("k21_conflicts", "KERN005", "0", "1", "f64 tile transpose, padded"),
    ("k21_conflicts", "KERN005", "4", "5", "looped transpose, padded"),
]
# in ../shared/external: (before report, finding, kernel id, after report, its kernel id, what the twin is)
EXTERNAL_KERNEL_PAIRS = [
    ("ncar/MW_Baseline", "KERN013", "2", "ncar/MW_DivToMult", "2",
     "MiniWeather compute_tendencies_x after the workshop's fix (multiply by a reciprocal)"),
]
# pinned: (low, high) predicted and the realized value, as docs/calibration.md shows them
PINNED = {
    "q_kv_prealloc_oom": (2.31, 10.31, 10.99), "o_knn_broadcast": (0.31, 0.87, 0.66),
    "o_eval_keeps_graph": (0.01, 1.09, 0.55), "l_mmd_broadcast": (0.24, 6.99, 5.33),
    "l_pairs_device": (0.02, 23.86, 11.23),
    "k_cuda 0": (133.8, 191.1, 143.0), "k_cuda 2": (275.8, 393.9, 368.5), "k_cuda 7": (138.9, 277.9, 190.8),
    "k_cuda 9": (275.0, 549.9, 320.6), "k_cuda 5": (188.4, 269.2, 143.0), "k_cuda 6": (96.4, 137.7, 143.0),
    "k_cuda 11": (148.4, 296.8, 283.9), "q_reduce 0": (175.6, 351.2, 215.3),
    "k21_conflicts 0": (143.3, 204.7, 147.6), "k21_conflicts 4": (33.0, 47.1, 46.5),
    "MW_Baseline 2": (2759.5, 5518.9, 3482.2),
}


def _path(name: str) -> Path:
    for p in (MEM / f"{name}.snapshot.pickle.gz", NCU / f"{name}.raw.csv.gz", EXTERNAL / f"{name}.ncu-rep"):
        if p.exists():
            return p
    raise FileNotFoundError(name)


@lru_cache(maxsize=None)
def report_of(name: str):
    return diagnose([str(_path(name))])


def _run_fact(name: str, fact: str) -> float:
    return next(f.value for f in report_of(name).facts if f.subject is None and f.name == fact)


def _kernel_fact(name: str, kernel: str, fact: str) -> float:
    return next(f.value for f in report_of(name).facts
                if f.subject is not None and f.subject.kind == "kernel" and f.subject.id == kernel and f.name == fact)


def _finding(name: str, rule: str, kernel: str | None = None):
    for f in report_of(name).findings:
        for g in [f, *f.kernels, *leaves(f)]:
            if g.rule == rule and (kernel is None or (g.subject is not None and g.subject.id == kernel)):
                return g
    raise AssertionError(f"{rule} did not fire on {name} {kernel or ''}")


def memory_row(before: str, rule: str, twin: str, note: str) -> dict:
    p = _finding(before, rule).prediction
    realized = _run_fact(twin, "peak_allocated_gib")
    return {"pair": before, "twin": twin, "finding": rule, "unit": "GiB", "before": p["measured"],
            "low": p["low"], "high": p["high"], "realized": realized, "note": note}


def kernel_row(report: str, rule: str, kernel: str, twin_kernel: str, twin: str, twin_report: str | None = None) -> dict:
    p = _finding(report, rule, kernel).prediction
    realized = _kernel_fact(twin_report or report, twin_kernel, "kernel_duration_us")
    after = f"{Path(twin_report).name} " if twin_report else ""
    return {"pair": f"{Path(report).name} {kernel}", "twin": f"{after}{twin_kernel} {twin}", "finding": rule,
            "unit": "us", "before": p["measured"], "low": p["low"], "high": p["high"], "realized": realized, "note": ""}


def external_kernel_row(report, rule, kernel, twin_report, twin_kernel, twin) -> dict:
    return kernel_row(report, rule, kernel, twin_kernel, twin, twin_report)


def _error_pct(row: dict) -> float:
    """The realized value less the middle of the range, in % of the realized value."""
    return 100 * (row["realized"] - (row["low"] + row["high"]) / 2) / row["realized"]


def _inside(row: dict) -> bool:
    return row["low"] <= row["realized"] <= row["high"]


@pytest.mark.parametrize("before, rule, twin, note", MEMORY_PAIRS, ids=[p[0] for p in MEMORY_PAIRS])
def test_oom_finding_predicts_the_twins_peak(before, rule, twin, note):
    row = memory_row(before, rule, twin, note)
    low, high, realized = PINNED[before]
    assert (round(row["low"], 2), round(row["high"], 2), round(row["realized"], 2)) == (low, high, realized)
    assert row["high"] < row["before"]  # the fix frees memory at the peak


@pytest.mark.parametrize("report, rule, kernel, twin_kernel, twin", KERNEL_PAIRS,
                         ids=[f"{p[0]}-{p[2]}" for p in KERNEL_PAIRS])
def test_kernel_finding_predicts_the_twin_kernels_time(report, rule, kernel, twin_kernel, twin):
    row = kernel_row(report, rule, kernel, twin_kernel, twin)
    low, high, realized = PINNED[f"{report} {kernel}"]
    assert (round(row["low"], 1), round(row["high"], 1), round(row["realized"], 1)) == (low, high, realized)
    assert row["high"] <= row["before"]


@pytest.mark.parametrize("report, rule, kernel, twin_report, twin_kernel, twin", EXTERNAL_KERNEL_PAIRS,
                         ids=[p[0] for p in EXTERNAL_KERNEL_PAIRS])
def test_external_kernel_finding_predicts_its_fixed_reports_kernel_time(report, rule, kernel, twin_report,
                                                                         twin_kernel, twin):
    if not EXTERNAL.is_dir():
        pytest.skip("../shared/external is not present")
    row = external_kernel_row(report, rule, kernel, twin_report, twin_kernel, twin)
    low, high, realized = PINNED[f"{Path(report).name} {kernel}"]
    assert (round(row["low"], 1), round(row["high"], 1), round(row["realized"], 1)) == (low, high, realized)


def test_other_unit_predictions_over_all_pairs():
    rows = all_rows()
    inside = sum(_inside(r) for r in rows)
    if EXTERNAL.is_dir():
        assert (len(rows), inside) == (16, 13)
        assert round(statistics.median(abs(_error_pct(r)) for r in rows), 1) == 18.0
    else:
        assert (len(rows), inside) == (15, 12)
        assert round(statistics.median(abs(_error_pct(r)) for r in rows), 1) == 17.9


def test_kv_cache_oom_json_and_markdown_carry_the_peak_after_the_fix():
    report = report_of("q_kv_prealloc_oom")
    f = next(x for x in report_json(report)["findings"] if x["rule"] == "OOM009")
    assert f["predicted_peak_gib"] == [2.307, 10.307] and f["peak_gib"] == 18.307
    assert "16.00 GiB cache is paged" in f["prediction_assumes"]
    md = render_markdown(report)
    assert "Predicted after the fix: 18.31 GiB needed at the peak -> 2.31-10.31 GiB (assumes" in md


def test_activations_oom_says_its_peak_after_checkpointing_is_not_computable():
    report = diagnose([str(FIXTURES / "mem" / "l_cap_activations.snapshot.pickle.gz")])
    f = next(x for x in report_json(report)["findings"] if x["rule"] == "OOM001")
    assert f["predicted_peak_gib"] is None and "checkpointing" in f["prediction_not_computable"]
    assert "-> not computable (what activation checkpointing frees" in render_markdown(report)


def test_barrier_stall_kernel_json_carries_the_launch_time_at_its_roof():
    out = report_json(report_of("q_reduce"))
    f = next(x for x in out["findings"] if x["rule"] == "KERN015")
    assert f["kernel_us"] == 479.328 and f["predicted_kernel_us"] == [175.619, 351.239]
    assert "barrier's 27% of the stalls" in f["prediction_assumes"]
    json.dumps(out)


def test_grouped_kernel_finding_lists_each_kernels_prediction():
    out = report_json(report_of("k_cuda"))
    f = next(x for x in out["findings"] if x["rule"] == "KERN005")
    assert {k["subject"]["id"]: k["predicted_kernel_us"] for k in f["kernels"]} == {
        "2": [275.763, 393.947], "0": [133.772, 191.102]}


def test_step_time_findings_carry_no_other_unit_prediction():
    report = diagnose([str(FIXTURES / "torch" / "m_infer_tiny_mlp_eager.pt.trace.json.gz")])
    assert report.findings and not any(f.prediction for f in report.findings)
    assert not any("predicted_peak_gib" in x or "predicted_kernel_us" in x for x in report_json(report)["findings"])


def test_kv_cache_torch_timeline_says_its_peak_after_the_fix_is_not_computable():
    report = diagnose([str(FIXTURES / "torch" / "c_decode_cache_full.pt.trace.json.gz")])
    f = next(x for x in report_json(report)["findings"] if x["rule"] == "INFER015")
    assert f["predicted_peak_gib"] is None and f["peak_gib"] == 128.36
    assert "positions are served" in f["prediction_not_computable"]


def test_fp32_gemm_predicts_its_time_on_tensor_cores_and_the_bf16_gemm_of_the_same_report_runs_inside():
    # roofline_pairs: an fp32 mm 4096^3 with TF32 off (kernel 2) and a bf16 mm 8192^3 (kernel 0) in one report;
    # no bf16 4096^3 was profiled, so the bf16 GEMM's time per FLOP stands for it (a scaled check, not a twin)
    name = "roofline_pairs"
    p = _finding(name, "KERN002", "2").prediction
    assert (round(p["low"], 1), round(p["high"], 1), round(p["measured"], 1)) == (139.0, 397.6, 2705.7)
    assert "H200 SXM peak of 989 TFLOP/s" in p["assumes"]
    fp32_flops = _kernel_fact(name, "2", "kernel_flop_count")
    bf16_us_per_flop = _kernel_fact(name, "0", "kernel_duration_us") / _kernel_fact(name, "0", "kernel_flop_count")
    assert p["low"] <= fp32_flops * bf16_us_per_flop <= p["high"]  # 173 us


@pytest.mark.parametrize("before, rule, twin, inside", [("o_eval_keeps_graph", "OOM003", "o_eval_no_grad", "inside"),
                                                         ("q_kv_prealloc_oom", "OOM009", "q_kv_sized", "outside")])
def test_compare_says_how_much_of_the_predicted_memory_the_fix_freed(before, rule, twin, inside):
    from click.testing import CliRunner
    from diagnoser.cli import cli
    got = CliRunner().invoke(cli, ["compare", str(_path(before)), "--to", str(_path(twin)), "--format", "json"])
    entry = next(e for e in json.loads(got.output)["findings"] if e["rule"] == rule)
    row = memory_row(before, rule, twin, "")
    assert entry["verdict"] == "fixed" and entry["delivered_gib"] == round(row["before"] - row["realized"], 3)
    assert f"GiB: {inside} the range" in entry["why"] and entry["why"].startswith("freed ")


def test_compare_of_the_external_division_pair_says_the_kernel_time_landed_inside_its_prediction():
    if not EXTERNAL.is_dir():
        pytest.skip("../shared/external is not present")
    from click.testing import CliRunner
    from diagnoser.cli import cli
    got = CliRunner().invoke(cli, ["compare", str(_path("ncar/MW_Baseline")), "--to", str(_path("ncar/MW_DivToMult")),
                                   "--format", "json"])
    entry = next(e for e in json.loads(got.output)["findings"] if e["rule"] == "KERN013")
    (subject,) = entry["subjects"]
    assert subject["kernel_us"] == [6190.944, 3482.24] and subject["predicted_kernel_us"] == [2759.474, 5518.949]
    assert entry["why"] == "6191 -> 3482 us a launch: predicted 2759-5519 us, inside the range"


def _synthetic_oom_finding(rule: str, category: str, low: float, high: float) -> Finding:
    return Finding(rule, rule.lower(), category, "oom", "warning", "t", "m", {}, 0.5, "peak memory", None, "", "",
                   prediction={"unit": "GiB", "measured": 10.0, "low": low, "high": high, "assumes": "a"})


def test_synthetic_two_memory_fixes_together_free_each_owners_bytes_once():
    leak = _synthetic_oom_finding("OOM003", "oom_memory_leak", 6.0, 7.0)
    temp = _synthetic_oom_finding("OOM007", "oom_temporary_buffer", 8.0, 9.0)
    assert predict_peak_all([leak, temp]) == {"peak_gib": 10.0, "low": 4.0, "high": 6.0, "rules": ["OOM003", "OOM007"]}
    assert predict_peak_all([leak]) is None  # one fix: its own prediction says it
    report = SimpleNamespace(predicted_step_ms_all=None, predicted_peak_all=predict_peak_all([leak, temp]))
    assert predicted_all_text(report) == ("the memory fixes together, each owner's bytes counted once: "
                                          "10.00 GiB needed at the peak -> 4.00-6.00 GiB")
    frag = _synthetic_oom_finding("OOM004", "oom_fragmentation", 9.5, 9.8)
    assert predict_peak_all([leak, frag]) is None  # reserved memory: not added to the allocated peak


def all_rows() -> list[dict]:
    external = [external_kernel_row(*p) for p in EXTERNAL_KERNEL_PAIRS] if EXTERNAL.is_dir() else []
    return [memory_row(*p) for p in MEMORY_PAIRS] + [kernel_row(*p) for p in KERNEL_PAIRS] + external


def table() -> str:
    lines = ["| pair | finding | twin | before | predicted | realized | error | inside |",
             "|---|---|---|---|---|---|---|---|"]
    fmt = {"GiB": "{:.2f} GiB", "us": "{:.1f} us"}
    for r in all_rows():
        f = fmt[r["unit"]]
        twin = r["twin"] + (f" ({r['note']})" if r["note"] else "")
        lines.append(f"| {r['pair']} | {r['finding']} | {twin} | {f.format(r['before'])} | "
                     f"{f.format(r['low'])[:-len(r['unit']) - 1]}-{f.format(r['high'])} | {f.format(r['realized'])} | "
                     f"{_error_pct(r):+.1f}% | {'yes' if _inside(r) else 'no'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
