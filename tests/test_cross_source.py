"""One run, several sources (issue 11): real nsys + torch pairs of the corpus workloads, and a real
training run's nsys export with an Nsight Compute report of its steady launches (fixtures c_train_mlp*,
tools/gen/run_kv.sh)."""
from __future__ import annotations

import json
import shutil

import pytest

from diagnoser.pipeline import analyse, diagnose, load_groups
from diagnoser.report.json_report import report_json
from diagnoser.kernel_names import MATCH_KEY, short_name

NSYS = "fixtures/nsys/c_train_mlp.sqlite.gz"
NCU = "fixtures/ncu/c_train_mlp_top.raw.csv.gz"
TOP = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"


@pytest.fixture(scope="module")
def train_pair():
    return diagnose([NSYS, NCU])


def test_ncu_report_of_the_training_run_joins_its_timeline(train_pair):
    assert any("are kernels (name, grid, block, duration) that fixtures/nsys/c_train_mlp" in n for n in train_pair.notes)
    assert not any("separate runs" in n for n in train_pair.notes)
    # the fused-Adam kernel is named differently by the two tools (nsys truncates it): said to be unmatched
    assert any("3 of 60 Nsight Compute launches (multi_tensor_apply_kernel" in n for n in train_pair.notes)


def test_kernel_step_share_equals_the_timeline_alone(train_pair):
    """The ncu launches of the top GEMM carry, summed, exactly the step share `diagnose X.sqlite` gives it."""
    [(g, alone)] = [(g, analyse(g)) for g in load_groups([NSYS])]
    row = next(r for r in alone.charts["top_kernels"] if r["name"] == TOP)
    shares = [f.value for f in train_pair.facts if f.name == "kernel_time_share_pct" and f.subject is not None
              and f.subject.name == TOP]
    assert len(shares) >= 2
    assert sum(shares) == pytest.approx(row["step_share_pct"], rel=1e-9)
    ncu_only = [f.value for f in train_pair.facts if f.name == "kernel_ncu_time_share_pct" and f.subject.name == TOP]
    assert len(ncu_only) == len(shares) and sum(ncu_only) != pytest.approx(sum(shares), rel=0.01)
    srcs = {f.source for f in train_pair.facts if f.name == "kernel_time_share_pct" and f.subject.name == TOP}
    assert srcs == {f"{NSYS} (nsys_sqlite)"}


def test_kernel_findings_rank_in_step_time_and_name_their_sources(train_pair):
    kern = [f for f in train_pair.findings if f.tree == "kernel" and f.gain_of == "step time"]
    assert kern, [(f.rule, f.gain_of) for f in train_pair.findings]
    for f in kern:
        assert "of GPU time" not in f.message
    js = report_json(train_pair)
    for f in js["findings"]:
        assert set(f["evidence_sources"]) <= set(f["evidence"])
        numeric = [k for k, v in f["evidence"].items() if isinstance(v["value"], (int, float)) and k not in ("launches", "kernels")]
        assert all(f["evidence_sources"].get(k) for k in numeric), (f["rule"], numeric, f["evidence_sources"])
    # the top kernel was profiled: the "profile the top kernels" finding has nothing left to ask
    assert "TRAIN013" not in {f.rule for f in train_pair.findings}


def test_busy_timeline_alone_gives_the_ncu_command_for_steady_state():
    rep = diagnose([NSYS])
    [f] = [f for f in rep.findings if f.rule == "TRAIN013"]
    # 6 captured steps, steps inferred from the kernel pattern: 13 launches of the 3 top GEMMs per steady step
    assert "--launch-skip 18 --launch-count 13" in f.fix
    assert f"regex:'{TOP}|" in f.fix


def test_unrelated_ncu_report_stays_a_separate_run():
    rep = diagnose(["fixtures/nsys/healthy.sqlite.gz", NCU])
    assert any("2 separate runs" in n for n in rep.notes)
    assert all(f.gain_of != "step time" for f in rep.findings if f.tree == "kernel")


PAIRS = ["host_sync", "healthy", "launch_bound", "fp32_matmul", "dataloader_bound", "naive_attention", "sdpa_attention"]


@pytest.mark.parametrize("name", PAIRS)
def test_nsys_and_torch_of_one_workload_give_one_diagnosis(name):
    nsys, torch = f"fixtures/nsys/{name}.sqlite.gz", f"fixtures/torch/{name}.pt.trace.json.gz"
    both = diagnose([nsys, torch])
    alone = diagnose([nsys])
    assert any("runs the same kernels with the same launch configurations" in n for n in both.notes)
    key = [(f.rule, f.subject) for f in alone.findings]
    assert [(f.rule, f.subject) for f in both.findings][: len(key)] == key or \
        {f.rule for f in alone.findings} <= {f.rule for f in both.findings}
    for f in both.findings:
        assert f.evidence_sources and all(f.evidence_sources.get(k) for k in f.evidence), f.rule
        for k, src in f.evidence_sources.items():
            nsys_fact = next((x for x in alone.facts if x.name == k and x.subject is None), None)
            if nsys_fact is not None and f.subject is None:
                assert src.startswith(nsys), (f.rule, k, src)  # the nsys number is used where nsys has one


def test_disagreeing_step_times_are_named_with_the_source_used():
    rep = diagnose(["fixtures/nsys/host_sync.sqlite.gz", "fixtures/torch/host_sync.pt.trace.json.gz"])
    [note] = [n for n in rep.notes if "disagree" in n]
    assert "step_time_ms_p50 25.82 ms (fixtures/nsys/host_sync.sqlite.gz" in note
    assert "35.03 ms (fixtures/torch/host_sync.pt.trace.json.gz" in note
    assert "uses fixtures/nsys/host_sync.sqlite.gz's numbers" in note and "stretches" in note
    [f] = [f for f in rep.findings if f.rule == "TRAIN002"]
    assert f.evidence["step_time_ms_p50"]["value"] == pytest.approx(25.82, abs=0.01)


def test_unrelated_timelines_are_separate_runs():
    rep = diagnose(["fixtures/nsys/naive_attention.sqlite.gz", "fixtures/torch/sdpa_attention.pt.trace.json.gz"])
    assert any("2 separate runs" in n for n in rep.notes)
    assert {"unfused_attention"} <= {f.category for f in rep.findings}


def test_the_same_file_twice_is_read_once(tmp_path):
    copy = tmp_path / "copy.pt.trace.json.gz"
    shutil.copyfile("fixtures/torch/host_sync.pt.trace.json.gz", copy)
    rep = diagnose(["fixtures/torch/host_sync.pt.trace.json.gz", str(copy)])
    assert len(rep.inputs) == 1
    assert any(f"{copy} has the same bytes as fixtures/torch/host_sync.pt.trace.json.gz: read once" in n for n in rep.notes)


def test_ddp_chart_draws_the_rank_the_finding_describes():
    rep = diagnose(["fixtures/torch/ddp_straggler.rank0.pt.trace.json.gz", "fixtures/torch/ddp_straggler.rank1.pt.trace.json.gz"])
    [f] = [f for f in rep.findings if f.rule == "TRAIN005"]
    assert rep.charts["source"]["rank"] == int(f.subject.id) == 1
    assert rep.charts["source"]["path"].endswith("rank1.pt.trace.json.gz")


def test_kernel_match_key_reads_nsys_ncu_and_kineto_spellings_alike():
    """Spellings modelled on how the nsys export and the Kineto trace of host_sync print the same kernels."""
    nsys = "void at::native::<unnamed>::vectorized_layer_norm_kernel<float, float, (bool)0>(int, T2, const T1 *, const T1 *)"
    kineto = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*, float const*)"
    assert short_name(nsys, MATCH_KEY) == short_name(kineto, MATCH_KEY)
    a = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const, std::array<char *, (unsigned long)2>>(int, T1)"
    b = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const, std::array<char*, 2ul>>(int, at::native::direct_copy_kernel_cuda)"
    assert short_name(a, MATCH_KEY) == short_name(b, MATCH_KEY)
    assert short_name("void f<8>(int)", MATCH_KEY) != short_name("void f<4>(int)", MATCH_KEY)


def test_twin_runs_of_one_script_under_one_tool_stay_separate():
    """The U-Net twins run the same kernels (caching allocator on / off): two torch files are two sessions."""
    rep = diagnose(["fixtures/torch/m_train_unet_cached.pt.trace.json.gz", "fixtures/torch/m_train_unet_no_cache.pt.trace.json.gz"])
    assert [r["run"] for r in rep.separate_runs] == [1, 2]
    assert {f.run for f in rep.findings if f.category == "allocator_churn"} == {2}
