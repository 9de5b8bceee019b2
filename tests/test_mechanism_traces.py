"""Real H200 traces made by tools/gen/mech_scenarios.py for the mechanisms of issue 9 (fixtures/README.md,
"Mechanism traces"): code unlike the corpus (other models, loops, sizes), no NVTX ranges anywhere, each
workload with one root cause by construction, checked on its own numbers (tools/gen/mech_check.py)
before it was labelled. The first warning-or-critical finding must name that cause, in the right tree;
a healthy twin (the same code with the cause removed) must raise nothing serious."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from diagnoser.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

TRAIN, INFER = "train-slow", "inference-slow"

# (workload, source) -> (category of the first warning-or-critical finding, tree)
ROOT_CAUSE = {
    ("infer_einsum_attention", "torch"): ("unfused_attention", INFER),
    ("train_vit_matmul_attention", "torch"): ("unfused_attention", TRAIN),
    ("train_wide_mlp_metric_syncs", "torch"): ("host_sync", TRAIN),
    ("train_wide_mlp_metric_syncs", "nsys"): ("host_sync", TRAIN),
    ("train_convnet_slow_loader", "torch"): ("input_pipeline", TRAIN),
    ("train_convnet_slow_loader", "nsys"): ("input_pipeline", TRAIN),
    ("infer_bert_tokenize", "torch"): ("input_pipeline", INFER),
    ("infer_bert_tokenize", "nsys"): ("input_pipeline", INFER),
    ("train_unet_no_cache", "torch"): ("allocator_churn", TRAIN),
    ("train_unet_no_cache", "nsys"): ("allocator_churn", TRAIN),
    ("infer_unet_empty_cache", "torch"): ("allocator_churn", INFER),
    ("setup_convnet_from_start", "torch"): ("one_time_setup", TRAIN),
    ("infer_tiny_mlp_eager", "torch"): ("launch_overhead", INFER),
    ("power_iteration_readback", "torch"): ("host_sync", INFER),
    ("power_iteration_readback", "nsys"): ("host_sync", INFER),
    ("train_convnet_fp32", "torch"): ("fp32_no_tensor_cores", TRAIN),
    ("infer_kv_decode", "torch"): ("launch_overhead", INFER),
}

# healthy twins (torch traces) -> warning-or-critical categories the numbers allow (empty: none at all)
TWINS = {
    "infer_sdpa_attention": set(),           # GPU busy 97%, flash attention
    "train_convnet_gpu_batches": set(),      # 97%
    "train_unet_cached": {"memory_bound_kernels"},  # 97% busy, 50.2% in bandwidth-bound kernels: borderline
    "setup_convnet_scheduled": set(),        # 97%, the steady state of setup_convnet_from_start
    "power_iteration_check_every_50": set(),  # 89%, a bandwidth-bound GEMV loop
    "train_convnet_bf16": set(),             # 97%
    "infer_tiny_mlp_graph": {"small_batch"},  # graph replay: 1.5 us kernels at batch 1 remain
}


def path_of(name: str, source: str) -> str:
    if source == "nsys":
        return str(FIXTURES / "nsys" / f"m_{name}.sqlite.gz")
    return str(FIXTURES / "torch" / f"m_{name}.pt.trace.json.gz")


@functools.lru_cache(maxsize=None)
def report_of(name: str, source: str = "torch"):
    return diagnose([path_of(name, source)])


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


def run_facts(report) -> dict:
    return {f.name: f.value for f in report.facts if f.subject is None}


@pytest.mark.parametrize("name,source", sorted(ROOT_CAUSE), ids=[f"{n}-{s}" for n, s in sorted(ROOT_CAUSE)])
def test_mechanism_trace_reports_its_root_cause_first(name, source):
    category, tree = ROOT_CAUSE[(name, source)]
    found = serious(report_of(name, source))
    assert found, "no warning or critical finding"
    assert (found[0].category, found[0].tree) == (category, tree)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_healthy_twin_raises_nothing_serious(name):
    assert {f.category for f in serious(report_of(name))} <= TWINS[name]


@pytest.mark.parametrize("name", ["infer_einsum_attention", "infer_kv_decode", "infer_tiny_mlp_graph",
                                  "power_iteration_readback", "infer_unet_empty_cache", "infer_bert_tokenize"])
def test_trace_without_backward_or_optimizer_is_inference(name):
    report = report_of(name)
    assert run_facts(report)["workload_kind"] == "inference"
    assert all(f.tree == INFER for f in serious(report))


def test_einsum_attention_with_dtype_round_trips_is_one_block_per_layer():
    # 6 layers: einsum scores, scale, masked_fill, float(), softmax, to(bf16), .contiguous() copies, einsum
    facts = run_facts(report_of("infer_einsum_attention"))
    assert facts["unfused_attention_blocks_per_step"] == pytest.approx(6)
    assert facts["fused_attention_pct"] == 0


def test_matmul_attention_in_training_is_two_blocks_per_layer_not_the_loss_softmax():
    # 4 ViT layers, each a forward block and its backward (softmax backward between the bmm gradients);
    # the cross-entropy's log_softmax after the classifier GEMM is not attention
    facts = run_facts(report_of("train_vit_matmul_attention"))
    assert facts["unfused_attention_blocks_per_step"] == pytest.approx(8)


@pytest.mark.parametrize("source", ["torch", "nsys"])
def test_per_parameter_reads_are_syncs_even_as_pageable_copies(source):
    # 2 micro-batches x (30 grad norms + 30 weight norms + preds + labels) = 124 blocking reads per step
    report = report_of("train_wide_mlp_metric_syncs", source)
    assert run_facts(report)["syncs_per_step"] == pytest.approx(124)
    assert serious(report)[0].category == "host_sync"  # not pageable_memcpy: pinned memory would not help


@pytest.mark.parametrize("source", ["torch", "nsys"])
def test_power_iteration_steps_are_one_iteration(source):
    # no ProfilerStep, no NVTX: 150 iterations of GEMV + norm + divide + one .item() (0.13-0.16 ms each)
    facts = run_facts(report_of("power_iteration_readback", source))
    assert facts["step_detection"] == "kernel_pattern"
    assert facts["syncs_per_step"] == pytest.approx(1)
    assert facts["step_count"] > 100
    assert 0.08 < facts["step_time_ms_p50"] < 0.3


def test_graph_replay_steps_are_not_zero_length_and_not_launch_bound():
    # one cudaGraphLaunch of 97 kernels per request; the request takes 0.35 ms
    report = report_of("infer_tiny_mlp_graph")
    facts = run_facts(report)
    assert facts["step_count"] == 2
    assert 0.2 < facts["step_time_ms_p50"] < 0.6
    assert "launch_overhead" not in {f.category for f in serious(report)}


def test_start_up_dominated_trace_diagnoses_its_steady_part_like_the_scheduled_twin():
    # the from-start trace (6.4 s, GPU busy 2.5%: CUDA init, cuDNN benchmark of 9 conv shapes in the first
    # iteration) ends with the same steady iteration the scheduled twin shows GPU-bound (97% busy, 11 ms)
    start, twin = report_of("setup_convnet_from_start"), report_of("setup_convnet_scheduled")
    ratio = run_facts(start)["step_time_ms_p50"] / run_facts(twin)["step_time_ms_p50"]
    assert 0.5 < ratio < 2  # measured 9.7 / 11.0 ms
    assert "launch_overhead" not in {f.category for f in serious(start)}  # start-up is not launch overhead


def test_gemv_loop_is_not_an_fp32_tensor_core_problem():
    # 95% of GPU time in cuBLAS gemv2T_kernel_val: A[8192 x 8192] fp32 (256 MB) read in ~80 us = 3.2 TB/s,
    # at the bandwidth roofline; a matrix-vector product gains nothing from TF32 / bf16 tensor cores
    assert "fp32_no_tensor_cores" not in {f.category for f in serious(report_of("power_iteration_check_every_50"))}
