"""Timeline metrics on real fixtures (both sources) and on synthetic timelines built in the tests.

Real checks: steps (markers, warm-up, inference when markers are removed), both sources agreeing,
kernel time against NVIDIA's own `nsys stats`, idle accounting, catalogue and chart invariants.
"""
from __future__ import annotations

import copy
import math
import re

import numpy as np
import pandas as pd
import pytest

from diagnoser.timeline.analysis import measured_analysis
from diagnoser.timeline.catalogue import CATALOGUE
from diagnoser.timeline.measure import measure_timeline, timeline_metrics
from diagnoser.timeline.gaps import IDLE_CLASSES
from diagnoser.timeline.intervals import IntervalSet, intersect, subtract
from diagnoser.timeline.kernels import categorize, tensor_core_use
from diagnoser.timeline.ranks import RankSummary, straggler_analysis
from diagnoser.facts import FactSpec
from diagnoser.ingest.nsys_sqlite import read_nsys_sqlite
from diagnoser.ingest.torch_trace import read_torch_trace
from diagnoser.timeline.tables import GPU_COLUMNS, HOST_COLUMNS, RANGE_COLUMNS, Timeline

RUNS = ["dataloader_bound", "decode_small_batch", "fp32_matmul", "healthy", "host_sync",
        "launch_bound", "naive_attention", "sdpa_attention"]
GPU_BOUND = ["fp32_matmul", "healthy", "naive_attention", "sdpa_attention"]
_CACHE: dict = {}


def load(fixtures_dir, name, source) -> Timeline:
    key = (name, source)
    if key not in _CACHE:
        if source == "nsys":
            _CACHE[key] = read_nsys_sqlite(fixtures_dir / "nsys" / f"{name}.sqlite.gz")
        else:
            _CACHE[key] = read_torch_trace(fixtures_dir / "torch" / f"{name}.pt.trace.json.gz")
    return _CACHE[key]


def timeline_analysis(timelines: list[Timeline]):
    """Facts and chart series of one Timeline (or one per rank), measured and analysed in this process."""
    return measured_analysis([measure_timeline(t) for t in timelines])


def facts_of(tl_or_list) -> dict:
    tls = tl_or_list if isinstance(tl_or_list, list) else [tl_or_list]
    return {f.name: f.value for f in timeline_analysis(tls).facts if f.subject is None}


def without_ranges(tl: Timeline, pattern: str) -> Timeline:
    """The same timeline with some ranges removed (as if the code had not been annotated)."""
    out = copy.copy(tl)
    out.ranges = tl.ranges[~tl.ranges["name"].astype(str).str.match(pattern)].reset_index(drop=True)
    return out


# ---------------------------------------------------------------- steps

@pytest.mark.parametrize("name", RUNS)
def test_nsys_step_ranges_are_steps_minus_the_warmup(fixtures_dir, name):
    f = facts_of(load(fixtures_dir, name, "nsys"))
    assert f["step_detection"] == "nvtx"
    assert f["step_count"] == 9  # step_0..step_9, step_0 is warm-up


@pytest.mark.parametrize("name", RUNS)
def test_profiler_steps_are_steps_minus_the_warmup(fixtures_dir, name):
    f = facts_of(load(fixtures_dir, name, "torch"))
    assert f["step_detection"] == "profiler_step"
    assert f["step_count"] == 5  # six ProfilerStep#N ranges in each trace


@pytest.mark.parametrize("name", GPU_BOUND)
def test_gpu_bound_step_time_agrees_between_nsys_and_torch(fixtures_dir, name):
    """The host runs ahead in these runs: steps are timed by GPU completion, not the host range."""
    a = facts_of(load(fixtures_dir, name, "nsys"))["step_time_ms_p50"]
    b = facts_of(load(fixtures_dir, name, "torch"))["step_time_ms_p50"]
    assert abs(a - b) / a < 0.1, (a, b)


@pytest.mark.parametrize("source", ["nsys", "torch"])
@pytest.mark.parametrize("name", RUNS)
def test_steps_are_inferred_when_step_markers_are_removed(fixtures_dir, name, source):
    tl = load(fixtures_dir, name, source)
    marked = facts_of(tl)
    bare = facts_of(without_ranges(tl, r"^(ProfilerStep#\d+|step_\d+)$"))
    assert bare["step_detection"] in ("optimizer", "kernel_pattern")
    assert bare["workload_kind"] == marked["workload_kind"]
    assert bare["step_time_ms_p50"] == pytest.approx(marked["step_time_ms_p50"], rel=0.15)
    assert bare["gpu_busy_pct"] == pytest.approx(marked["gpu_busy_pct"], abs=5)


@pytest.mark.parametrize("source", ["nsys", "torch"])
@pytest.mark.parametrize("name", ["sdpa_attention", "healthy", "launch_bound", "decode_small_batch"])
def test_steps_come_from_a_repeating_kernel_without_any_annotation(fixtures_dir, name, source):
    tl = load(fixtures_dir, name, source)
    marked = facts_of(tl)
    out = copy.copy(tl)
    out.ranges = tl.ranges[~tl.ranges["kind"].isin(["nvtx", "annotation"])].reset_index(drop=True)
    bare = facts_of(out)
    assert bare["step_detection"] == "kernel_pattern"
    assert bare["step_time_ms_p50"] == pytest.approx(marked["step_time_ms_p50"], rel=0.15)


def test_nsys_phases_are_measured_per_step(fixtures_dir):
    f = facts_of(load(fixtures_dir, "dataloader_bound", "nsys"))
    assert f["phase_data_ms"] > 10 * f["phase_forward_ms"]
    assert {"phase_backward_ms", "phase_optimizer_ms"} <= set(f)


# ---------------------------------------------------------------- against nsys stats

@pytest.mark.parametrize("name", GPU_BOUND)
def test_kernel_time_per_step_matches_nsys_stats(fixtures_dir, corpus_dir, name):
    """GPU-bound runs repeat the same kernels each step: steady kernel time per step equals NVIDIA's
    total kernel time over the ten profiled steps divided by ten (warm-up extras are small)."""
    stats = pd.read_csv(corpus_dir / "nsys" / f"{name}.stats_cuda_gpu_kern_sum.csv")
    total_ms = stats["Total Time (ns)"].sum() / 1e6
    per_step = facts_of(load(fixtures_dir, name, "nsys"))["kernel_time_ms_per_step"]
    assert per_step == pytest.approx(total_ms / 10, rel=0.1)


@pytest.mark.parametrize("name", RUNS)
def test_kernel_categories_match_nsys_stats_by_name(fixtures_dir, corpus_dir, name):
    """Category times of the whole trace, from our timeline vs from `nsys stats` per-name sums."""
    stats = pd.read_csv(corpus_dir / "nsys" / f"{name}.stats_cuda_gpu_kern_sum.csv")
    ours = load(fixtures_dir, name, "nsys").gpu
    ours = ours[ours["kind"] == "kernel"]
    ours_by_cat = (ours["end_ns"] - ours["start_ns"]).groupby(categorize(ours["name"].astype(str))).sum()
    theirs_by_cat = stats["Total Time (ns)"].groupby(categorize(stats["Name"].astype(str))).sum()
    for cat in set(ours_by_cat.index) | set(theirs_by_cat.index):
        assert ours_by_cat.get(cat, 0) == pytest.approx(theirs_by_cat.get(cat, 0), rel=1e-6, abs=1000), cat


# ---------------------------------------------------------------- invariants

@pytest.mark.parametrize("source", ["nsys", "torch"])
@pytest.mark.parametrize("name", RUNS)
def test_busy_and_idle_classes_add_up_to_the_step(fixtures_dir, name, source):
    f = facts_of(load(fixtures_dir, name, source))
    idle = sum(f[k] for k in ("idle_data_pct", "idle_host_pct", "idle_sync_pct", "idle_alloc_pct", "idle_launch_pct",
                              "idle_comm_pct", "idle_unexplained_pct"))
    assert f["gpu_busy_pct"] + idle == pytest.approx(100.0, abs=0.5)


@pytest.mark.parametrize("source", ["nsys", "torch"])
@pytest.mark.parametrize("name", ["dataloader_bound", "launch_bound", "naive_attention"])
def test_facts_are_finite_catalogued_and_percentages_bounded(fixtures_dir, name, source):
    specs = {s.name: s for s in CATALOGUE}
    result = timeline_analysis([load(fixtures_dir, name, source)])
    assert result.facts
    for fact in result.facts:
        spec = specs[fact.name]
        assert fact.unit == spec.unit
        if spec.type == "number":
            assert isinstance(fact.value, (int, float)) and not isinstance(fact.value, bool)
            assert math.isfinite(fact.value)
            if spec.unit == "%":
                assert -1e-6 <= fact.value <= 100 + 1e-6, fact
        assert re.fullmatch(r"[a-z][a-z0-9_]*", fact.name)


def test_catalogue_is_unique_and_described():
    names = [s.name for s in CATALOGUE]
    assert len(names) == len(set(names))
    assert all(isinstance(s, FactSpec) and s.meaning and s.collect for s in CATALOGUE)


@pytest.mark.parametrize("source", ["nsys", "torch"])
def test_steps_chart_rows_account_for_each_step(fixtures_dir, source):
    result = timeline_analysis([load(fixtures_dir, "dataloader_bound", source)])
    rows = result.charts["steps"]
    assert len(rows) == 9 if source == "nsys" else len(rows) == 5
    for row in rows:
        assert set(row) == {"step", "start_ms", "dur_ms", "busy_ms", "idle_ms_by_class"}
        assert set(row["idle_ms_by_class"]) == set(IDLE_CLASSES)
        assert row["busy_ms"] + sum(row["idle_ms_by_class"].values()) == pytest.approx(row["dur_ms"], rel=1e-3)
        assert row["idle_ms_by_class"]["data"] > row["busy_ms"]
    cats = result.charts["kernel_categories"]
    assert sum(c["share_pct"] for c in cats) == pytest.approx(100.0)


@pytest.mark.parametrize("source", ["nsys", "torch"])
def test_fp32_matmul_gemms_run_without_tensor_cores(fixtures_dir, source):
    f = facts_of(load(fixtures_dir, "fp32_matmul", source))
    assert f["gemm_no_tensor_core_pct"] > 95
    h = facts_of(load(fixtures_dir, "healthy", source))
    assert h["gemm_no_tensor_core_pct"] < 1
    assert h["optimizer_style"] == "fused"


@pytest.mark.parametrize("source", ["nsys", "torch"])
def test_launch_bound_optimizer_is_single_tensor(fixtures_dir, source):
    f = facts_of(load(fixtures_dir, "launch_bound", source))
    assert f["optimizer_style"] == "single_tensor"
    assert f["optimizer_kernels_per_step"] > 500
    assert f["kernel_median_us"] < 2


@pytest.mark.parametrize("source", ["nsys", "torch"])
def test_attention_fused_vs_unfused(fixtures_dir, source):
    naive = facts_of(load(fixtures_dir, "naive_attention", source))
    sdpa = facts_of(load(fixtures_dir, "sdpa_attention", source))
    assert naive["unfused_attention_blocks_per_step"] == 6  # one per layer
    assert naive["fused_attention_pct"] == 0
    assert sdpa["unfused_attention_pct"] == 0 and sdpa["fused_attention_pct"] > 10


@pytest.mark.parametrize("source", ["nsys", "torch"])
def test_host_sync_counts_one_sync_per_item_call(fixtures_dir, source):
    f = facts_of(load(fixtures_dir, "host_sync", source))
    # 8 layers x 2 .item() + the pageable batch copy + loss.item()
    assert f["syncs_per_step"] == pytest.approx(18, abs=0.5)
    assert f["dtoh_memcpy_per_step"] == pytest.approx(17, abs=0.5)


def test_ddp_ranks_get_rank_subjects_and_the_straggler(fixtures_dir):
    tls = [read_torch_trace(fixtures_dir / "torch" / f"ddp_straggler.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    result = timeline_analysis(tls)
    by_rank = {}
    for fact in result.facts:
        if fact.subject is not None:
            assert fact.subject.kind == "rank" and fact.subject.name == f"rank {fact.subject.id}"
            by_rank.setdefault(fact.subject.id, {})[fact.name] = fact.value
    assert by_rank["1"]["rank_is_straggler"] is True and by_rank["0"]["rank_is_straggler"] is False
    assert by_rank["0"]["rank_comm_wait_ms"] > 50 > by_rank["1"]["rank_comm_wait_ms"]
    assert by_rank["1"]["rank_straggler_cost_pct"] > 50
    run = {f.name: f.value for f in result.facts if f.subject is None}
    assert run["straggler_rank"] == "1" and run["world_size"] == 2
    assert [r["rank"] for r in result.charts["ranks"]] == [0, 1]


def test_timeline_analysis_is_deterministic(fixtures_dir):
    tl = load(fixtures_dir, "host_sync", "torch")
    a = [(f.name, f.value, f.subject) for f in timeline_analysis([tl]).facts]
    b = [(f.name, f.value, f.subject) for f in timeline_analysis([tl]).facts]
    assert a == b


# ---------------------------------------------------------------- synthetic timelines

def synthetic_timeline(kernels, host=(), ranges=()) -> Timeline:
    """Synthetic: kernels = [(name, start_us, end_us, corr)], host = [(name, start_us, end_us, corr)],
    ranges = [(name, start_us, end_us, kind)]."""
    us = 1000
    gpu = pd.DataFrame([{"kind": "kernel", "name": n, "start_ns": s * us, "end_ns": e * us, "device": 0,
                         "stream": 7, "correlation": c, "bytes": 0, "copy_kind": "", "pageable": False,
                         "grid": 1, "block": 128} for n, s, e, c in kernels], columns=list(GPU_COLUMNS))
    h = pd.DataFrame([{"name": n, "start_ns": s * us, "end_ns": e * us, "thread": 1, "correlation": c}
                      for n, s, e, c in host], columns=list(HOST_COLUMNS))
    r = pd.DataFrame([{"name": n, "start_ns": s * us, "end_ns": e * us, "thread": 1, "kind": k}
                      for n, s, e, k in ranges], columns=list(RANGE_COLUMNS))
    return Timeline("synthetic", "torch", gpu.astype(GPU_COLUMNS), h.astype(HOST_COLUMNS), r.astype(RANGE_COLUMNS)).validate()


def test_synthetic_gap_after_a_stream_sync_is_classified_sync():
    """Synthetic: each step = kernel, host blocks in cudaStreamSynchronize, then relaunches late."""
    kernels, host, ranges = [], [], []
    for i in range(4):
        t0 = i * 1000
        ranges.append((f"ProfilerStep#{i}", t0, t0 + 1000, "annotation"))
        host.append(("cudaLaunchKernel", t0 + 1, t0 + 5, 10 * i))
        kernels.append(("void gemm_kernel<float>", t0 + 10, t0 + 400, 10 * i))
        host.append(("cudaStreamSynchronize", t0 + 6, t0 + 405, -1))
    f = facts_of(synthetic_timeline(kernels, host, ranges))
    assert f["syncs_per_step"] == 1
    assert f["idle_sync_pct"] > 50
    assert f["idle_top_class"] == "sync"


def test_synthetic_gap_while_host_runs_cpu_ops_is_classified_data():
    """Synthetic: between steps the host runs CPU-only operators (no launches) for 800 us."""
    kernels, host, ranges = [], [], []
    for i in range(4):
        t0 = i * 1000
        ranges.append((f"ProfilerStep#{i}", t0, t0 + 1000, "annotation"))
        ranges.append(("aten::avg_pool2d", t0 + 5, t0 + 805, "op"))
        host.append(("cudaLaunchKernel", t0 + 810, t0 + 815, 10 * i))
        kernels.append(("void at::native::vectorized_elementwise_kernel<4>", t0 + 820, t0 + 990, 10 * i))
    f = facts_of(synthetic_timeline(kernels, host, ranges))
    assert f["idle_top_class"] == "data" and f["idle_data_pct"] > 60


def test_synthetic_softmax_between_gemms_is_unfused_attention():
    names = ["nvjet_sm90_hsh_qk_gemm", "void at::native::masked_fill_kernel", "void cunn_SoftMaxForward<SoftMaxForwardEpilogue>",
             "void at::native::float16_copy_kernel", "nvjet_sm90_hsh_pv_gemm"]
    kernels, ranges = [], []
    for i in range(4):
        t0 = i * 1000
        ranges.append((f"ProfilerStep#{i}", t0, t0 + 1000, "annotation"))
        for j, n in enumerate(names):
            kernels.append((n, t0 + 10 + 190 * j, t0 + 190 * (j + 1), 100 * i + j))
    f = facts_of(synthetic_timeline(kernels, ranges=ranges))
    assert f["unfused_attention_blocks_per_step"] == 1
    assert f["unfused_attention_pct"] > 80
    assert f["workload_kind"] == "inference"


def test_synthetic_log_softmax_of_the_loss_is_not_attention():
    names = ["nvjet_sm90_tst_head_gemm", "void cunn_SoftMaxForward<LogSoftMaxForwardEpilogue>", "nvjet_sm90_tst_gemm"]
    kernels = [(n, 10 + 100 * j + 1000 * i, 90 + 100 * j + 1000 * i, 10 * i + j) for i in range(3) for j, n in enumerate(names)]
    ranges = [(f"ProfilerStep#{i}", 1000 * i, 1000 * i + 1000, "annotation") for i in range(3)]
    assert facts_of(synthetic_timeline(kernels, ranges=ranges))["unfused_attention_blocks_per_step"] == 0


def test_kernel_names_are_categorized():
    names = pd.Series([
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
        "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)::[lambda() (instance 1)]>",
        "void at::native::multi_tensor_apply_kernel<at::native::FusedOptimizerTensorListMetadata<4>>",
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<OpaqueType<2u>>",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
        "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu",  # triton_kernels MoE (TraceLens vLLM, MI300X)
        "_finalize_matmul_scatter_bf16",  # the MoE epilogue that sums the experts' rows
        "volta_scudnn_128x64_stridedB_splitK_xregs_large_nn_v1",  # cuDNN 7 FP32 convolution (Kineto 2020, V100)
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*)",
        "void cunn_ClassNLLCriterion_updateOutput_kernel<float, float>(float*, float*, float*, long*, float*, int)",
    ])
    assert categorize(names).tolist() == ["gemm", "gemm", "attention", "communication", "normalization",
                                          "elementwise", "optimizer", "reduction", "copy", "softmax", "gemm",
                                          "reduction", "gemm", "normalization", "reduction"]
    assert tensor_core_use(names[12:13]).tolist() == ["no"]  # scudnn: single-precision, FMA pipe
    assert tensor_core_use(names[:2]).tolist() == ["no", "yes"]
    assert tensor_core_use(pd.Series(["void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(T1::Params)",
                                      "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_nn_align2>"])).tolist() == ["no", "yes"]


def test_synthetic_straggler_is_the_rank_that_waits_least():
    ranks = [RankSummary(0, 90.0, 70.0, 30.0, {"communication": 65.0}),
             RankSummary(1, 90.0, 2.0, 28.0, {"unexplained": 66.0}),
             RankSummary(2, 90.0, 68.0, 30.0, {"communication": 64.0})]
    out = straggler_analysis(ranks)
    assert out["run"]["straggler_rank"] == "1"
    assert out["per_rank"][1]["rank_straggler_cost_pct"] == pytest.approx(100 * 67 / 90)
    assert out["per_rank"][1]["rank_idle_top_class"] == "unexplained"
    assert straggler_analysis(ranks[:1]) == {"per_rank": {}, "run": {}}


def test_interval_sets_merge_intersect_and_subtract():
    a = IntervalSet.of([0, 5, 20], [10, 8, 30])
    assert (a.starts.tolist(), a.ends.tolist(), a.total) == ([0, 20], [10, 30], 20)
    b = IntervalSet.of([3, 25], [22, 26])
    assert intersect(a, b).total == 7 + 2 + 1
    assert subtract(a, b).total == 20 - 10
    assert a.overlap(np.array([0, 9]), np.array([5, 25])).tolist() == [5, 6]
    assert a.contains(np.array([0, 10, 29, 30])).tolist() == [True, False, True, False]
    gs, ge = a.gaps(-5, 40)
    assert list(zip(gs.tolist(), ge.tolist())) == [(-5, 0), (10, 20), (30, 40)]


def test_synthetic_trace_without_gpu_activity_says_so_instead_of_reporting_zero_busy():
    tl = synthetic_timeline([], host=[("cudaMalloc", 0, 10, -1)])
    m = timeline_metrics(tl)
    assert "gpu_busy_pct" not in m.values  # rules needing it are "not evaluated", not fed a fake 0
    assert m.values["step_detection"] == "none"
    assert any("no GPU activity" in n for n in m.notes)


def test_synthetic_trace_without_api_calls_is_cut_on_the_gpu_clock():
    """Synthetic: kernels only (no CUDA API tracing): one kernel repeats every 100 us."""
    kernels = [("void gemm<float>", 100 * i, 100 * i + 50, -1) for i in range(20)]
    f = facts_of(synthetic_timeline(kernels))
    assert f["step_detection"] == "kernel_pattern"
    assert f["step_time_ms_p50"] == pytest.approx(0.1)
    assert f["gpu_busy_pct"] == pytest.approx(50.0)


def test_synthetic_time_between_step_ranges_is_not_part_of_any_step():
    """Synthetic: 4 annotated steps of 1 ms, busy half of each, with 50 ms of un-annotated idle
    (evaluation, checkpointing) between steps 2 and 3."""
    kernels, host, ranges = [], [], []
    for i in range(4):
        t0 = i * 1000 + (50_000 if i >= 2 else 0)
        ranges.append((f"ProfilerStep#{i}", t0, t0 + 1000, "annotation"))
        host.append(("cudaLaunchKernel", t0 + 1, t0 + 5, 10 * i))
        kernels.append(("void gemm_bf16_kernel", t0 + 500, t0 + 1000, 10 * i))
    f = facts_of(synthetic_timeline(kernels, host, ranges))
    assert f["step_count"] == 3
    assert f["step_time_ms_p50"] == pytest.approx(1.0)
    assert f["gpu_busy_pct"] == pytest.approx(50.0)
