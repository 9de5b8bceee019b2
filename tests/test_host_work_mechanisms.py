"""Host work that is not input (issue 21; tools/gen/host_work_mechanisms.py, fixtures `h_*`, fixtures/README.md
"Host work that is not input"): real H200 runs whose GPU idles while the host computes on results it
has just read back - box decoding and NMS in NumPy, per-tag metrics in NumPy, upsampling and arg-max
of CPU tensors. Decided from what the host is seen doing in the gap after the read-back (CPU operators
and Python frames that launch nothing, with_stack=True), never from names of the scripts."""
from __future__ import annotations

import pytest

from diagnoser.pipeline import diagnose

_CACHE: dict = {}


def report_of(fixtures_dir, rel):
    if rel not in _CACHE:
        _CACHE[rel] = diagnose([str(fixtures_dir / rel)])
    return _CACHE[rel]


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


def facts(report) -> dict:
    return {f.name: f.value for f in report.facts if f.subject is None}


def test_numpy_nms_after_the_read_back_is_host_compute_not_a_sync(fixtures_dir):
    # detector on 8 x 512^2, the head output copied back, boxes decoded and greedy NMS in NumPy per image:
    # 95% of the 71 ms request the GPU idles after the one read-back; the host is in np_nms (62 ms) and
    # np_decode; blocked in the copy itself for 0.1 ms (it was host_sync: INFER013 at 94.5% idle after a sync)
    report = report_of(fixtures_dir, "torch/h_infer_detect_numpy_nms.pt.trace.json.gz")
    f = facts(report)
    assert f["idle_host_after_sync_pct"] == pytest.approx(94.5, abs=2) and f["idle_sync_pct"] < 1
    assert f["idle_host_optimizer_pct"] == pytest.approx(0, abs=0.1)
    first = serious(report)[0]
    assert (first.rule, first.category) == ("INFER018", "host_compute")
    assert "np_nms" in f["host_gap_python"].split(",")[0]
    assert not any(x.category in ("host_sync", "input_pipeline") for x in serious(report))


def test_numpy_metrics_every_step_is_host_compute_in_training(fixtures_dir):
    # 1-D conv tagger, batch 384: each step .cpu().numpy() of probabilities and labels, per-tag ROC-AUC / F1 /
    # confusion in NumPy over the last 8 batches: 37% of the 29 ms step the GPU idles while the host is in
    # np_metrics (9.6 ms); GPU busy 60% (it was TRAIN016 host_sync, 38% idle after a sync)
    report = report_of(fixtures_dir, "torch/h_train_numpy_metrics.pt.trace.json.gz")
    f = facts(report)
    assert f["idle_host_after_sync_pct"] == pytest.approx(36.9, abs=2)
    first = serious(report)[0]
    assert (first.rule, first.category) == ("TRAIN019", "host_compute")
    assert first.estimated_gain == pytest.approx(0.369, abs=0.02)
    assert "np_metrics" in f["host_gap_python"].split(",")[0]
    assert "TRAIN018" not in {x.rule for x in report.findings}  # not the optimizer


def test_cpu_operators_on_copied_back_logits_are_not_input_work(fixtures_dir):
    # segmentation logits at 1/4 resolution copied back, upsampled / arg-maxed / counted by torch CPU ops:
    # the CPU operators without CUDA calls used to count as input preparation (INFER006 at 99%); the gap
    # begins at the read-back and ends in no input copy, so it is host work on the results
    report = report_of(fixtures_dir, "torch/h_infer_seg_cpu_upsample.pt.trace.json.gz")
    f = facts(report)
    assert f["idle_host_after_sync_pct"] > 95 and f["idle_data_pct"] < 1
    assert f["host_gap_ranges"].startswith("aten::argmax")
    assert serious(report)[0].category == "host_compute"
    assert "input_pipeline" not in {x.category for x in serious(report)}


def test_an_nsys_export_without_host_evidence_keeps_the_idle_with_the_sync(fixtures_dir):
    """The nsys export of the same segmentation run (-t cuda,nvtx, no CPU sampling or OS runtime): after
    the read-back the host makes no CUDA call for 420 ms, but nothing says whether it computes or waits
    (../shared/external's power_iteration host is blocked in poll there, per its OS-runtime trace): the idle
    stays with the sync that began it. Both sources measure the same idle (99%) and the same read-back."""
    nsys = report_of(fixtures_dir, "nsys/h_infer_seg_cpu_upsample.sqlite.gz")
    torch = report_of(fixtures_dir, "torch/h_infer_seg_cpu_upsample.pt.trace.json.gz")
    fn, ft = facts(nsys), facts(torch)
    assert fn["idle_sync_pct"] == pytest.approx(ft["idle_host_after_sync_pct"], abs=1.5)
    assert fn["dtoh_memcpy_per_step"] == ft["dtoh_memcpy_per_step"] == 1
    first = serious(nsys)[0]
    assert first.category == "host_sync"
    # ... and the report says the host was not blocked there: 99% of the step after the sync had returned
    assert fn["idle_sync_quiet_pct"] == pytest.approx(fn["idle_sync_pct"], abs=1) and fn["sync_blocked_pct"] < 1
    assert "nothing recorded to say what it did" in first.message


def test_the_optimizer_twin_is_launch_bound_without_the_profiler_too(fixtures_dir):
    """t_train_gpu_adamw (the CPU-AdamW twin: fused AdamW on the GPU) read launch-bound under torch.profiler;
    its nsys export (no torch profiler, emit_nvtx ranges only) says the same: 125 kernels a step, GPU busy
    30%, launch gaps 50% of the 8 ms step. The finding is the workload's (a 38M-parameter MLP step is short
    on an H200), not profiler overhead; the host-compute cause of the twin is gone."""
    report = report_of(fixtures_dir, "nsys/t_train_gpu_adamw.sqlite.gz")
    f = facts(report)
    assert f["kernels_per_step"] == pytest.approx(125) and f["gpu_busy_pct"] == pytest.approx(30.5, abs=3)
    assert serious(report)[0].category == "launch_overhead"
    assert f["idle_host_pct"] < 10 and "host_compute" not in {x.category for x in serious(report)}
