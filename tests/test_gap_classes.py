"""The evidence order of docs/gap_classes.md, on synthetic host activity (hand-made intervals, named
so): each class wins where its evidence holds and loses to the classes before it."""
from __future__ import annotations

import numpy as np

from diagnoser.timeline.gaps import (ALLOC, COMM, DATA, LAUNCH, SYNC, UNEXPLAINED, HostActivity,
                                              classify_gaps)
from diagnoser.timeline.intervals import IntervalSet
from diagnoser.timeline.api_kinds import api_kind

MS = 1_000_000
EMPTY = IntervalSet.of([], [])


def activity(**sets) -> HostActivity:
    def iv(name):
        spans = sets.get(name, [])
        return IntervalSet.of([a for a, _ in spans], [b for _, b in spans])
    copies = np.array(sorted(sets.get("input_copy", [])), dtype=np.int64)
    return HostActivity(iv("data"), iv("sync"), iv("launch"), iv("comm"), EMPTY, iv("alloc"), iv("cuda"),
                        copies, np.zeros(copies.size, np.int64), np.zeros(0, np.int64))


def one_gap(act, start=0, end=10 * MS):
    return int(classify_gaps(np.array([start]), np.array([end]), act, EMPTY)[0])


def test_a_sync_covering_most_of_a_gap_beats_data_ranges_around_it():
    act = activity(sync=[(1 * MS, 9 * MS)], data=[(0, 10 * MS)])
    assert one_gap(act) == SYNC


def test_malloc_free_covering_most_of_a_gap_is_allocator_churn():
    act = activity(alloc=[(1 * MS, 8 * MS)], launch=[(0, 10 * MS)], cuda=[(1 * MS, 8 * MS)])
    assert one_gap(act) == ALLOC


def test_a_gap_ending_in_the_next_inputs_copy_with_a_quiet_host_is_data():
    act = activity(input_copy=[10 * MS + 1000])
    assert one_gap(act) == DATA
    busy_host = activity(input_copy=[10 * MS + 1000], cuda=[(0, 9 * MS)])  # the host was calling CUDA
    assert one_gap(busy_host) == UNEXPLAINED


def test_a_sync_at_the_gaps_start_loses_to_the_data_loading_after_it():
    act = activity(sync=[(-1 * MS, 100)], data=[(0, 10 * MS)])
    assert one_gap(act) == DATA
    assert one_gap(activity(sync=[(-1 * MS, 100)])) == SYNC


def test_short_gaps_are_launch_and_nccl_beats_everything():
    assert one_gap(activity(), 0, 50_000) == LAUNCH
    act = activity(sync=[(0, 10 * MS)], comm=[(0, 10 * MS)])
    assert one_gap(act) == COMM


def test_cuda_and_hip_api_names_share_one_kind_table():
    assert api_kind("cudaLaunchKernel") == api_kind("hipExtModuleLaunchKernel") == "launch"
    assert api_kind("cuMemcpyDtoHAsync_v2") == api_kind("hipMemcpyAsync") == "copy_async"
    assert api_kind("hipMemcpyWithStream") == api_kind("cudaMemcpy") == "copy_sync"
    assert api_kind("cudaStreamSynchronize") == api_kind("hipDeviceSynchronize") == "sync"
    assert api_kind("cuMemFree_v2") == api_kind("hipFree") == "free"
    assert api_kind("hipGraphLaunch") == api_kind("cudaGraphLaunch") == "graph_launch"
    assert api_kind("cudaGetDeviceProperties_v2") == "other"
