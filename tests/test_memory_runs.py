"""A memory snapshot / memory_stats of a run analysed with its timeline (issue 11): which memory input
belongs to which run (diagnoser.runs.grouping.memory_evidence), decided from what the files recorded,
and the inference tree's memory numbers from the memory input when the trace has no allocator events."""
from __future__ import annotations

import time

import pytest

from diagnoser.facts import AnalysisResult
from diagnoser.ingest.nsys_sqlite import read_nsys_sqlite
from diagnoser.ingest.torch_trace import read_torch_trace
from diagnoser.pipeline import diagnose
from diagnoser.runs.grouping import memory_evidence

GIB = 1 << 30
CACHE_FULL = "fixtures/torch/c_decode_cache_full.pt.trace.json.gz"  # made 09:31 UTC on 2026-12-01
KNN_SNAPSHOT = "fixtures/mem/o_knn_cdist.snapshot.pickle.gz"  # made 08:26 UTC the same day, another script
DECODE_NSYS = "fixtures/nsys/decode_small_batch.sqlite.gz"
LEAK_STATS = "fixtures/mem/leak.memory_stats.json"


def _utc(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ns / 1e9))


def test_timelines_know_their_place_on_the_unix_clock():
    """Kineto's baseTimeNanoseconds and the Nsight Systems session start put the events at the times the
    fixtures were made (tools/gen/README.md, fixtures/README.md)."""
    tl = read_torch_trace(CACHE_FULL)
    assert _utc(tl.clock_epoch_ns + int(tl.gpu["start_ns"].min())) == "2026-12-01 09:31"
    ns = read_nsys_sqlite("fixtures/nsys/c_train_mlp.sqlite.gz")
    assert _utc(ns.clock_epoch_ns + int(ns.gpu["start_ns"].min())) == "2026-12-01 09:32"


def test_old_kineto_traces_with_unix_timestamps_have_a_zero_offset():
    path = "../shared/external/kineto/jan2021/resnet50_num_workers_0/worker0.pt.trace.json.gz"
    pytest.importorskip("os").path.exists(path) or pytest.skip(f"{path} absent (../shared/external not here)")
    tl = read_torch_trace(path)
    assert tl.clock_epoch_ns == 0
    assert _utc(int(tl.gpu["start_ns"].min())).startswith("2021-01-11")


def test_snapshot_made_at_another_time_stays_a_separate_run():
    """Real files: a decode trace and a knn snapshot of another script, an hour apart."""
    rep = diagnose([CACHE_FULL, KNN_SNAPSHOT])
    assert len(rep.separate_runs) == 2
    note = next(n for n in rep.notes if n.startswith(f"{KNN_SNAPSHOT} is diagnosed on its own"))
    assert "3,903 s apart" in note and "with_stack=True" in note
    # the decode run's memory numbers are its own trace's (profile_memory), not the snapshot's
    headroom = next(f for f in rep.facts if f.name == "memory_headroom_pct")
    assert headroom.source.startswith(CACHE_FULL)


def test_memory_stats_without_time_or_frames_joins_the_only_timeline_and_says_so():
    """memory_stats counters carry no time and no frames: with one timeline given they join its run and
    the report says that this is all there was. The export (made with --cuda-memory-usage) measures the
    headroom itself; what stays allocated only the counters know, and those facts name the stats file."""
    rep = diagnose([DECODE_NSYS, LEAK_STATS])
    assert not rep.separate_runs
    assert any("joined to that run as the only timeline given" in n for n in rep.notes)
    facts = {f.name: f for f in rep.facts if f.subject is None}
    assert facts["memory_headroom_pct"].source == f"{DECODE_NSYS} (nsys_sqlite)"
    assert facts["mem_persistent_pct"].source == f"{LEAK_STATS} (mem_stats) and {DECODE_NSYS} (nsys_sqlite)"
    assert facts["mem_persistent_gb"].value == pytest.approx(facts["current_allocated_gib"].value)
    assert any(n.startswith("mem_allocated_peak_gb, mem_persistent_gb, mem_persistent_pct come from") for n in rep.notes)
    # alone, the export knows what is reserved but not what stays allocated
    alone = diagnose([DECODE_NSYS])
    assert {f.name for f in alone.facts} >= {"memory_headroom_pct", "mem_reserved_peak_gb"}
    assert "mem_persistent_pct" not in {f.name for f in alone.facts}


def _identity(**kw) -> AnalysisResult:
    return AnalysisResult(identity=kw)


# Synthetic identities (no files): each branch of the evidence order.
def test_evidence_more_memory_than_the_device_keeps_apart():
    ok, why = memory_evidence(_identity(device_total_memory=80 * GIB), _identity(reserved_bytes=120 * GIB))
    assert ok is False and "more than the 80.0 GiB" in why


def test_evidence_overlap_on_the_clock_ties():
    t = _identity(window_epoch_ns=(1_796_000_000 * 10**9, 1_796_000_010 * 10**9))
    m = _identity(window_epoch_ns=(1_795_999_990 * 10**9, 1_796_000_012 * 10**9), python_files=["other.py"])
    ok, why = memory_evidence(t, m)
    assert ok is True and "one process at one time" in why


def test_evidence_same_program_at_another_time_ties_no_common_file_separates():
    t = _identity(window_epoch_ns=(1_796_000_000 * 10**9, 1_796_000_010 * 10**9), python_files=["serve.py"])
    m = _identity(window_epoch_ns=(1_796_100_000 * 10**9, 1_796_100_010 * 10**9), python_files=["serve.py", "model.py"])
    assert memory_evidence(t, m) == (True, "both name the Python file serve.py of the same program")
    ok, why = memory_evidence(_identity(python_files=["train.py"]), _identity(python_files=["serve.py"]))
    assert ok is False and "no file in common" in why
    assert memory_evidence(_identity(), _identity()) == (None, "")


# Real decode servers with their snapshot and memory_stats taken in the same process, right after the
# profiled steps (tools/gen/kv_memory_sources.py; numbers in fixtures/README.md): traces recorded
# WITHOUT profile_memory, so the inference tree's memory numbers can only come from the memory input.
def _s(name: str) -> tuple[str, str, str]:
    return (f"fixtures/torch/s_decode_{name}.pt.trace.json.gz", f"fixtures/mem/s_decode_{name}.snapshot.pickle.gz",
            f"fixtures/mem/s_decode_{name}.memory_stats.json")


@pytest.fixture(scope="module")
def with_snapshot():
    return {name: diagnose(list(_s(name)[:2])) for name in ("cache_full", "cache_fit", "b1_roomy", "b64_roomy")}


@pytest.mark.parametrize("name", ["cache_full", "cache_fit", "b1_roomy", "b64_roomy"])
def test_snapshot_of_the_profiled_process_joins_its_trace_by_time(with_snapshot, name):
    rep = with_snapshot[name]
    trace, snap, _ = _s(name)
    assert not rep.separate_runs
    assert any(n.startswith(f"{snap} is of the run of {trace}") and "one process at one time" in n for n in rep.notes)


def _run_facts(rep) -> dict:
    return {f.name: f for f in rep.facts if f.subject is None}


def test_full_preallocated_cache_fires_kv_cache_rule_from_the_snapshot(with_snapshot):
    rep = with_snapshot["cache_full"]
    trace, snap, _ = _s("cache_full")
    f = next(x for x in rep.findings if x.rule == "INFER015")
    facts = _run_facts(rep)
    # 139.80 GiB device, 129.88 GiB reserved at the peak (fixtures/README.md): 7% free
    assert facts["memory_headroom_pct"].value == pytest.approx(100 * (139.80 - 129.88) / 139.80, abs=0.2)
    assert facts["mem_persistent_gb"].value == pytest.approx(128.685, abs=0.01)  # the 128 GiB cache + weights
    assert f.evidence_sources["memory_headroom_pct"] == f"{snap} (mem_snapshot) and {trace} (torch_trace)"
    assert f.evidence_sources["mem_persistent_gb"] == f"{snap} (mem_snapshot)"


def test_cache_sized_for_its_use_is_silent(with_snapshot):
    rep = with_snapshot["cache_fit"]
    assert "INFER015" not in {f.rule for f in rep.findings}
    assert _run_facts(rep)["memory_headroom_pct"].value > 90


def test_batch_one_with_free_memory_raises_concurrency_the_batch_64_twin_does_not(with_snapshot):
    assert "INFER016" in {f.rule for f in with_snapshot["b1_roomy"].findings}
    assert "INFER016" not in {f.rule for f in with_snapshot["b64_roomy"].findings}


def test_alone_the_traces_cannot_judge_memory_and_say_how_to_collect_it():
    for name in ("cache_full", "b1_roomy"):
        rep = diagnose([_s(name)[0]])
        missing = {n.rule: n for n in rep.not_evaluated}
        assert "INFER015" in missing
        assert "_dump_snapshot" in missing["INFER015"].collect and "memory_stats" in missing["INFER015"].collect


def test_memory_stats_of_the_same_process_gives_the_same_verdict():
    """memory_stats has no time: it joins as the only timeline's memory input; its peak reserved is the
    snapshot's (same process, same moment), so the headroom agrees."""
    trace, snap, stats = _s("cache_full")
    rep = diagnose([trace, stats])
    assert "INFER015" in {f.rule for f in rep.findings}
    by_stats = _run_facts(rep)["memory_headroom_pct"].value
    by_snapshot = _run_facts(diagnose([trace, snap]))["memory_headroom_pct"].value
    assert by_stats == pytest.approx(by_snapshot, abs=0.05)
    all_three = diagnose([trace, snap, stats])
    assert not all_three.separate_runs and "INFER015" in {f.rule for f in all_three.findings}


def test_snapshot_of_another_process_stays_apart():
    """cache_full's snapshot (10:55:02-10:55:10) and cache_fit's trace (10:55:23): another process."""
    rep = diagnose([_s("cache_fit")[0], _s("cache_full")[1]])
    assert len(rep.separate_runs) == 2
    assert "INFER015" not in {f.rule for f in rep.findings}


def test_growing_cache_kept_across_layers_is_no_leak():
    """The profiler's step annotations in the snapshot mark the iterations: the prefill's per-layer K/V
    kept in the cache (a method-called decoder: no enclosing module call) is not a leak across 'calls'."""
    rep = diagnose([_s("b64_roomy")[1]])
    assert "OOM003" not in {f.rule for f in rep.findings}
    kind = next(f.value for f in rep.facts if f.name == "iteration_kind")
    assert kind == "profiler step"


def test_cache_growth_per_decode_step_from_the_snapshot(with_snapshot):
    """torch.cat caches grow by their bytes per token each step (b1: 4 layers x K,V x 16 heads x 128 x
    2 B = 32,768 B; b64: 2 MiB); the preallocated cache does not grow."""
    grow = {n: _run_facts(r)["mem_growth_mb_per_step"].value for n, r in with_snapshot.items()}
    assert grow["b1_roomy"] == pytest.approx(32768 / 1e6)
    assert grow["b64_roomy"] == pytest.approx(2 * (1 << 20) / 1e6)
    assert grow["cache_full"] == 0.0


# Real: the same batch-1 decoder under other tools and in other processes (tools/gen/kv_memory_join.py):
# an Nsight Systems export and the snapshot its process took; a with_stack torch trace and a snapshot
# of another process of the same program, 20 s later.
J_NSYS, J_NSYS_SNAP = "fixtures/nsys/j_b1_nsys.sqlite.gz", "fixtures/mem/j_b1_nsys.snapshot.pickle.gz"
J_STACK, J_SNAP = "fixtures/torch/j_b1_stack.pt.trace.json.gz", "fixtures/mem/j_b1_snap.snapshot.pickle.gz"


def test_nsys_export_and_its_process_snapshot_join_by_time():
    rep = diagnose([J_NSYS, J_NSYS_SNAP])
    assert not rep.separate_runs
    assert any(n.startswith(f"{J_NSYS_SNAP} is of the run of {J_NSYS}") and "one process at one time" in n
               for n in rep.notes)
    facts = _run_facts(rep)
    assert facts["memory_headroom_pct"].value > 99  # 0.75 GiB reserved of 139.8
    assert "INFER016" not in {n.rule for n in rep.not_evaluated}


def test_snapshot_of_another_process_of_the_same_program_joins_by_its_main_script():
    rep = diagnose([J_STACK, J_SNAP])
    assert not rep.separate_runs
    assert any("both ran the program kv_memory_join.py" in n for n in rep.notes)
    assert "INFER016" in {f.rule for f in rep.findings}


def test_snapshot_of_another_program_stays_apart_even_with_stacks():
    """The trace names kv_memory_join.py / kv_scenarios.py (and the standard library's enum.py, which
    every program shares and which is no evidence); the knn snapshot ran oom_mechanisms.py."""
    rep = diagnose([J_STACK, KNN_SNAPSHOT])
    assert len(rep.separate_runs) == 2
    assert any("it ran oom_mechanisms.py, the timeline kv_memory_join.py: another program" in n for n in rep.notes)


def test_the_nsys_export_and_a_snapshot_of_another_process_stay_apart():
    """No stacks in an Nsight Systems export: the 26 s between them decide."""
    rep = diagnose([J_NSYS, J_SNAP])
    assert len(rep.separate_runs) == 2
    assert any("s apart, and no Python stacks in the timeline" in n for n in rep.notes)


def test_library_and_standard_library_frames_are_no_evidence():
    from diagnoser.identity import main_script, user_python_file
    assert user_python_file("enum.py") is None  # Kineto writes the standard library's files bare
    assert user_python_file("torch/nn/modules/module.py") is None
    assert user_python_file("/usr/lib/python3.11/site-packages/x/y.py") is None
    assert user_python_file("/home/me/serve.py") == "serve.py"
    assert main_script("/home/me/serve.py", "<module>") == "serve.py" and main_script("/home/me/serve.py", "run") is None


def test_compare_trace_and_snapshot_before_and_after_fixes_the_kv_cache_finding(tmp_path):
    """`compare A B --to C D`: both files after --to are AFTER; the cache sized to its use fixes INFER015
    and its Verify check holds on the snapshot's numbers."""
    import json

    from click.testing import CliRunner

    from diagnoser.cli import cli
    full, fit = _s("cache_full"), _s("cache_fit")
    out = tmp_path / "c.json"
    res = CliRunner().invoke(cli, ["compare", full[0], full[1], "--to", fit[0], fit[1], "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    c = json.loads(out.read_text())
    assert [i["path"] if isinstance(i, dict) else i for i in c["after"]["inputs"]] == [fit[0], fit[1]]
    f = next(x for x in c["findings"] if x["rule"] == "INFER015")
    assert f["verdict"] == "fixed" and f["verify_check"]["holds"] is True


def test_two_sessions_of_one_workload_join_and_say_how_far_apart():
    """The corpus' nsys and torch runs of host_sync were made one after the other (real files): one
    workload, two processes; the note gives the time between them."""
    rep = diagnose(["fixtures/nsys/host_sync.sqlite.gz", "fixtures/torch/host_sync.pt.trace.json.gz"])
    assert not rep.separate_runs
    assert any("recorded 167 s apart: two profiling sessions of one workload" in n for n in rep.notes)


def test_decode_steps_found_without_markers_despite_a_slow_first_token():
    """The Nsight Systems export of the batch-1 decode has no step markers: the kernels run once per token
    (the LM head GEMM, the argmax) repeat every ~42 ms, except the first tokens (74 and 64 ms: cuDNN
    builds plans for new KV lengths). Their period is judged once that warm-up is over (the std/mean
    over all intervals was 0.25 and chose a kernel repeating every 0.9 ms inside the prefill: 3 steps);
    a period that alternates all along stays unsteady (NCAR MiniWeather without async: no steps, as
    before, in tests/test_external_traces.py)."""
    f = _run_facts(diagnose([J_NSYS]))
    assert f["step_detection"].value == "kernel_pattern"
    assert f["step_count"].value == 8
    assert f["step_time_ms_p50"].value == pytest.approx(42, rel=0.05)


# Real: the same decoders under `nsys profile --cuda-memory-usage=true` alone (whole process, no profiler,
# tools/gen/run_kv_memory.sh and the session's nsys call of kv_memory_sources.py s_decode_b1_roomy --mode plain).
N_FULL, N_B1 = "fixtures/nsys/n_decode_cache_full.sqlite.gz", "fixtures/nsys/n_decode_b1_roomy.sqlite.gz"


def test_nsys_memory_usage_gives_the_headroom_without_any_snapshot():
    full, b1 = _run_facts(diagnose([N_FULL])), _run_facts(diagnose([N_B1]))
    # the driver-level view: 2 x 64 GiB cache + weights of 139.8 GiB; the snapshot said 7.09% (allocator only)
    assert full["memory_headroom_pct"].value == pytest.approx(7.05, abs=0.1)
    assert b1["memory_headroom_pct"].value > 99
    rep = diagnose([N_B1])
    assert "INFER016" in {f.rule for f in rep.findings}
    missing = {n.rule: n for n in diagnose([N_FULL]).not_evaluated}
    assert "mem_persistent_pct" in missing["INFER015"].missing  # reserved is known, allocated is not
