"""Issue 29's timeline workloads (tools/gen/stack2026_timeline.py; fixtures `s_*`, fixtures/README.md "Today's
stacks (issue 29)"): real H200 runs under torch.profiler and Nsight Systems (-t cuda,nvtx,osrt with CPU samples
and context switches), one root cause each by construction, each with a twin without it, labelled from the
numbers read off the traces: torch.compile recompiling every step, cuDNN autotuning every new shape, a Python
thread holding the GIL beside the loop, a resident NumPy array uploaded by CuPy every step."""
from __future__ import annotations

import pytest

from diagnoser.pipeline import diagnose

SOURCES = {"torch": "torch/{}.pt.trace.json.gz", "nsys": "nsys/{}.sqlite.gz"}
NEW = {"compile_recompile", "cudnn_autotune", "gil_contention"}
_CACHE: dict = {}


def report_of(fixtures_dir, name, source):
    key = (name, source)
    if key not in _CACHE:
        _CACHE[key] = diagnose([str(fixtures_dir / SOURCES[source].format(name))])
    return _CACHE[key]


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


def facts(report) -> dict:
    return {f.name: f.value for f in report.facts if f.subject is None}


def test_compile_recompiling_every_request_is_named_with_its_compile_time(fixtures_dir):
    # fixed-length batches of a new length every step under torch.compile(dynamic=False): 4.27 s of the 4.36 s
    # step in Dynamo/Inductor, GPU busy 1%. Before: launch_overhead ("launch-bound decode"), 99% launch idle
    r = report_of(fixtures_dir, "s_infer_compile_recompile", "torch")
    first = serious(r)[0]
    assert (first.rule, first.category) == ("INFER019", "compile_recompile")
    f = facts(r)
    assert f["recompiles_per_step"] == pytest.approx(1.0)
    assert f["compile_step_pct"] > 90 and f["idle_compile_pct"] > 85 and f["idle_launch_pct"] < 10
    assert "frame 0: compiles 0/3 to 0/4" in first.message and "mark_dynamic" in first.fix
    assert "TORCH_LOGS=recompiles" in first.fix
    # what fills the idle is named, with its share, before any "unexplained"
    assert "`_compile.compile_inner (dynamo_timed)` 100%" in f["idle_unexplained_contents"]


def test_compile_once_with_mark_dynamic_is_not_a_recompile(fixtures_dir):
    # the twin (mark_dynamic on the length): compiled in the warm-up step, no compile in the steady steps; it is
    # launch-bound by its own numbers (37 kernels of 31 us a step, GPU busy 45%), which stays its finding
    r = report_of(fixtures_dir, "s_infer_compile_dynamic", "torch")
    assert facts(r)["recompiles_per_step"] == 0
    assert not {f.category for f in r.findings} & NEW
    assert serious(r)[0].category == "launch_overhead"


def test_cudnn_benchmark_with_a_new_image_size_every_step_is_named(fixtures_dir):
    # cudnn.benchmark=True, multi-scale sizes: 2.86 s steps against 9.4 ms once tuned; 483 device syncs a step
    # inside 16 convolution calls. Before: launch_overhead (97% launch idle)
    r = report_of(fixtures_dir, "s_train_cudnn_multiscale", "torch")
    first = serious(r)[0]
    assert (first.rule, first.category) == ("TRAIN021", "cudnn_autotune")
    f = facts(r)
    assert f["conv_autotune_syncs_per_step"] == pytest.approx(483, abs=5)
    assert f["conv_autotune_step_pct"] > 95
    assert "benchmark = False" in first.fix
    twin = report_of(fixtures_dir, "s_train_cudnn_fixed", "torch")
    assert facts(twin)["conv_autotune_syncs_per_step"] == 0
    assert not {f.category for f in twin.findings} & NEW


@pytest.mark.parametrize("source", ["torch", "nsys"])
def test_a_python_thread_beside_the_loop_is_named_as_gil_contention(fixtures_dir, source):
    # a thread averaging a 200,000-float window in a bytecode loop: step 1.1 s (torch) / 2.2 s (nsys) against
    # 22 ms without it. Before: unexplained_idle from both sources
    r = report_of(fixtures_dir, "s_train_gil_thread", source)
    first = serious(r)[0]
    assert (first.rule, first.category) == ("TRAIN022", "gil_contention")
    f = facts(r)
    assert f["gil_idle_pct"] > 85
    if source == "nsys":  # the waits at the switch interval, and the thread sampled meanwhile, by its name
        assert f["gil_wait_call"] == "pthread_cond_timedwait" and f["gil_waits_at_interval_pct"] > 90
        assert f["gil_holder"].startswith("metrics-agg (thread ")
    else:  # the other thread's Python frame covering the idle
        assert "metrics_worker (stack2026_timeline.py)" in f["gil_holder"]


@pytest.mark.parametrize("source", ["torch", "nsys"])
def test_the_same_loop_without_the_thread_raises_no_gil_finding(fixtures_dir, source):
    r = report_of(fixtures_dir, "s_train_gil_no_thread", source)
    assert facts(r)["gil_idle_pct"] == 0
    assert not {f.category for f in r.findings} & NEW
    if source == "nsys":  # GPU busy 86%: nothing above info
        assert not serious(r)


def test_cupy_upload_of_a_resident_numpy_array_is_not_an_input_pipeline(fixtures_dir):
    # `cupy.asarray` of a 100 MB NumPy array each iteration: the host thread sits in libc (CuPy stages the array
    # in its pinned buffer) for 74% of the time, then a 1.8 ms DMA. Before: input_pipeline with DataLoader advice
    r = report_of(fixtures_dir, "s_cupy_pageable_upload", "nsys")
    first = serious(r)[0]
    assert (first.rule, first.category) == ("INFER022", "pageable_memcpy")
    assert "input_pipeline" not in {f.category for f in r.findings}
    assert facts(r)["idle_staging_copy_pct"] == pytest.approx(74, abs=3)
    assert "cupyx.empty_pinned" in first.fix  # the CuPy variant of the advice
    assert "DataLoader" not in first.fix


def test_an_export_without_samples_says_what_it_cannot_tell_apart(fixtures_dir):
    # the same CuPy program under -t cuda,nvtx only: the gaps that end in the upload stay data, but the
    # finding says nothing shows the host preparing anything, and how to record it
    r = report_of(fixtures_dir, "s_cupy_pageable_upload_nosamples", "nsys")
    first = serious(r)[0]
    assert first.category == "input_pipeline"
    assert "look the same here" in first.message and "--sample=process-tree" in first.message


def test_cupy_pinned_double_buffered_upload_raises_no_copy_finding(fixtures_dir):
    # the twin: pinned staging, copies on a side stream one step ahead: GPU busy 98%; its first fix is the FP32
    # GEMM (CuPy matmul without TF32), a true finding of its own numbers
    r = report_of(fixtures_dir, "s_cupy_pinned_upload", "nsys")
    cats = {f.category for f in serious(r)}
    assert "pageable_memcpy" not in cats and "input_pipeline" not in cats
    assert serious(r)[0].category == "fp32_no_tensor_cores"


def test_a_pageable_upload_of_resident_batches_is_pageable_memcpy_first(fixtures_dir):
    # two 138 MB batches held in ordinary host memory, `.to("cuda")` every step: 24 ms of the 40 ms step copying
    # at 5.7 GB/s with the GPU "busy" (the copy engine); the pinned twin's step is 18.9 ms. The copy is the
    # pageable cause, not memory-bound kernels, whatever the busy share says
    r = report_of(fixtures_dir, "s_train_pageable_batches", "torch")
    first = serious(r)[0]
    assert (first.rule, first.category) == ("TRAIN007", "pageable_memcpy")
    assert facts(r)["pageable_memcpy_ms_per_step"] == pytest.approx(24.2, abs=1)
    twin = report_of(fixtures_dir, "s_train_pinned_batches", "torch")
    assert not serious(twin)
