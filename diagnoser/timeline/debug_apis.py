"""Debugging APIs left on in a training loop, from the op ranges of a torch trace (issue 29, the Tuning Guide's
"disable debugging APIs"): autograd's anomaly mode (`torch.autograd.set_detect_anomaly(True)` /
`detect_anomaly()`) checks every output of every backward function for NaN: `aten::isnan` -> `aten::any`
(`aten::_is_any_true`) -> `aten::item`, a device-to-host read-back, inside each
`autograd::engine::evaluate_function: ...` range. Those checks are the host syncs of the step."""
from __future__ import annotations

import re

import numpy as np

from .intervals import IntervalSet
from .names import name_mask

NAN_CHECK = re.compile(r"^aten::_is_any_true$")
BACKWARD_FUNCTION = re.compile(r"^autograd::engine::evaluate_function")


def anomaly_check_stats(tl, steps) -> dict:
    """anomaly_nan_checks_per_step: the NaN checks anomaly mode runs in backward per steady step (torch traces)."""
    idx = steps.steady
    if tl.source != "torch" or not idx.size:
        return {}
    r = tl.ranges
    ops = (r["kind"] == "op").to_numpy()
    checks = name_mask(r["name"], NAN_CHECK) & ops
    if not checks.any():
        return {"anomaly_nan_checks_per_step": 0.0}
    bwd = name_mask(r["name"], BACKWARD_FUNCTION) & ops
    start = r["start_ns"].to_numpy(np.int64)
    steady = IntervalSet.of(steps.host_start[idx], steps.host_end[idx])
    in_bwd = IntervalSet.of(start[bwd], r["end_ns"].to_numpy(np.int64)[bwd])
    c = start[checks]
    n = int((steady.contains(c) & in_bwd.contains(c)).sum()) if c.size and bwd.any() else 0
    return {"anomaly_nan_checks_per_step": n / idx.size}
