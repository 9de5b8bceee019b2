"""Real H200 kernels with one Speed-of-Light mechanism each (tools/gen/kernel_mechanisms.py), and the
external Nsight Compute reports of other projects (NCAR MiniWeather, an SGEMM tutorial).

Fixtures are NVIDIA's own raw-page CSV exports of `ncu --set full` reports (the binary reports are
~1.5 MB per launch): fixtures/ncu/k_cuda.raw.csv.gz (hand-written kernels and their twins),
k_conv.raw.csv.gz (cuDNN FP32 convolution with TF32 off + bf16 twin), k_conv2.raw.csv.gz (FP32
convolutions that cuDNN runs as implicit GEMM). Launch ids follow the job order of the script.
"""
from __future__ import annotations

from functools import lru_cache

import pytest

from conftest import FIXTURES, REPO_ROOT
from diagnoser.kernel_names import kernel_origin
from diagnoser.ncu.units import pipe_facts
from diagnoser.findings import leaves
from diagnoser.pipeline import diagnose

EXTERNAL = REPO_ROOT.parent / "shared" / "external"
K_CUDA = FIXTURES / "ncu" / "k_cuda.raw.csv.gz"
K_CONV = FIXTURES / "ncu" / "k_conv.raw.csv.gz"
K_CONV2 = FIXTURES / "ncu" / "k_conv2.raw.csv.gz"
CUDA_IDS = {name: i for i, name in enumerate([
    "transpose_tile_unpadded", "transpose_tile_padded", "tile_sweep_unpadded", "tile_sweep_padded",
    "block_sum", "transpose_naive_strided_store", "transpose_naive_strided_load",
    "scale_divide_f32", "scale_reciprocal_f32", "scale_divide_f64", "scale_reciprocal_f64",
    "jacobi_block_barrier", "jacobi_warp_shuffle"])}


@lru_cache(maxsize=None)
def report_of(path):
    return diagnose([str(path)])


def per_kernel(path) -> dict[str, list]:
    """launch id -> its single-kernel findings, best ranked first."""
    out: dict[str, list] = {}
    for f in report_of(path).findings:
        for leaf in leaves(f):
            if leaf.subject is not None and leaf.subject.kind == "kernel":
                out.setdefault(leaf.subject.id, []).append(leaf)
    return out


def first_warning(path, launch: int):
    """The first warning-or-critical finding of one launch, as ranked in the report (or None)."""
    for f in per_kernel(path).get(str(launch), []):
        if f.severity in ("critical", "warning"):
            return f
    return None


def rules_of(path, launch: int) -> set[str]:
    return {f.rule for f in per_kernel(path).get(str(launch), [])}


def facts_of(path, launch: int) -> dict:
    return {f.name: f.value for f in report_of(path).facts if f.subject and f.subject.id == str(launch)}


def external(rel: str):
    p = EXTERNAL / rel
    if not p.is_file():
        pytest.skip(f"../shared/external/{rel} is not present")
    return p


# ---------------------------------------------------------------- shared memory

def test_unpadded_shared_transpose_is_bank_conflicts_and_padded_twin_is_healthy():
    bad, twin = CUDA_IDS["transpose_tile_unpadded"], CUDA_IDS["transpose_tile_padded"]
    assert first_warning(K_CUDA, bad).category == "shared_bank_conflicts"
    assert facts_of(K_CUDA, bad)["shared_bank_conflict_pct"] > 90
    assert first_warning(K_CUDA, twin) is None
    assert facts_of(K_CUDA, twin)["shared_bank_conflict_pct"] < 5


def test_shared_tile_sweep_with_conflicts_is_bank_conflicts_not_compute_bound():
    bad = CUDA_IDS["tile_sweep_unpadded"]
    assert first_warning(K_CUDA, bad).category == "shared_bank_conflicts"
    assert not rules_of(K_CUDA, bad) & {"KERN001", "KERN014"}


def test_padded_tile_sweep_is_lsu_bound_not_plain_math():
    """Conflicts gone, the sweep still issues one shared load per FMA: the LSU pipe, not FMA, is busiest."""
    twin = CUDA_IDS["tile_sweep_padded"]
    facts = facts_of(K_CUDA, twin)
    assert facts["sm_busiest_pipe"] == "lsu" and facts["sm_throughput_pct"] > 90
    assert "KERN014" in rules_of(K_CUDA, twin) and "KERN001" not in rules_of(K_CUDA, twin)


# ---------------------------------------------------------------- coalescing

def test_reduction_storing_one_value_per_block_is_not_uncoalesced():
    i = CUDA_IDS["block_sum"]
    facts = facts_of(K_CUDA, i)
    assert facts["global_store_efficiency_pct"] < 20  # one 4-byte store per block...
    assert facts["global_wasted_sector_share_pct"] < 1  # ...on a negligible share of the traffic
    assert "KERN004" not in rules_of(K_CUDA, i)
    assert first_warning(K_CUDA, i) is None


@pytest.mark.parametrize("name, side, clean", [("transpose_naive_strided_store", "stores", "load"),
                                                ("transpose_naive_strided_load", "loads", "store")])
def test_naive_transpose_names_the_wasteful_side_with_numbers(name, side, clean):
    f = first_warning(K_CUDA, CUDA_IDS[name])
    assert f.category == "uncoalesced_access" and f.rule == "KERN004"
    assert f"in its {side}:" in f.message
    assert f"{clean}s use 100%" in f.message or f"{clean}s 100%" in f.message
    assert "most fetched bytes are wasted" not in f.message + f.title
    assert f.evidence["global_wasted_sector_share_pct"]["value"] > 70


# ---------------------------------------------------------------- divisions, barriers

@pytest.mark.parametrize("bad, twin", [("scale_divide_f32", "scale_reciprocal_f32"),
                                       ("scale_divide_f64", "scale_reciprocal_f64")])
def test_division_bound_kernel_gets_the_reciprocal_fix_and_its_twin_does_not(bad, twin):
    f = first_warning(K_CUDA, CUDA_IDS[bad])
    assert f.rule == "KERN013" and f.category == "compute_bound"
    assert "reciprocal" in f.fix and "Do less or cheaper math" not in f.fix
    assert facts_of(K_CUDA, CUDA_IDS[bad])["sm_busiest_pipe"] in ("xu", "fp64")
    assert not rules_of(K_CUDA, CUDA_IDS[twin]) & {"KERN001", "KERN013"}
    before = facts_of(K_CUDA, CUDA_IDS[bad])["kernel_duration_us"]
    after = facts_of(K_CUDA, CUDA_IDS[twin])["kernel_duration_us"]
    assert after < before / 2  # the fix the rule names is worth what its gain claims


def test_barrier_heavy_smoother_is_barrier_stall_and_shuffle_twin_is_not():
    bad, twin = CUDA_IDS["jacobi_block_barrier"], CUDA_IDS["jacobi_warp_shuffle"]
    f = first_warning(K_CUDA, bad)
    assert f.category == "barrier_stall" and "KERN001" not in rules_of(K_CUDA, bad)
    assert facts_of(K_CUDA, bad)["dominant_stall_reason"] == "barrier"
    assert "KERN015" not in rules_of(K_CUDA, twin)


def test_hand_written_kernels_first_category_per_launch():
    expected = {"transpose_tile_unpadded": "shared_bank_conflicts", "transpose_tile_padded": None,
                "tile_sweep_unpadded": "shared_bank_conflicts", "block_sum": None,
                "transpose_naive_strided_store": "uncoalesced_access",
                "transpose_naive_strided_load": "uncoalesced_access", "scale_divide_f32": "compute_bound",
                "scale_reciprocal_f32": None, "scale_divide_f64": "compute_bound", "scale_reciprocal_f64": None,
                "jacobi_block_barrier": "barrier_stall"}
    got = {n: getattr(first_warning(K_CUDA, CUDA_IDS[n]), "category", None) for n in expected}
    assert got == expected


# ---------------------------------------------------------------- FP32 convolutions, attribution

@pytest.mark.parametrize("path", [K_CONV, K_CONV2], ids=["fft_winograd", "implicit_gemm"])
def test_fp32_cudnn_convolution_is_fp32_no_tensor_cores_with_the_cudnn_switch(path):
    report = report_of(path)
    first = next(f for f in report.findings if f.severity in ("warning", "critical"))
    assert first.category == "fp32_no_tensor_cores"
    fp32 = [f for f in per_kernel(path).values() for f in f if f.rule == "KERN002"]
    assert fp32
    for f in fp32:
        assert f.evidence["kernel_origin"]["value"] == "cuDNN", f.subject.name
        assert "torch.backends.cudnn.allow_tf32 = True" in f.fix.split(". Or")[0]
    assert any("implicit_gemm_f32f32" in f.subject.name for f in fp32)  # cuDNN's FFMA implicit GEMM


def test_bf16_convolution_twin_has_no_warning():
    bf16 = [i for i, fs in per_kernel(K_CONV).items() if any("bf16" in f.subject.name for f in fs)]
    assert bf16
    for i in bf16:
        assert first_warning(K_CONV, int(i)) is None
        assert facts_of(K_CONV, int(i))["tensor_pipe_pct"] > 50


@pytest.mark.parametrize("name, origin", [
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize256x64x8_stage3_warpsize2x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn", "cuDNN"),
    ("sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", "cuDNN"),
    ("void winograd_nonfused::winogradWgradData4x4<float, float>(winograd_nonfused::WinogradDataParams<T1, T2>)", "cuDNN"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "cuBLAS"),
    ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "cuBLAS"),
    # synthetic names in the shape those tools give them:
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(T1::Params)", "CUTLASS"),
    ("triton_poi_fused_add_mul_0", "Triton"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)", "PyTorch"),
    ("transpose_tile_unpadded", "user code"),
])
def test_kernel_origin_by_name(name, origin):
    assert kernel_origin(name) == origin


def test_cublas_built_gemm_inside_cudnn_fft_convolution_is_attributed_to_cudnn():
    ids = [i for i, fs in per_kernel(K_CONV).items() if any("cf32cf32" in f.subject.name for f in fs)]
    assert ids
    for i in ids:
        assert facts_of(K_CONV, int(i))["kernel_origin"] == "cuDNN"


def test_busiest_pipe_ignores_the_fp64_tensor_shared_pipe():
    """SYNTHETIC metrics: `sm__pipe_shared_cycles_active` is the FP64+tensor datapath, not shared memory."""
    m = {"sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_elapsed": 90.0,
         "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed": 88.0,
         "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": 20.0,
         "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed": 10.0}
    f = pipe_facts(m)
    assert f["sm_busiest_pipe"] == "fp64" and f["sm_busiest_pipe_pct"] == 88.0 and f["xu_pipe_pct"] == 20.0


def test_details_page_export_without_pipe_metrics_lists_the_pipe_rules_as_not_evaluated():
    """NVIDIA's details-page CSV of the same kernels carries section values only: no pipe breakdown,
    so the division kernel must not be called plain "math" (KERN001) nor anything be guessed."""
    report = report_of(FIXTURES / "ncu" / "k_cuda.details.csv.gz")
    missing = {ne.rule: ne.missing for ne in report.not_evaluated}
    assert {"KERN001", "KERN013", "KERN014", "KERN016"} <= set(missing)
    assert "sm_busiest_pipe" in missing["KERN013"]
    assert not [f for f in report.findings if f.rule in ("KERN001", "KERN013", "KERN016")]
    assert not [f for f in report.findings if f.severity in ("warning", "critical")]


def test_cublas_gemm_next_to_an_implicit_gemm_convolution_stays_cublas():
    """SYNTHETIC neighbours: implicit-GEMM convolutions call no separate GEMM, so a matmul after one is cuBLAS's."""
    from diagnoser.ncu.units import cudnn_conv_gemm
    gemm = "sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
    conv = "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize256x64x8_execute_kernel__5x_cudnn"
    wino = "void winograd_nonfused::winogradWgradDelta4x4<float, float>(winograd_nonfused::WinogradDeltaParams<T1, T2>)"
    assert not cudnn_conv_gemm(conv, gemm, None, kernel_origin(gemm))
    assert cudnn_conv_gemm(wino, gemm, None, kernel_origin(gemm))


# ---------------------------------------------------------------- gains and the 1% floor

@pytest.mark.parametrize("path", [K_CUDA, K_CONV, K_CONV2], ids=["cuda", "conv", "conv2"])
def test_no_warning_claims_under_one_percent_of_gpu_time(path):
    for f in report_of(path).findings:
        if f.severity in ("warning", "critical"):
            assert f.estimated_gain >= 0.01, (f.rule, f.estimated_gain)


# ---------------------------------------------------------------- external reports

def test_miniweather_baseline_division_bound_kernel_gets_the_reciprocal_fix():
    path = external("ncar/MW_Baseline.ncu-rep")
    first = next(f for f in report_of(path).findings if f.severity in ("warning", "critical"))
    assert first.subject.name == "compute_tendencies_x_279_gpu"
    assert first.category == "compute_bound" and first.rule == "KERN013"
    assert "reciprocal" in first.fix
    assert first.evidence["sm_busiest_pipe"]["value"] == "fp64"
    assert first.estimated_gain > 0.05


def test_miniweather_after_div_to_mult_has_no_warning_and_the_kernel_is_memory_bound():
    path = external("ncar/MW_DivToMult.ncu-rep")
    report = report_of(path)
    assert not [f for f in report.findings if f.severity in ("warning", "critical")]
    kernel = next(int(i) for i, fs in per_kernel(path).items()
                  if fs[0].subject.name == "compute_tendencies_x_279_gpu")
    assert "KERN003" in rules_of(path, kernel) and "KERN013" not in rules_of(path, kernel)


def test_sgemm_tutorial_slowest_kernel_gets_the_first_finding_not_register_tiling():
    path = external("ncu_rep/esmm_profile_output.ncu-rep")
    report = report_of(path)
    first = next(f for f in report.findings if f.severity in ("warning", "critical"))
    assert first.subject.name.startswith("void one_blocktiling")
    assert first.category == "compute_bound" and first.evidence["lsu_pipe_pct"]["value"] > 60
    assert not any(f.rule == "KERN009" for f in report.findings)  # deliberate register tiling: no occupancy alarm
