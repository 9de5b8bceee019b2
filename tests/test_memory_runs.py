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
    assert len(rep.runs) == 2
    note = next(n for n in rep.notes if n.startswith(f"{KNN_SNAPSHOT} is diagnosed on its own"))
    assert "3,903 s apart" in note and "with_stack=True" in note
    # the decode run's memory numbers are its own trace's (profile_memory), not the snapshot's
    headroom = next(f for f in rep.facts if f.name == "memory_headroom_pct")
    assert headroom.source.startswith(CACHE_FULL)


def test_memory_stats_without_time_or_frames_joins_the_only_timeline_and_says_so():
    """memory_stats counters carry no time and no frames: with one timeline given they join its run, the
    report says that this is all there was, and the inference tree's memory numbers name the stats file."""
    rep = diagnose([DECODE_NSYS, LEAK_STATS])
    assert not rep.runs
    assert any("joined to that run as the only timeline given" in n for n in rep.notes)
    facts = {f.name: f for f in rep.facts if f.subject is None}
    assert facts["memory_headroom_pct"].source == f"{LEAK_STATS} (mem_stats) and {DECODE_NSYS} (nsys_sqlite)"
    total = facts["device_memory_total_gb"].value
    assert facts["memory_headroom_gb"].value == pytest.approx(total - facts["mem_reserved_peak_gb"].value)
    assert facts["mem_reserved_peak_gb"].value == pytest.approx(facts["peak_reserved_gib"].value)
    # alone, the export cannot tell the inference tree how much memory is free
    alone = diagnose([DECODE_NSYS])
    assert "memory_headroom_pct" not in {f.name for f in alone.facts}
    assert "INFER015" in {n.rule for n in alone.not_evaluated}


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
