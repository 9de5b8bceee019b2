"""Real timelines from other projects (../shared/external: HTA, Kineto, TraceLens, nsightful, NCAR,
cuda-perf-sandbox; V100, T4, RTX 3060, A100, H100, MI300X): one test per labelled row of its
README. They were not made for this project, so they check the mechanisms, not our own traces."""
from __future__ import annotations

from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.pipeline import diagnose

EXTERNAL = Path(__file__).resolve().parents[1].parent / "shared" / "external"


def external(rel: str) -> str:
    path = EXTERNAL / rel
    if not path.is_file():
        pytest.skip(f"../shared/external/{rel} is not present")
    return str(path)


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


def first(report):
    s = serious(report)
    return s[0] if s else None


def fact(report, name):
    return next(f.value for f in report.facts if f.name == name and f.subject is None)


# file -> category of the first warning-or-critical finding (None: no alarm)
FIRST = {
    "kineto/jan2021/resnet50_num_workers_0/worker0.pt.trace.json.gz": "input_pipeline",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": "fp32_no_tensor_cores",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": "one_time_setup",
    "hta/df_index_resolver/df_index_resolver.json.gz": "launch_overhead",
    "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz": "input_pipeline",
    "tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz": "input_pipeline",
    "tracelens/mi300/ddp_resnet18_no_pool_train_resnet18.json.gz": "allocator_churn",
    "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz": "host_sync",
    "tracelens/inference/vllm_decode_full/graph_execution.json.gz": None,
    # README: host_sync (the idle follows each residual read-back). Its context switches and CPU samples show the
    # launching thread running through those gaps (98% scheduled in, 1.6% in OS calls, samples in Python's float
    # formatting and writes; the `poll` there is another thread's): the host computes on what it read back
    "nsightful/power_iteration__baseline.sqlite.gz": "host_compute",
    "nsys_sqlite/cudaperfsandbox_report1.sqlite.gz": "one_time_setup",
    "ncar/MW_noasync.sqlite.gz": "host_sync",
    "ncar/MW_baseline.sqlite.gz": None,
}


@pytest.mark.parametrize("rel", sorted(FIRST))
def test_external_timeline_gets_its_root_cause_first(rel):
    report = diagnose([external(rel)])
    got = first(report)
    assert (got.category if got else None) == FIRST[rel], [(f.rule, f.category, f.severity) for f in report.findings]


def test_dec2020_tutorial_trace_reports_the_data_wait_beside_a_slower_host():
    """The same tutorial workload in the Dec 2020 format (a bare JSON array), from a run whose host was
    slower: 25% of each step waits in DataLoader __next__ (one block per step) and 27% sits in launch
    gaps (1,470 kernels a step, median 2 us, the forward's ops and zero_grad on a slow CPU; the Jan
    2021 run of the same code has 8%). Both are critical and two points apart: two causes of one size,
    both the first fix (findings.tie_first), led by the shared cause order (the data wait before the
    launch gaps, whose fix needs a step free of host stalls) - whichever a source measures larger."""
    report = diagnose([external("kineto/dec2020/resnet50_num_workers_0/worker0.pt.trace.json.gz")])
    cats = [f.category for f in serious(report)]
    assert cats[:2] == ["input_pipeline", "launch_overhead"]
    assert serious(report)[0].tied_first == serious(report)[1].rule
    assert fact(report, "idle_data_pct") == pytest.approx(24.6, abs=1.5)
    assert fact(report, "step_detection") == "profiler_step"
    data = serious(report)[0]
    assert "enumerate(DataLoader)" in data.message  # the range that decided it


def test_dataloader_fix_of_the_tensorboard_tutorial_removes_input_pipeline():
    """num_workers=4: the data wait is gone (~1.4 ms a step): input_pipeline must not be reported."""
    report = diagnose([external("kineto/jan2021/resnet50_num_workers_4/worker0.pt.trace.json.gz")])
    assert "input_pipeline" not in [f.category for f in serious(report)]
    assert fact(report, "step_detection") == "profiler_step"  # ProfilerStep#N under cat "Operator"


@pytest.mark.parametrize("rel", ["hta/triton_example/triton_example.json.gz",
                                 "tracelens/torch_compile_triton/trace.json.gz",
                                 "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
def test_external_trace_is_read(rel):
    report = diagnose([external(rel)])
    assert fact(report, "kernels_per_step") > 0


def test_volta_fp32_fix_offers_fp16_autocast_not_bf16():
    """V100 (sm_70) has no bf16 and no TF32: the fix is fp16 autocast with GradScaler."""
    report = diagnose([external("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")])
    f = first(report)
    assert "GradScaler" in f.fix and "torch.float16" in f.fix
    assert "torch.bfloat16" not in f.fix and "set_float32_matmul_precision" not in f.fix


def test_amd_tensile_gemms_are_gemms():
    report = diagnose([external("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")])
    assert fact(report, "kernel_gemm_pct") > 30


def test_inference_server_decode_is_inference_tree():
    report = diagnose([external("tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")])
    assert fact(report, "workload_kind") == "inference"
    assert all(f.rule.startswith("INFER") for f in serious(report))
    assert "hipMemcpyWithStream" in first(report).message  # the call that decided it


def test_cuda_graph_replay_steps_have_real_length():
    report = diagnose([external("tracelens/inference/vllm_decode_full/graph_execution.json.gz")])
    assert fact(report, "step_time_ms_p50") > 1.0
    assert fact(report, "gpu_busy_pct") > 90
    # its MoE expert GEMMs are Triton's `_matmul_ogs_*` (68% of the step): GEMMs, not "other"
    assert fact(report, "top_kernel_category") == "gemm" and fact(report, "kernel_gemm_pct") > 70
    assert fact(report, "kv_cache_paged") is True  # vLLM's reshape_and_cache_flash


def test_power_iteration_steps_have_the_period_of_one_iteration():
    """Its NVTX ranges `Step 30 to 40` are the outer iterations: 10 power steps, then the residual read
    back and the vector copied out (two read-backs per iteration)."""
    report = diagnose([external("nsightful/power_iteration__baseline.sqlite.gz")])
    assert fact(report, "step_detection") == "nvtx"
    assert fact(report, "step_time_ms_p50") == pytest.approx(41, rel=0.1)
    assert fact(report, "syncs_per_step") == pytest.approx(2)


def test_setup_dominated_trace_is_also_diagnosed_after_warm_up():
    report = diagnose([external("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")])
    assert fact(report, "setup_pct") > 80
    assert fact(report, "step_time_ms_p50") < 1000  # the steady part (the `measure` forward), not 12.9 s
    assert "launch_overhead" not in [f.category for f in serious(report)]


def test_allocator_churn_names_the_calls():
    report = diagnose([external("tracelens/mi300/ddp_resnet18_no_pool_train_resnet18.json.gz")])
    f = first(report)
    assert "hipFree" in f.message or "hipMalloc" in f.message


def test_old_nsight_systems_report_is_named_in_the_conversion_message(tmp_path, monkeypatch):
    src = Path(external("nsys_rep/cudaperfsandbox_report1.nsys-rep"))
    qdrep = tmp_path / "old.qdrep"
    qdrep.write_bytes(src.read_bytes())
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys
    with pytest.raises(InputError, match=r"\.qdrep.*nsys export --type sqlite -o \S*/old\.sqlite \S*/old\.qdrep"):
        diagnose([str(qdrep)])
