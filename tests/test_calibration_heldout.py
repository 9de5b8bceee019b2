"""Held-out before/after pairs for the step-time predictions (docs/calibration.md, "Held out", "Held out,
second set" and "Held out, third set"): real pairs made on an H200 after the replay's factors were set on the 13 calibration pairs
(tools/gen/calibration_heldout.py). Set 1: 15 pairs; set 2 (`--set 2`): the same workloads at new sizes and seed 1,
made after the model changes set 1 informed, used for no fitting. Each AFTER run is its BEFORE with exactly the
finding's Fix applied. Pinned per pair: the BEFORE finding of the cause, its predicted range, the AFTER run's own
step time, inside or not; per set: the hit rate and median error as published (a model change that moves them must
change the table too). Set 3 (`--set 3`, seed 2) was diagnosed only after the host-pace and
INFER030 / KERN019 changes landed. Fixtures fixtures/torch/cal_ho_*, cal_ho2_* and cal_ho3_* (set 2's sync_wide and decode_no_cache are
not shipped: the budget)."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from diagnoser.pipeline import diagnose

T = Path(__file__).resolve().parent.parent / "fixtures" / "torch"

# pair, the finding's category, its rule, BEFORE step, predicted low / high, AFTER step (ms; docs/calibration.md)
SET1 = [
    ("sync_many_reads", "host_sync", "INFER002", 16.339, 8.375, 14.475, 14.142),
    ("pageable_small", "pageable_memcpy", "TRAIN007", 8.842, 3.102, 4.038, 3.028),
    ("loader_big_batch", "input_pipeline", "TRAIN001", 124.730, 14.563, 29.328, 9.035),
    ("tf32_train", "fp32_no_tensor_cores", "TRAIN008", 15.628, 1.772, 3.151, 3.107),  # in-sample: TF32 factor
    ("attention_s1024", "unfused_attention", "INFER001", 11.462, 1.220, 2.260, 1.315),  # in-sample: host pace
    ("optimizer_wide", "single_tensor_optimizer", "TRAIN010", 41.810, 19.334, 26.221, 19.428),
    ("graph_decode_deep", "launch_overhead", "INFER003", 19.934, 1.317, 2.093, 1.367),
    ("compile_chain_small", "memory_bound_kernels", "INFER008", 1.690, 0.434, 1.203, 1.553),  # in-sample: call cost
    ("compile_recompile", "compile_recompile", "INFER019", 6281.885, 4.230, 75.134, 4.074),  # in-sample: host pace
    ("cudnn_multiscale", "cudnn_autotune", "TRAIN021", 2187.149, 9.702, 21.746, 11.504),  # in-sample: host pace
    ("gil_thread", "gil_contention", "TRAIN022", 1664.137, 19.682, 34.932, 20.418),
    ("anomaly", "host_sync", "TRAIN031", 13.367, 6.670, 6.900, 6.803),  # in-sample since the NaN-check change
    ("lmhead_unaligned", "gemm_below_roof", "KERN019", 28.501, 18.965, 25.232, 24.860),  # in-sample: all unaligned GEMMs
    # in-sample: INFER030 found it once its passes were counted from 2 (the token ids' growth); host pace misses
    ("decode_no_cache", "decode_without_kv_cache", "INFER030", 26.275, 21.172, 26.275, 16.941),
]
# the realized step outside the range (docs/calibration.md says why for each)
MISSES1 = {"pageable_small", "loader_big_batch", "compile_chain_small", "compile_recompile", "decode_no_cache"}
# held-out pairs a model change was made from (no longer held out: docs/calibration.md); the host-pace change: both sets';
# the unaligned-GEMM and decoder changes (KERN019 over every GEMM of its cause, INFER030's passes): both sets' lmhead, set 1's decoder
PACE = {"attention_s1024", "compile_recompile", "cudnn_multiscale"}
INFORMED = {"anomaly", "tf32_train", "compile_chain_small", "lmhead_unaligned", "decode_no_cache"} | PACE
# pairs whose BEFORE has no finding of the cause: (pair, category, BEFORE step, AFTER step)
NO_FINDING1 = [
    ("sync_wide", "host_sync", 10.458, 9.843),             # GPU-bound: the 3 reads cost nothing, the fix gave nothing
]

SET2 = [
    ("sync_many_reads", "host_sync", "INFER002", 33.718, 17.316, 29.959, 20.815),
    ("pageable_small", "pageable_memcpy", "TRAIN007", 8.809, 2.888, 3.761, 3.363),
    ("loader_big_batch", "input_pipeline", "TRAIN001", 100.337, 11.417, 22.973, 19.172),
    ("tf32_train", "fp32_no_tensor_cores", "TRAIN008", 17.730, 2.528, 3.578, 3.620),
    ("attention_s1024", "unfused_attention", "INFER001", 9.430, 1.214, 2.029, 1.679),  # in-sample: host pace
    ("optimizer_wide", "single_tensor_optimizer", "TRAIN010", 42.264, 19.352, 26.401, 24.940),
    ("graph_decode_deep", "launch_overhead", "INFER003", 23.431, 1.376, 2.150, 1.437),
    ("compile_recompile", "compile_recompile", "INFER019", 3501.177, 2.835, 99.617, 3.753),  # in-sample: host pace
    ("cudnn_multiscale", "cudnn_autotune", "TRAIN021", 3121.501, 9.153, 23.410, 7.530),  # in-sample: host pace
    ("gil_thread", "gil_contention", "TRAIN022", 1143.129, 10.279, 18.492, 10.315),
    ("anomaly", "host_sync", "TRAIN031", 9.215, 4.319, 4.764, 4.379),
    ("lmhead_unaligned", "gemm_below_roof", "KERN019", 33.695, 26.835, 33.695, 30.317),  # in-sample: all unaligned GEMMs
]
MISSES2 = {"tf32_train", "cudnn_multiscale"}
NO_FINDING2 = [
    ("compile_chain_small", "memory_bound_kernels", 2.131, 1.082),
]
# set 3 (`--set 3`, seed 2): made before the host-pace change was committed, diagnosed after it and kv32's INFER030 /
# KERN019 changes landed; no number of it informed a change. 9 of its 15 pairs shipped (the budget): each trace cut to
# 2 profiled steps, the recompile's and cuDNN pair's BEFORE to 1 (their steps take seconds)
SET3 = [
    ("pageable_small", "pageable_memcpy", "TRAIN007", 16.003, 6.724, 8.793, 7.658),
    ("loader_big_batch", "input_pipeline", "TRAIN001", 124.207, 14.289, 28.669, 32.052),
    ("tf32_train", "fp32_no_tensor_cores", "TRAIN008", 19.487, 2.965, 3.870, 6.590),
    ("attention_s1024", "unfused_attention", "INFER001", 16.686, 1.724, 3.099, 2.468),
    ("compile_recompile", "compile_recompile", "INFER019", 5676.141, 2.799, 123.583, 4.554),
    ("cudnn_multiscale", "cudnn_autotune", "TRAIN021", 3393.600, 11.159, 29.014, 8.888),
    ("anomaly", "host_sync", "TRAIN031", 10.020, 4.282, 5.521, 4.355),
    ("decode_no_cache", "decode_without_kv_cache", "INFER030", 14.575, 8.511, 11.348, 10.507),
]
MISSES3 = {"loader_big_batch", "tf32_train", "cudnn_multiscale"}
NO_FINDING3 = [
    ("compile_chain_small", "memory_bound_kernels", 3.299, 2.735),  # launch-bound at this size (INFER003)
]
# fixture prefix, pairs, misses, pairs without a finding, (inside, pairs) and median |error| % as published
SETS = {"cal_ho": (SET1, MISSES1, NO_FINDING1, (9, 14), 28.5), "cal_ho2": (SET2, MISSES2, NO_FINDING2, (10, 12), 11.9),
        "cal_ho3": (SET3, MISSES3, NO_FINDING3, (5, 8), 22.8)}
PAIRS = [(prefix, p) for prefix, s in SETS.items() for p in s[0]]
WITHOUT = [(prefix, p) for prefix, s in SETS.items() for p in s[2]]


def _step(report) -> float:
    return next(float(f.value) for f in report.facts if f.name == "step_time_ms_p50" and f.subject is None)


def _run(prefix: str, name: str):
    before = diagnose([str(T / f"{prefix}_{name}_before.pt.trace.json.gz")])
    after = diagnose([str(T / f"{prefix}_{name}_after.pt.trace.json.gz")])
    return before, after


@pytest.mark.parametrize("prefix,pair", PAIRS, ids=[f"{s}-{p[0]}" for s, p in PAIRS])
def test_heldout_pair_prediction_against_the_realized_step(prefix, pair):
    name, category, rule, step, low, high, realized = pair
    before, after = _run(prefix, name)
    f = next(f for f in before.findings if f.category == category and f.rule == rule)
    assert f.severity in ("warning", "critical")
    assert _step(before) == pytest.approx(step, rel=1e-3)
    assert f.predicted_step_ms == pytest.approx((low, high), rel=1e-3)
    assert _step(after) == pytest.approx(realized, rel=1e-3)
    assert (low <= realized <= high) == (name not in SETS[prefix][1])


@pytest.mark.parametrize("prefix,pair", WITHOUT, ids=[f"{s}-{p[0]}" for s, p in WITHOUT])
def test_heldout_pair_without_a_finding_of_its_cause(prefix, pair):
    name, category, step, realized = pair
    before, after = _run(prefix, name)
    assert not [f for f in before.findings if f.category == category]
    assert _step(before) == pytest.approx(step, rel=1e-3)
    assert _step(after) == pytest.approx(realized, rel=1e-3)


@pytest.mark.parametrize("prefix", SETS)
def test_heldout_hit_rate_and_median_error_as_published(prefix):
    pairs, _, _, counts, median = SETS[prefix]
    inside = [low <= real <= high for _, _, _, _, low, high, real in pairs]
    errors = [abs(real - (low + high) / 2) / real for _, _, _, _, low, high, real in pairs]
    assert (sum(inside), len(pairs)) == counts
    assert 100 * statistics.median(errors) == pytest.approx(median, abs=0.1)


def test_set1_pairs_no_model_change_was_made_from():
    still_held_out = [low <= real <= high for name, _, _, _, low, high, real in SET1 if name not in INFORMED]
    assert (sum(still_held_out), len(still_held_out)) == (4, 6)


def test_set2_pairs_no_model_change_was_made_from():
    still_held_out = [low <= real <= high for name, _, _, _, low, high, real in SET2 if name not in PACE | {"lmhead_unaligned"}]
    assert (sum(still_held_out), len(still_held_out)) == (7, 8)
