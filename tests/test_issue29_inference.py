"""Real H200 workloads of issue 29, inference / memory / kernel half (tools/gen/issue29_inference.py): each
has one root cause by construction and, most, a twin without it. Numbers in the comments are read off the
files themselves (fixtures/README.md, "Issue 29: decode, alignment, KV-cache OOM, barriers").
"""
from __future__ import annotations

from functools import lru_cache

from conftest import FIXTURES
from diagnoser.findings import leaves
from diagnoser.kernel_names import gemm_alignment
from diagnoser.pipeline import diagnose

TORCH, NSYS, MEM, NCU = (FIXTURES / d for d in ("torch", "nsys", "mem", "ncu"))


@lru_cache(maxsize=None)
def report_of(*paths):
    return diagnose([str(p) for p in paths])


def warnings_of(*paths):
    return [f for f in report_of(*paths).findings if f.severity in ("critical", "warning")]


def first_category(*paths) -> str:
    w = warnings_of(*paths)
    return w[0].category if w else "none"


def rules_of(*paths) -> set[str]:
    return {f.rule for f in report_of(*paths).findings}


def finding(rule, *paths):
    return next(f for f in report_of(*paths).findings if f.rule == rule)


def facts_of(*paths) -> dict:
    return {f.name: f.value for f in report_of(*paths).facts if f.subject is None}


# ---- decoding without a KV cache (torch trace with shapes; the export cannot tell)

def test_decode_without_kv_cache_torch_trace_names_the_prefix_rerun_with_its_growth():
    path = TORCH / "q_decode_no_cache.pt.trace.json.gz"
    assert first_category(path) == "decode_without_kv_cache"
    f = finding("INFER030", path)
    # batch 128: the GEMM rows grow by 128 a token, 131 -> 139 tokens re-run over the 9 steady steps
    assert f.evidence["decode_gemm_rows_growth_per_step"]["value"] == 128
    assert f.evidence["decode_recomputed_tokens_first"]["value"] == 131
    assert f.evidence["decode_recomputed_tokens_last"]["value"] == 139
    assert "re-runs the model over the whole sequence" in f.message and "135x the GEMM work" in f.message
    assert "past_key_values" in f.fix and "use_cache=True" in f.fix and "paged KV" in f.fix
    assert f.estimated_gain > 0.9  # GPU 97% busy, 135 tokens run per token generated


def test_decode_with_kv_cache_twin_raises_no_kv_cache_finding():
    path = TORCH / "q_decode_cached.pt.trace.json.gz"
    facts = facts_of(path)
    assert facts["decode_gemm_rows_growth_per_step"] == 0 and facts["decode_gemm_rows_first"] == 128
    assert "INFER030" not in rules_of(path)
    # the cached decoder runs 2.2 ms of kernels a token against 31.7 ms: the host's launches are its limit now
    assert first_category(path) == "launch_overhead"


def test_decode_without_kv_cache_from_two_profiled_tokens_when_the_ids_grow_by_one():
    """The held-out decoder (calibration_heldout.py, d 1024, batch 64) cut to 2 profiled tokens: one steady step,
    so the passes are counted from the warm-up step too; two are enough where torch.cat appends one token a
    sequence ([64, 259] + [64, 1]) and the GEMM rows grow by that batch. Its KV-cache twin stays silent."""
    path = TORCH / "cal_ho_decode_no_cache_before.pt.trace.json.gz"
    f = finding("INFER030", path)
    assert f.evidence["decode_gemm_rows_growth_per_step"]["value"] == 64
    assert f.evidence["decode_recomputed_tokens_first"]["value"] == 259
    assert facts_of(path)["decode_rows_steps_measured"] == 2
    assert "INFER030" not in rules_of(TORCH / "cal_ho_decode_no_cache_after.pt.trace.json.gz")
    assert facts_of(TORCH / "cal_ho_decode_no_cache_after.pt.trace.json.gz")["decode_gemm_rows_growth_per_step"] == 0


def test_decode_without_kv_cache_prediction_is_replayed_and_says_the_host_binds():
    """A small decoder (decode_kv_pairs.py hand_small: d 512, 8 layers, batch 16, ~100 tokens) is launch-bound:
    0.8 ms of kernels in an 18.5 ms step. The cache cuts the GPU work, and the host's work per GEMM of a new
    shape (cuBLAS choosing an algorithm for each new row count); the prediction says the host binds after it.
    Its twin with the cache ran 13.67 ms: inside."""
    before = TORCH / "cal_kv_decode_small_before.pt.trace.json.gz"
    f = finding("INFER030", before)
    low, high = f.predicted_step_ms
    assert 12.0 < low < 13.67 < high < 16.5
    assert "host's launches then bind" in f.step_assumes
    assert f.to_json()["prediction_assumes"] == f.step_assumes
    after = TORCH / "cal_kv_decode_small_after.pt.trace.json.gz"
    assert "INFER030" not in rules_of(after)
    assert facts_of(after)["step_time_ms_p50"] == __import__("pytest").approx(13.673, rel=1e-3)


def test_decode_without_kv_cache_export_says_what_it_cannot_see():
    path = NSYS / "q_decode_no_cache.sqlite.gz"
    assert first_category(path) == "none"
    assert "INFER030" not in rules_of(path)
    ne = next(n for n in report_of(path).not_evaluated if n.rule == "INFER030")
    assert "record_shapes=True" in ne.collect


# ---- unaligned GEMMs from an export alone

def test_gemm_alignment_is_read_from_cutlass_and_cublas_kernel_names():
    assert gemm_alignment("cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1") == (1, 2)
    assert gemm_alignment("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_aligna2_alignc8_execute_kernel") == (2, 2)
    # CUDA-core GEMMs load scalars whatever the shapes: their align1 is no sign of an unaligned dimension
    assert gemm_alignment("cutlass_80_simt_sgemm_128x256_8x4_nt_align1") is None
    assert gemm_alignment("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") is None


def test_lm_head_on_vocab_50257_export_names_the_align1_gemms_and_the_padding():
    path = NSYS / "q_lmhead_v50257.sqlite.gz"
    assert first_category(path) == "unaligned_gemm"
    f = finding("TRAIN030", path)
    assert 50 < f.evidence["gemm_unaligned_step_pct"]["value"] < 65  # 57% of a 35.8 ms step
    assert f.evidence["gemm_unaligned_kernel_count"]["value"] == 3  # LM head forward, dgrad, wgrad
    assert "align1" in f.evidence["gemm_unaligned_top_kernel"]["value"]
    assert "1 element (2 bytes)" in f.message
    assert "50304" in f.fix and "multiple of 64" in f.fix


def test_lm_head_padded_to_50304_twin_has_no_unaligned_gemm_and_a_shorter_step():
    aligned, unaligned = NSYS / "q_lmhead_v50304.sqlite.gz", NSYS / "q_lmhead_v50257.sqlite.gz"
    assert facts_of(aligned)["gemm_unaligned_step_pct"] == 0
    assert "TRAIN030" not in rules_of(aligned)
    # padding saved about half the step (35.8 -> 18.3 ms)
    assert facts_of(aligned)["step_time_ms_mean"] < 0.6 * facts_of(unaligned)["step_time_ms_mean"]


def test_lm_head_torch_trace_keeps_the_per_op_roofline_finding_and_no_duplicate():
    path = TORCH / "q_lmhead_v50257.pt.trace.json.gz"
    assert first_category(path) == "gemm_below_roof"
    assert "50257" in finding("KERN019", path).message
    assert "TRAIN030" not in rules_of(path)  # the roofline already names the op and says "unaligned"


# ---- KV cache as the owner of an OOM

def test_preallocated_kv_cache_oom_names_the_cache_its_size_and_the_fix():
    path = MEM / "q_kv_prealloc_oom.snapshot.pickle.gz"
    assert first_category(path) == "oom_kv_cache"
    assert "OOM005" not in rules_of(path)
    f = finding("OOM009", path)
    # 8 layers x K and V x [32, 16, 8192, 128] bf16: 16 tensors of 1 GiB, 90% of the 17.8 GiB live
    assert f.evidence["kv_cache_gib"]["value"] == 16.0
    assert f.evidence["kv_cache_tensor_count"]["value"] == 16
    assert 89 < f.evidence["kv_cache_share_pct"]["value"] < 91
    assert "in __init__" in f.evidence["kv_cache_site"]["value"]
    assert "paged" in f.fix.lower() and "fp8" in f.fix


def test_kv_cache_sized_for_what_it_serves_twin_has_no_oom_finding():
    path = MEM / "q_kv_sized.snapshot.pickle.gz"
    assert facts_of(path)["kv_cache_gib"] == 5.0  # recognised, 320 MiB x 16, and nothing to say
    assert first_category(path) == "none"


def test_training_snapshots_have_no_kv_cache_by_shape():
    # equal tensors made back to back in a process with gradients or optimizer state are no KV cache
    for name in ("optimizer", "activations", "x_oom_capacity"):
        assert facts_of(MEM / f"{name}.snapshot.pickle.gz")["kv_cache_gib"] == 0, name


# ---- barrier stalls in a CUDA C++ block reduction (Nsight Compute)

def _kernel(path, launch):
    return [leaf for f in report_of(path).findings for leaf in leaves(f)
            if leaf.subject is not None and leaf.subject.id == str(launch)]


def test_block_reduction_with_syncthreads_per_step_is_barrier_stalled_not_compute_bound():
    path = NCU / "q_reduce.raw.csv.gz"
    found = _kernel(path, 0)  # row_sum_block_barrier, 1024 threads: barrier 27% of stalls, ADU 47%, LSU 57%, FP32 14%
    rules = {f.rule for f in found}
    assert "KERN015" in rules and "KERN001" not in rules
    f = next(f for f in found if f.rule == "KERN015")
    assert "not computing" in f.message
    assert "__shfl_down_sync" in f.fix and "cg::reduce" in f.fix


def test_warp_shuffle_reduction_twin_has_no_barrier_stall():
    path = NCU / "q_reduce.raw.csv.gz"
    assert not {f.rule for f in _kernel(path, 1)} & {"KERN015", "KERN001"}  # row_sum_warp_shuffle, 2.2x faster


# ---- PyTorch Performance Tuning Guide items (docs/coverage.md)

def test_tensors_created_on_cpu_then_moved_read_as_pageable_copies():
    path = TORCH / "q_tensors_from_cpu.pt.trace.json.gz"
    assert {"TRAIN001", "TRAIN007"} <= rules_of(path)


def test_anomaly_detection_left_on_is_named_with_its_nan_checks():
    path = TORCH / "q_anomaly_on.pt.trace.json.gz"
    assert first_category(path) == "host_sync"
    assert "TRAIN002" not in rules_of(path)
    f = finding("TRAIN031", path)
    assert f.evidence["anomaly_nan_checks_per_step"]["value"] == 21  # every one of the 21 syncs a step
    assert "set_detect_anomaly" in f.fix


def test_host_sync_training_without_anomaly_mode_keeps_its_sync_finding():
    path = FIXTURES / "torch" / "host_sync.pt.trace.json.gz"
    assert facts_of(path)["anomaly_check_sync_pct"] == 0
    assert "TRAIN002" in rules_of(path) and "TRAIN031" not in rules_of(path)


def test_denoiser_healthy_twin_raises_no_warning():
    assert first_category(TORCH / "q_denoise_healthy.pt.trace.json.gz") == "none"
