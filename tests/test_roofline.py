"""Per-op roofline (diagnoser/timeline/roofline.py, device_peaks.py) on real torch traces.

Real files: ../shared/corpus/torch/fp32_matmul (H200, fp32 GEMMs, record_shapes=True),
../shared/external/tracelens/h100 timesformer (bf16, attention written as matmul + softmax),
fixtures/torch/m_train_convnet_bf16 (no shapes recorded). Skipped when ../shared is absent."""
from dataclasses import replace
from pathlib import Path

import pytest

from diagnoser.ingest.torch_trace import read_torch_trace
from diagnoser.timeline import device_peaks
from diagnoser.timeline.measure import timeline_metrics

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
FP32 = SHARED / "corpus" / "torch" / "fp32_matmul.pt.trace.json.gz"
TIMESFORMER = SHARED / "external" / "tracelens" / "h100" / "facebook_timesformer-base-finetuned-k400__1016002.json.gz"
need = pytest.mark.skipif(not FP32.exists() or not TIMESFORMER.exists(), reason="../shared traces absent")


@pytest.fixture(scope="module")
def fp32():
    return timeline_metrics(read_torch_trace(FP32))


@need
def test_fp32_gemms_are_compute_bound_on_the_fp32_roof(fp32):
    mm = [r for r in fp32.roofline_chart if r["op"] == "aten::mm" and r["shapes"] == "8192x32000, 32000x1024"]
    assert len(mm) == 1
    r = mm[0]
    assert (r["dtype"], r["bound"]) == ("fp32", "compute")
    # achieved = 2MNK per call / measured time; the roof is the H200's 67 TFLOP/s FP32
    flops = 2.0 * 8192 * 32000 * 1024 * r["calls_per_step"]
    assert r["tflops"] == pytest.approx(flops / (r["gpu_ms_per_step"] * 1e-3) / 1e12, rel=1e-9)
    assert r["roof_pct"] == pytest.approx(100 * r["tflops"] / 67.0, rel=1e-9)
    assert 30 < r["roof_pct"] <= 100
    assert fp32.values["roofline_device_known"] is True
    assert fp32.values["roofline_saved_ms_per_step"] > 0


@need
def test_bf16_trace_softmax_is_memory_bound_linear_compute_bound():
    m = timeline_metrics(read_torch_trace(TIMESFORMER))
    rows = m.roofline_chart
    soft = next(r for r in rows if r["op"] == "aten::_softmax")  # softmax's kernel
    assert soft["bound"] == "memory" and soft["family"] == "softmax"
    assert soft["roof_pct"] == pytest.approx(100 * soft["tbs"] / 3.35, rel=1e-9)  # H100 SXM HBM3
    lin = max((r for r in rows if r["op"] == "aten::addmm"), key=lambda r: r["gpu_ms_per_step"])  # linear's GEMM
    assert lin["bound"] == "compute" and lin["dtype"] == "bf16"
    assert 0 < lin["roof_pct"] <= 100
    assert all(r["roof_pct"] is None or r["roof_pct"] <= 110 for r in rows)  # no op beats its roof


@need
def test_unknown_device_gives_achieved_numbers_without_percentages():
    tl = read_torch_trace(FP32)
    tl = replace(tl, devices=[dict(tl.devices[0], name="Imaginary GPU 9000")])
    m = timeline_metrics(tl)
    assert m.roofline_chart and all(r["roof_pct"] is None and r["tflops"] > 0 for r in m.roofline_chart)
    assert m.values["roofline_device_known"] is False
    assert any("not in the peaks table" in n and "Imaginary GPU 9000" in n for n in m.notes)


def test_trace_without_shapes_says_how_to_record_them():
    m = timeline_metrics(read_torch_trace(ROOT / "fixtures" / "torch" / "m_train_convnet_bf16.pt.trace.json.gz"))
    assert m.roofline_chart == []
    assert m.values["roofline_shapes_recorded"] is False
    assert any("record_shapes=True" in n for n in m.notes)


AUTOCAST = ROOT / "fixtures" / "torch" / "x_ddp_comm_wait.rank0.pt.trace.json.gz"


def test_autocast_gemm_gets_the_dtype_it_ran_in():
    # autocast: aten::linear records fp32 inputs, the addmm inside it bf16; the GEMM kernel is the addmm's
    m = timeline_metrics(read_torch_trace(AUTOCAST))
    gemms = [r for r in m.roofline_chart if r["family"] == "gemm"]
    assert gemms and all(r["dtype"] == "bf16" for r in gemms if r["op"] == "aten::addmm")
    assert all(r["roof_pct"] is None or r["roof_pct"] <= 110 for r in m.roofline_chart)


def test_peaks_lookup_by_name():
    assert device_peaks.lookup([{"name": "NVIDIA H100 80GB HBM3"}])["hbm_tbs"] == 3.35
    assert device_peaks.lookup([{"name": "NVIDIA H200"}])["tensor"]["bf16"] == 989.0
    assert device_peaks.lookup([{"name": "AMD Instinct MI300X"}])["label"] == "MI300X"
    assert device_peaks.lookup([{"name": "NVIDIA A100-SXM4-40GB"}])["hbm_tbs"] == 1.555
    assert device_peaks.lookup([{"name": "Some GPU"}]) is None and device_peaks.lookup([]) is None
    h100 = device_peaks.lookup([{"name": "H100"}])
    assert device_peaks.compute_roof(h100, "fp8", "gemm") == 1979.0
    assert device_peaks.compute_roof(h100, "fp32", "gemm") == 67.0
    assert device_peaks.compute_roof(h100, "bf16", "elementwise") == 67.0


GRAPH = SHARED / "external" / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"


@pytest.mark.skipif(not GRAPH.exists(), reason="../shared/external/tracelens absent")
def test_cuda_graph_replays_are_reported_apart():
    m = timeline_metrics(read_torch_trace(GRAPH))  # vLLM decode: every kernel replayed by cudaGraphLaunch
    assert m.values["roofline_graph_kernel_pct"] == pytest.approx(100.0)
    assert m.roofline_chart == []
    assert any("replayed from CUDA graphs" in n for n in m.notes)


SDPA = SHARED / "corpus" / "torch" / "sdpa_attention.pt.trace.json.gz"


@pytest.mark.skipif(not SDPA.exists(), reason="../shared/corpus absent")
def test_report_shows_the_table_the_chart_and_the_json_rows(tmp_path):
    import json
    import subprocess
    import sys
    run = [sys.executable, "-m", "diagnoser.cli", str(SDPA)]
    md = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert "## Per-op roofline" in md
    assert "`aten::_scaled_dot_product_cudnn_attention`" in md.split("## Per-op roofline")[1]
    html = tmp_path / "r.html"
    subprocess.run(run + ["-o", str(html)], capture_output=True, text=True, check=True)
    page = html.read_text()
    from diagnoser.report.chart_palette import CATEGORY_COLOURS
    compute_dot = f'class="{CATEGORY_COLOURS["compute_bound"]}"'  # ops coloured as the kernel categories are
    assert "Roofline" in page and compute_dot in page and 'class="line-allocated"' in page
    js = json.loads(subprocess.run(run + ["--format", "json"], capture_output=True, text=True, check=True).stdout)
    top = js["roofline"][0]
    assert top["bound"] == "compute" and 0 < top["roof_pct"] <= 100


MINIWEATHER = SHARED / "external" / "ncar" / "MW_Baseline.ncu-rep"
ESMM = SHARED / "external" / "ncu_rep" / "esmm_profile_output.ncu-rep"
ROOFLINE_RULES = ("KERN019", "KERN020")


def _skipped(paths):
    from diagnoser.pipeline import diagnose
    rep = diagnose([str(p) for p in paths])
    return ({n.rule: n for n in rep.not_evaluated if n.rule in ROOFLINE_RULES},
            {n.rule: n for n in rep.not_applicable if n.rule in ROOFLINE_RULES})


@pytest.mark.parametrize("path", [ROOT / "fixtures" / "ncu" / "k_cuda.raw.csv.gz", MINIWEATHER, ESMM],
                         ids=["k_cuda", "miniweather_openacc", "esmm_cuda"])
def test_roofline_rules_do_not_apply_to_a_program_that_is_not_pytorch(path):
    # real Nsight Compute reports of CUDA C++ (k_cuda, ESMM) and OpenACC (NCAR MiniWeather) programs:
    # no torch trace could be recorded, so the record_shapes hint would be wrong
    if not path.exists():
        pytest.skip(f"{path} absent")
    ne, na = _skipped([path])
    assert not ne and set(na) == set(ROOFLINE_RULES)
    assert all("not PyTorch" in n.reason and "record_shapes" not in n.reason for n in na.values())


def test_roofline_rules_keep_the_hint_for_pytorch_without_shapes():
    # a PyTorch program's ncu report (its ATen kernels): not evaluated, with how to record the shapes
    ne, na = _skipped([ROOT / "fixtures" / "ncu" / "c_train_mlp_top.raw.csv.gz"])
    assert set(ne) == set(ROOFLINE_RULES) and not na
    assert all("record_shapes=True" in n.collect for n in ne.values())
    # a torch trace recorded without shapes: the report's note says how to record them
    from diagnoser.pipeline import diagnose
    rep = diagnose([str(ROOT / "fixtures" / "torch" / "m_train_convnet_bf16.pt.trace.json.gz")])
    assert any("no per-op roofline" in n and "record_shapes=True" in n for n in rep.notes)
    assert not {n.rule for n in rep.not_applicable} & set(ROOFLINE_RULES)
