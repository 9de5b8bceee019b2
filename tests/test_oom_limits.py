"""The temporary that never fit and the limit read right, on real H200 snapshots from
tools/gen/oom_limits.py (issue 21): one request that dwarfs everything live is the temporary buffer,
named by line and op, not activations; under set_per_process_memory_fraction the limit is a range
(what the allocator held .. that plus the refused request), without a cap the device's free memory."""
from __future__ import annotations

import pytest

from diagnoser.ingest.mem_snapshot import load_snapshot
from diagnoser.memory.analysis import analyze_snapshot
from diagnoser.pipeline import diagnose
from tests.conftest import FIXTURES

MEM = FIXTURES / "mem"


def facts_of(name):
    return {f.name: f.value for f in analyze_snapshot(load_snapshot(MEM / name)).facts if f.subject is None}


def serious(name):
    return [f for f in diagnose([str(MEM / name)]).findings if f.severity in ("critical", "warning")]


def test_mmd_by_broadcasting_under_a_cap_is_one_temporary_not_activations():
    # (z[:, None] - w[None]).pow(2) with 12288 x 96 fp32 embeddings: the sub alone asks for 54 GiB under a
    # 10 GiB cap while 0.24 GiB is live (the run printed "Tried to allocate 54.00 GiB ... 10.00 GiB allowed")
    f = facts_of("l_mmd_broadcast.snapshot.pickle.gz")
    assert f["oom_request_mib"] == 54 * 1024 and f["oom_request_op"] == "aten::sub"
    assert f["oom_request_site"].startswith("oom_limits.py:") and f["oom_request_site"].endswith("in kernel")
    assert f["oom_request_owner"] == "activations"  # by phase (forward, first run): why it read as oom_activations
    assert f["oom_request_share_pct"] > 99
    top = serious("l_mmd_broadcast.snapshot.pickle.gz")
    assert [x.rule for x in top] == ["OOM008"] and top[0].category == "oom_temporary_buffer"
    assert "aten::sub" in top[0].message and "torch.cdist" in top[0].fix and f["oom_request_site"] in top[0].fix


def test_the_cap_is_a_range_that_holds_the_real_cap():
    # cap 10 GiB (fraction 0.0715 of 139.8 GiB): reserved 0.24 GiB at the OOM, request 54 GiB
    f = facts_of("l_mmd_broadcast.snapshot.pickle.gz")
    assert f["memory_limit_is_cap"] is True
    assert f["memory_limit_low_gib"] <= 10 < f["memory_limit_high_gib"]
    assert f["memory_limit_low_gib"] == pytest.approx(0.242, abs=0.001)  # what the report called "the limit" before
    assert "set_per_process_memory_fraction" in f["memory_limit_said"] and "54.24 GiB" in f["memory_limit_said"]
    # cap 20 GiB: the allocator held 19.72 GiB, released cached blocks, then refused 19.10 + 2.00 GiB
    g = facts_of("l_cap_activations.snapshot.pickle.gz")
    assert g["memory_limit_low_gib"] <= 20 < g["memory_limit_high_gib"]
    assert g["memory_limit_high_gib"] - g["memory_limit_low_gib"] < 1.5
    assert g["oom_request_share_pct"] < 15  # a 2 GiB request next to 19 GiB live: not the temporary case
    top = serious("l_cap_activations.snapshot.pickle.gz")
    assert top[0].category == "oom_activations" and "a cap of 19.72-21.10 GiB" in top[0].message


def test_without_a_cap_the_limit_is_the_device_and_the_broadcast_is_named():
    # (a[:, None] - b[None]).abs().sum(-1) on 20000 x 128 points: 190.7 GiB asked on a 139.8 GiB device
    f = facts_of("l_pairs_device.snapshot.pickle.gz")
    assert f["memory_limit_is_cap"] is False
    assert f["memory_limit_low_gib"] == f["memory_limit_high_gib"] == pytest.approx(139.28, abs=0.01)
    assert "driver reported free" in f["memory_limit_said"]
    assert f["oom_request_site"].endswith("in l1_pairs") and f["oom_request_owner"] == "unknown"  # no module
    top = serious("l_pairs_device.snapshot.pickle.gz")
    assert [x.rule for x in top] == ["OOM008"]  # not oom_capacity


@pytest.mark.parametrize("name", ["l_mmd_cdist.snapshot.pickle.gz", "l_pairs_chunked.snapshot.pickle.gz"])
def test_the_fixed_twins_raise_nothing(name):
    # torch.cdist: peak 5.3 GiB under the 10 GiB cap; 512-row chunks: peak 11.2 GiB, no cap; no OOM
    f = facts_of(name)
    assert f["num_ooms"] == 0 and "oom_request_share_pct" not in f
    assert serious(name) == []
