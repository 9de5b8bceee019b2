"""Held-out before/after pairs for the step-time predictions: 15 real pairs made on an H200 after the replay's
factors were set on the 13 calibration pairs (tools/gen/calibration_heldout.py; docs/calibration.md, "Held
out"). Each AFTER run is its BEFORE with exactly the finding's Fix applied. Pinned per pair: the BEFORE finding
of the cause, its predicted range, the AFTER run's own step time, inside or not; over all pairs: the hit rate
and median error as published (a model change that moves them must change the table too)."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from diagnoser.pipeline import diagnose

T = Path(__file__).resolve().parent.parent / "fixtures" / "torch"

# pair, the finding's category, its rule, BEFORE step, predicted low / high, AFTER step (ms; docs/calibration.md)
PAIRS = [
    ("sync_many_reads", "host_sync", "INFER002", 16.339, 8.375, 14.475, 14.142),
    ("pageable_small", "pageable_memcpy", "TRAIN007", 8.842, 3.102, 4.038, 3.028),
    ("loader_big_batch", "input_pipeline", "TRAIN001", 124.730, 14.563, 29.328, 9.035),
    ("tf32_train", "fp32_no_tensor_cores", "TRAIN008", 15.628, 1.772, 3.151, 3.107),  # in-sample: TF32 factor
    ("attention_s1024", "unfused_attention", "INFER001", 11.462, 2.018, 2.655, 1.315),
    ("optimizer_wide", "single_tensor_optimizer", "TRAIN010", 41.810, 19.334, 26.221, 19.428),
    ("graph_decode_deep", "launch_overhead", "INFER003", 19.934, 1.317, 2.093, 1.367),
    ("compile_chain_small", "memory_bound_kernels", "INFER008", 1.690, 0.434, 1.203, 1.553),  # in-sample: call cost
    ("compile_recompile", "compile_recompile", "INFER019", 6281.885, 8.517, 75.134, 4.074),
    ("cudnn_multiscale", "cudnn_autotune", "TRAIN021", 2187.149, 11.374, 21.746, 11.504),
    ("gil_thread", "gil_contention", "TRAIN022", 1664.137, 19.682, 34.932, 20.418),
    ("anomaly", "host_sync", "TRAIN031", 13.367, 6.670, 6.900, 6.803),  # in-sample since the NaN-check change
    ("lmhead_unaligned", "gemm_below_roof", "KERN019", 28.501, 21.434, 24.967, 24.860),
]
# the realized step outside the range (docs/calibration.md says why for each)
MISSES = {"pageable_small", "loader_big_batch", "attention_s1024", "compile_chain_small", "compile_recompile"}
INFORMED = {"anomaly", "tf32_train", "compile_chain_small"}  # held-out pairs a model change was made from (no longer held out: docs/calibration.md)
# pairs whose BEFORE has no finding of the cause: (pair, category, BEFORE step, AFTER step)
NO_FINDING = [
    ("sync_wide", "host_sync", 10.458, 9.843),             # GPU-bound: the 3 reads cost nothing, the fix gave nothing
    ("decode_no_cache", "decode_without_kv_cache", 26.275, 16.941),  # missed: INFER030 measured no decode rows
]


def _step(report) -> float:
    return next(float(f.value) for f in report.facts if f.name == "step_time_ms_p50" and f.subject is None)


def _run(name: str):
    before = diagnose([str(T / f"cal_ho_{name}_before.pt.trace.json.gz")])
    after = diagnose([str(T / f"cal_ho_{name}_after.pt.trace.json.gz")])
    return before, after


@pytest.mark.parametrize("pair", PAIRS, ids=[p[0] for p in PAIRS])
def test_heldout_pair_prediction_against_the_realized_step(pair):
    name, category, rule, step, low, high, realized = pair
    before, after = _run(name)
    f = next(f for f in before.findings if f.category == category and f.rule == rule)
    assert f.severity in ("warning", "critical")
    assert _step(before) == pytest.approx(step, rel=1e-3)
    assert f.predicted_step_ms == pytest.approx((low, high), rel=1e-3)
    assert _step(after) == pytest.approx(realized, rel=1e-3)
    assert (low <= realized <= high) == (name not in MISSES)


@pytest.mark.parametrize("pair", NO_FINDING, ids=[p[0] for p in NO_FINDING])
def test_heldout_pair_without_a_finding_of_its_cause(pair):
    name, category, step, realized = pair
    before, after = _run(name)
    assert not [f for f in before.findings if f.category == category]
    assert _step(before) == pytest.approx(step, rel=1e-3)
    assert _step(after) == pytest.approx(realized, rel=1e-3)


def test_heldout_hit_rate_and_median_error_as_published():
    inside = [low <= real <= high for _, _, _, _, low, high, real in PAIRS]
    errors = [abs(real - (low + high) / 2) / real for _, _, _, _, low, high, real in PAIRS]
    assert (sum(inside), len(PAIRS)) == (8, 13)
    assert 100 * statistics.median(errors) == pytest.approx(24.8, abs=0.1)
    still_held_out = [low <= real <= high for name, _, _, _, low, high, real in PAIRS if name not in INFORMED]
    assert (sum(still_held_out), len(still_held_out)) == (6, 10)
