"""Shared-memory conflicts judged by direction and hot-spot atomics in PyTorch's own kernels, on real
H200 reports from tools/gen/kernel_conflicts_atomics.py (issue 21): NVIDIA raw-page CSVs of
`ncu --set full` (fixtures/ncu/k21_conflicts.raw.csv.gz, k21_atomics.raw.csv.gz). Launch ids follow
the job order of the script; the plain timings quoted are the script's own (no profiler)."""
from __future__ import annotations

from functools import lru_cache

import pytest

from conftest import FIXTURES
from diagnoser.findings import leaves
from diagnoser.ncu.aten_ops import aten_op_of
from diagnoser.ncu.shared_memory import shared_conflict_facts
from diagnoser.kernel_names import kernel_origin
from diagnoser.pipeline import diagnose

CONFLICTS = FIXTURES / "ncu" / "k21_conflicts.raw.csv.gz"
ATOMICS = FIXTURES / "ncu" / "k21_atomics.raw.csv.gz"


@lru_cache(maxsize=None)
def report_of(path):
    return diagnose([str(path)])


def findings_of(path, launch):
    return [leaf for f in report_of(path).findings for leaf in leaves(f)
            if leaf.subject is not None and leaf.subject.id == str(launch)]


def first_warning(path, launch):
    return next((f for f in findings_of(path, launch) if f.severity in ("critical", "warning")), None)


def facts_of(path, launch):
    return {f.name: f.value for f in report_of(path).facts if f.subject and f.subject.id == str(launch)}


def test_f64_transpose_loads_are_32_way_and_stores_clean():
    # 207 us vs the padded twin's 148 us (plain: 0.300 vs 0.167 ms)
    f = facts_of(CONFLICTS, 0)
    assert f["shared_conflict_side"] == "loads" and f["shared_conflict_side_ways"] == pytest.approx(32.2, abs=0.1)
    assert f["shared_load_conflict_pct"] > 90 and f["shared_store_conflict_pct"] < 5
    assert f["shared_conflict_pipe_pct"] > 60
    top = first_warning(CONFLICTS, 0)
    assert top.rule == "KERN005" and "loads are 32.2-way conflicted" in top.message
    assert first_warning(CONFLICTS, 1) is None  # padded: memory bound at 82%, info only


def test_a_conflicted_direction_that_costs_nothing_is_not_the_cause():
    # one field of 128-float records: the loads are 32.7-way conflicted, but they are 22% of the shared
    # wavefronts and 2% of the L1 data pipe; padded twin 92.29 vs 92.32 us: the conflicts cost nothing
    f, g = facts_of(CONFLICTS, 2), facts_of(CONFLICTS, 3)
    assert f["shared_conflict_side_pct"] > 95 and f["shared_bank_conflict_pct"] < 30
    assert f["shared_conflict_pipe_pct"] < 5
    assert g["kernel_duration_us"] == pytest.approx(f["kernel_duration_us"], rel=0.01)
    assert "KERN005" not in {x.rule for x in findings_of(CONFLICTS, 2)}
    assert first_warning(CONFLICTS, 2).category == first_warning(CONFLICTS, 3).category == "latency_bound"


def test_barrier_stalls_behind_conflicted_loads_point_to_the_conflicts():
    # 1024-thread blocks, two barriers a tile: 89.9 us vs the padded twin's 46.5 us
    assert first_warning(CONFLICTS, 4).rule == "KERN005"
    assert "KERN015" not in {x.rule for x in findings_of(CONFLICTS, 4)}
    # the padded twin has no conflicts left; its barrier stalls (44% of stalls, 1024-thread blocks) remain
    twin = first_warning(CONFLICTS, 5)
    assert twin.rule == "KERN015" and facts_of(CONFLICTS, 5)["shared_conflict_pipe_pct"] < 1


def test_direction_facts_from_synthetic_counters():
    # synthetic: the case, 32-way loads next to 3x as many clean store wavefronts
    m = {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 31e6,
         "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 32e6,
         "smsp__sass_inst_executed_op_shared_ld.sum": 1e6,
         "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum.pct_of_peak_sustained_elapsed": 40.0,
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": 0.0,
         "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": 96e6,
         "smsp__sass_inst_executed_op_shared_st.sum": 96e6,
         "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum.pct_of_peak_sustained_elapsed": 50.0}
    f = shared_conflict_facts(m)
    assert f["shared_bank_conflict_pct"] == pytest.approx(100 * 31 / 128)  # the average: under 30%
    assert f["shared_conflict_side"] == "loads" and f["shared_conflict_side_ways"] == 32
    assert f["shared_conflict_pipe_pct"] == pytest.approx(31 / 32 * 40)
    assert "shared_conflict_pipe_pct" not in shared_conflict_facts(
        {k: v for k, v in m.items() if "pct_of_peak" not in k})  # unknown cost: the rule is not gated


def test_pytorch_kernel_names_without_at_namespace():
    assert kernel_origin("void native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, (int)-2, 1, "
                         "native::<unnamed>::ReduceAdd>(cuda::TensorInfo<T1, T3>)") == "PyTorch"
    assert kernel_origin("void <unnamed>::indexing_backward_kernel_small_stride<float>(const long *)") == "PyTorch"
    assert kernel_origin("void at_cuda_detail::DeviceRadixSortOnesweepKernel<at_cuda_detail::policy_hub<long>>") == "CUB"
    assert "index_add_" in aten_op_of("void native::indexFuncLargeIndex<float, long, unsigned int, 1, 1, -2, 1, "
                                      "native::<unnamed>::ReduceAdd>")[0]
    assert aten_op_of("my_kernel") is None


@pytest.mark.parametrize("launch, op, slow_ms", [(0, "index_add_", 7.2), (2, "scatter_add_", 7.3), (34, "index_add_", 28.0)])
def test_hot_spot_atomics_in_pytorch_ops_name_the_op_and_what_instead(launch, op, slow_ms):
    # 95% of the indices are one id; spread twins: index_add_ 0.52 ms, scatter_add_ 0.30 ms, bincount 2.7 ms
    f = facts_of(ATOMICS, launch)
    assert f["kernel_origin"] == "PyTorch" and op in f["aten_op"]
    assert f["l2_atomic_hotspot_ratio"] > 50 and f["l2_atomic_hot_unit_busy_pct"] > 30
    assert f["dominant_stall_reason"] == "long_scoreboard" and f["sol_max_pct"] < 5
    assert f["kernel_duration_us"] / 1e3 == pytest.approx(slow_ms, rel=0.1)
    top = first_warning(ATOMICS, launch)
    assert (top.rule, top.category) == ("KERN017", "atomic_contention")
    assert op in top.fix and ("bincount" in top.fix or "segment_reduce" in top.fix)
    assert "cub::BlockReduce" not in top.fix  # the user-kernel advice of KERN011 does not apply


def test_index_add_at_one_percent_atomics_is_still_contention():
    # the case: atomics ~1% of instructions (0.97% here), busiest L2 atomic unit 89x the average
    f = facts_of(ATOMICS, 0)
    assert f["atomic_inst_share_pct"] < 1
    spread = facts_of(ATOMICS, 1)  # the same op on uniform indices: same share, no hot spot
    assert spread["atomic_inst_share_pct"] == pytest.approx(f["atomic_inst_share_pct"])
    assert spread["l2_atomic_hotspot_ratio"] < 1.1
    assert not {"KERN011", "KERN017"} & {x.rule for x in findings_of(ATOMICS, 1)}


def test_index_put_accumulate_with_one_long_run_is_one_sm_doing_the_work():
    # 1122 ms vs 1.25 ms on spread indices: PyTorch sorts, then one warp sums the 4M-long run of the hot id
    f = facts_of(ATOMICS, 18)
    assert f["sm_busiest_to_average_cycles_ratio"] > 100 and f["grid_sm_fill_pct"] == 100
    assert "index_put_" in f["aten_op"]
    top = first_warning(ATOMICS, 18)
    assert (top.rule, top.category) == ("KERN018", "sm_load_imbalance")
    assert "index_put_" in top.fix and "KERN007" not in {x.rule for x in findings_of(ATOMICS, 18)}
    assert facts_of(ATOMICS, 33)["sm_busiest_to_average_cycles_ratio"] < 1.1
    assert "KERN018" not in {x.rule for x in findings_of(ATOMICS, 33)}
    # it takes 96% of the report's GPU time, so it is the report's first finding
    serious = [x for x in report_of(ATOMICS).findings if x.severity in ("critical", "warning")]
    assert serious[0].category == "sm_load_imbalance"
