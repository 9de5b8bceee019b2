"""Timeline diagnosis end to end: every corpus workload, from its Nsight Systems export AND its
PyTorch trace, reports the corpus README's category first (healthy runs report no warning)."""
from __future__ import annotations

import pytest

from diagnoser.pipeline import diagnose

SOURCES = ["nsys", "torch"]


def fixture_path(fixtures_dir, name, source):
    if source == "nsys":
        return fixtures_dir / "nsys" / f"{name}.sqlite.gz"
    return fixtures_dir / "torch" / f"{name}.pt.trace.json.gz"


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


def first_category(report) -> str:
    s = serious(report)
    return s[0].category if s else "none"


def run(fixtures_dir, name, source):
    return diagnose([str(fixture_path(fixtures_dir, name, source))])


@pytest.mark.parametrize("source", SOURCES)
def test_dataloader_bound_trace_reports_input_pipeline(fixtures_dir, source):
    report = run(fixtures_dir, "dataloader_bound", source)
    assert first_category(report) == "input_pipeline"
    first = serious(report)[0]
    assert first.estimated_gain > 0.5  # the GPU is busy ~8%: most of the step is waiting for data
    # pageable copies are real here but never ranked above the root cause
    cats = [f.category for f in serious(report)]
    assert cats.index("input_pipeline") < cats.index("pageable_memcpy")


@pytest.mark.parametrize("source", SOURCES)
def test_host_sync_trace_reports_host_sync_before_launch_overhead(fixtures_dir, source):
    report = run(fixtures_dir, "host_sync", source)
    assert first_category(report) == "host_sync"
    assert "launch_overhead" in [f.category for f in serious(report)]


@pytest.mark.parametrize("source", SOURCES)
def test_launch_bound_trace_reports_launch_overhead_then_single_tensor_optimizer(fixtures_dir, source):
    report = run(fixtures_dir, "launch_bound", source)
    cats = [f.category for f in serious(report)]
    assert cats[0] == "launch_overhead"
    assert "single_tensor_optimizer" in cats
    assert "fp32_no_tensor_cores" not in cats  # its SGEMMs are a sliver of a mostly idle step


@pytest.mark.parametrize("source", SOURCES)
def test_healthy_training_trace_reports_no_warning(fixtures_dir, source):
    report = run(fixtures_dir, "healthy", source)
    assert serious(report) == []
    assert [f.category for f in report.findings] == ["kernel_hotspots"]  # info: the ncu command


@pytest.mark.parametrize("source", SOURCES)
def test_fp32_matmul_trace_reports_fp32_without_tensor_cores(fixtures_dir, source):
    report = run(fixtures_dir, "fp32_matmul", source)
    assert first_category(report) == "fp32_no_tensor_cores"
    assert "sgemm" in str(serious(report)[0].evidence).lower() or "f32f32" in str(serious(report)[0].evidence)


@pytest.mark.parametrize("source", SOURCES)
def test_naive_attention_trace_reports_unfused_attention(fixtures_dir, source):
    report = run(fixtures_dir, "naive_attention", source)
    cats = [f.category for f in serious(report)]
    assert cats[0] == "unfused_attention"
    assert all(f.rule.startswith("INFER") for f in report.findings)  # inference tree only


@pytest.mark.parametrize("source", SOURCES)
def test_sdpa_attention_trace_reports_no_warning(fixtures_dir, source):
    report = run(fixtures_dir, "sdpa_attention", source)
    assert serious(report) == []


@pytest.mark.parametrize("source", SOURCES)
def test_decode_small_batch_trace_reports_launch_overhead(fixtures_dir, source):
    report = run(fixtures_dir, "decode_small_batch", source)
    cats = [f.category for f in serious(report)]
    assert cats[0] == "launch_overhead"
    assert {"small_batch", "host_sync"} <= set(cats)


def test_ddp_straggler_traces_name_rank_1_as_the_straggler(fixtures_dir):
    paths = [str(fixtures_dir / "torch" / f"ddp_straggler.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    report = diagnose(paths)
    first = serious(report)[0]
    assert first.category == "straggler"
    assert first.subject is not None and (first.subject.kind, first.subject.id) == ("rank", "1")
    assert first.estimated_gain > 0.5  # rank 0 waits ~70 ms of an ~89 ms step
    assert "communication_wait" not in [f.category for f in serious(report)]


def test_ddp_straggler_rank_order_does_not_matter(fixtures_dir):
    paths = [str(fixtures_dir / "torch" / f"ddp_straggler.rank{r}.pt.trace.json.gz") for r in (1, 0)]
    first = serious(diagnose(paths))[0]
    assert (first.category, first.subject.id) == ("straggler", "1")


def test_ddp_healthy_traces_report_no_warning(fixtures_dir):
    paths = [str(fixtures_dir / "torch" / f"ddp_healthy.rank{r}.pt.trace.json.gz") for r in (0, 1)]
    assert serious(diagnose(paths)) == []


def test_collectives_are_matched_per_step_stream_and_order_and_the_shortest_is_transfer():
    # synthetic: two ranks, NCCL stream ids differ between ranks; one step has a different count
    import numpy as np

    from diagnoser.timeline.ranks import CollectiveKernels, transfer_per_kernel

    def ranks_kernels(rows, labels):
        step, stream, start, dur = (np.array(c) for c in zip(*rows))
        return CollectiveKernels(step.astype(object), stream, start, start + dur, labels)

    labels = ["ProfilerStep#4", "ProfilerStep#5"]
    r0 = ranks_kernels([("ProfilerStep#4", 17, 100, 10), ("ProfilerStep#4", 17, 200, 50),
                        ("ProfilerStep#5", 17, 1000, 5)], labels)
    r1 = ranks_kernels([("ProfilerStep#4", 21, 150, 40), ("ProfilerStep#4", 21, 300, 20),
                        ("ProfilerStep#5", 21, 1100, 5), ("ProfilerStep#5", 21, 1200, 7)], labels)
    (t0, t1), unmatched = transfer_per_kernel([r0, r1])
    assert t0.tolist() == [10, 20, 5]  # step 5 unmatched: its kernels count whole
    assert t1.tolist() == [10, 20, 5, 7]
    assert unmatched == 3
