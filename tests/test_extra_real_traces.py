"""Real traces made by tools/gen (H200) for rules that had only synthetic firing cases: each workload
has one root cause by construction, and its first warning-or-critical finding must name it, from the
Nsight Systems export and from the PyTorch trace alike (fixtures/README.md, "Extra real traces")."""
from __future__ import annotations

import pytest

from diagnoser.pipeline import diagnose

SOURCES = ["nsys", "torch"]

# workload -> (category of the first warning-or-critical finding, rule that must say it)
TIMELINE = {
    "train_naive_attention": ("unfused_attention", "TRAIN009"),
    "train_memory_bound": ("memory_bound_kernels", "TRAIN011"),
    "infer_host_sync": ("host_sync", "INFER002"),
    "infer_input_pipeline": ("input_pipeline", "INFER006"),
    "infer_fp32": ("fp32_no_tensor_cores", "INFER007"),
}


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


def path_of(fixtures_dir, name, source):
    if source == "nsys":
        return fixtures_dir / "nsys" / f"x_{name}.sqlite.gz"
    return fixtures_dir / "torch" / f"x_{name}.pt.trace.json.gz"


def evidence(finding, fact):
    return finding.evidence[fact]["value"]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", sorted(TIMELINE))
def test_extra_timeline_trace_reports_its_root_cause_first(fixtures_dir, name, source):
    category, rule = TIMELINE[name]
    report = diagnose([str(path_of(fixtures_dir, name, source))])
    first = serious(report)[0]
    assert (first.category, first.rule) == (category, rule)
    tree = "TRAIN" if name.startswith("train_") else "INFER"
    assert all(f.rule.startswith(tree) for f in report.findings)  # training vs inference told apart


@pytest.mark.parametrize("source", SOURCES)
def test_training_with_hand_written_attention_is_unfused_before_memory_bound(fixtures_dir, source):
    report = diagnose([str(path_of(fixtures_dir, "train_naive_attention", source))])
    first = serious(report)[0]
    # one forward and one backward block per layer, counted the same from the op tree (torch) and the
    # kernels' order (nsys)
    assert evidence(first, "unfused_attention_blocks_per_step") == pytest.approx(12)
    assert evidence(first, "unfused_attention_pct") > 50  # measured 65.6% in both sources (29% forward only)
    assert evidence(first, "fused_attention_pct") == 0
    # the unfused attention is bandwidth-bound work too: true, but ranked after the root cause
    assert [f.category for f in serious(report)] == ["unfused_attention", "memory_bound_kernels"]


@pytest.mark.parametrize("source", SOURCES)
def test_hand_written_elementwise_chains_are_memory_bound_on_a_busy_gpu(fixtures_dir, source):
    report = diagnose([str(path_of(fixtures_dir, "train_memory_bound", source))])
    assert [f.category for f in serious(report)] == ["memory_bound_kernels"]
    f = serious(report)[0]
    assert evidence(f, "memory_bound_step_pct") > 70  # measured 80%, GPU busy 99%
    assert evidence(f, "kernel_elementwise_pct") > 50


@pytest.mark.parametrize("source", SOURCES)
def test_per_layer_item_in_inference_is_host_sync(fixtures_dir, source):
    report = diagnose([str(path_of(fixtures_dir, "infer_host_sync", source))])
    f = serious(report)[0]
    assert evidence(f, "syncs_per_step") == pytest.approx(16)  # 8 layers x 2 .item()
    assert evidence(f, "gpu_busy_pct") < 40


@pytest.mark.parametrize("source", SOURCES)
def test_serving_thread_preprocessing_starves_the_gpu(fixtures_dir, source):
    report = diagnose([str(path_of(fixtures_dir, "infer_input_pipeline", source))])
    f = serious(report)[0]
    assert f.estimated_gain > 0.6  # GPU busy 6-7%: most of each request is CPU preprocessing
    assert evidence(f, "gpu_busy_pct") < 20


@pytest.mark.parametrize("source", SOURCES)
def test_fp32_inference_names_the_sgemm(fixtures_dir, source):
    report = diagnose([str(path_of(fixtures_dir, "infer_fp32", source))])
    f = serious(report)[0]
    assert "f32f32" in str(evidence(f, "top_no_tensor_core_kernel"))
    assert evidence(f, "gemm_no_tensor_core_step_pct") > 50  # measured 88%


def ddp(fixtures_dir, tag, order=(0, 1)):
    return diagnose([str(fixtures_dir / "torch" / f"{tag}.rank{r}.pt.trace.json.gz") for r in order])


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_ddp_one_bucket_reports_communication_wait_and_no_straggler(fixtures_dir, order):
    report = ddp(fixtures_dir, "x_ddp_comm_wait", order)
    first = serious(report)[0]
    assert (first.category, first.rule) == ("communication_wait", "TRAIN006")
    assert first.subject is None
    assert evidence(first, "idle_comm_pct") > 15  # measured 26%
    assert "straggler" not in [f.category for f in report.findings]
    assert all(f.subject is None for f in report.findings)  # no rank is blamed


def test_ddp_same_model_with_overlapping_buckets_reports_no_warning(fixtures_dir):
    report = ddp(fixtures_dir, "x_ddp_overlap_control")
    assert serious(report) == []


def rank_facts(report):
    out: dict = {}
    for f in report.facts:
        if f.subject is not None and f.subject.kind == "rank":
            out.setdefault(f.subject.id, {})[f.name] = f.value
    return out


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_ddp_launch_bound_identical_ranks_blame_no_straggler(fixtures_dir, order):
    # identical work on both ranks, GPU busy ~50%: rank 0 reaches the collectives last (6.7 vs 26.7 ms
    # of NCCL per step) because its host issues the same launches more slowly, not because it does
    # work the other rank does not (measured: 0.1% of the step more own work)
    report = ddp(fixtures_dir, "x_ddp_launch_bound", order)
    assert "straggler" not in [f.category for f in report.findings]
    assert all(f.subject is None for f in report.findings)  # no rank is blamed
    ranks = rank_facts(report)
    straggler = ranks["0"]
    assert straggler["rank_is_straggler"] is True
    assert straggler["rank_straggler_cost_pct"] > 20  # the NCCL wait difference alone looks like one
    assert abs(straggler["rank_straggler_excess_work_pct"]) < 5
    # its extra GPU idle is launch gaps; the other rank's is NCCL wait
    assert straggler["rank_idle_top_class"] == "launch"
    assert ranks["1"]["rank_idle_top_class"] == "communication"


def test_ddp_host_delay_on_one_rank_is_work_the_others_do_not_do(fixtures_dir):
    # ddp_straggler: rank 1 spins 60 ms per step on the host before its forward
    ranks = rank_facts(diagnose([str(fixtures_dir / "torch" / f"ddp_straggler.rank{r}.pt.trace.json.gz")
                                 for r in (0, 1)]))
    assert ranks["1"]["rank_straggler_excess_work_pct"] > 50  # measured 64% of the 89 ms step


def test_oom_when_weights_plus_forward_exceed_the_cap_is_capacity(fixtures_dir):
    report = diagnose([str(fixtures_dir / "mem" / "x_oom_capacity.snapshot.pickle.gz")])
    s = serious(report)
    assert [f.category for f in s] == ["oom_capacity"]
    assert evidence(s[0], "dominant_owner") == "parameters"  # 4.6 GiB of FP32 weights, 75%
    assert evidence(s[0], "memory_limit_is_cap") is True


def run_facts(report):
    return {f.name: f.value for f in report.facts if f.subject is None}


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_ddp_launch_bound_is_launch_overhead_not_communication_wait(fixtures_dir, order):
    # NCCL time is mostly one rank waiting for the other's launches: per collective, the shorter of the
    # two ranks' kernels (the transfer) is 6.7 ms of the 16.7 ms per 37 ms step; the run-level idle
    # breakdown is rank 0's (it arrives last), whose GPU waits for its own host's launches
    report = ddp(fixtures_dir, "x_ddp_launch_bound", order)
    first = serious(report)[0]
    assert (first.category, first.rule) == ("launch_overhead", "TRAIN003")
    assert "communication_wait" not in [f.category for f in report.findings]
    run = run_facts(report)
    assert run["idle_breakdown_rank"] == "0"
    assert 6.0 < run["comm_transfer_ms_per_step"] < 7.5  # measured 6.7
    assert run["comm_peer_wait_ms_per_step"] > 8  # measured 10.0 (rank mean: 0.02 / 20.0)
    assert run["idle_launch_pct"] > 40  # measured 45.6 (30.8 in short gaps, 14.8 beside NCCL kernels)
    assert run["idle_comm_pct"] < 5  # measured 0.2
    ranks = rank_facts(report)
    assert ranks["0"]["rank_peer_wait_ms"] < 1
    assert ranks["1"]["rank_peer_wait_ms"] > 15
    assert ranks["0"]["rank_comm_transfer_ms"] == pytest.approx(ranks["1"]["rank_comm_transfer_ms"])


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_ddp_one_bucket_communication_is_transfer_not_waiting(fixtures_dir, order):
    run = run_facts(ddp(fixtures_dir, "x_ddp_comm_wait", order))
    # one 7.75 ms all-reduce per step on both ranks: nearly all of it is transfer
    assert run["comm_transfer_ms_per_step"] > 0.9 * run["comm_kernel_ms_per_step"]
    assert run["idle_comm_pct"] > 20  # measured 25.6
    assert run["idle_peer_wait_pct"] < 2


def test_ddp_straggler_run_breakdown_is_the_straggler_s(fixtures_dir):
    report = ddp(fixtures_dir, "ddp_straggler")
    run = run_facts(report)
    assert run["idle_breakdown_rank"] == "1"
    assert run["idle_top_class"] == "unexplained"  # its 60 ms of host work per step
    assert run["comm_transfer_ms_per_step"] < 5  # measured 3.2 of 39.5 ms NCCL per step (rank mean)
    assert rank_facts(report)["0"]["rank_peer_wait_ms"] > 50  # measured 72
