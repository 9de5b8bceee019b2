"""What the code controls, apart from what the machine does, per steady step: the GPU's work (kernel
and copy time) and the host's own work (the step's host range less the time it waited for the GPU:
in syncs, blocking copies, frees, and in launches held by a full launch queue), each as a median over
the steady steps with its step-to-step spread. The regression gate of `compare` judges them
separately (compare/noise_gate.py): GPU work is tight from run to run; host work and wall time are not.
Pure."""
from __future__ import annotations

import numpy as np

from .intervals import IntervalSet

WAIT_KINDS = ("sync", "copy_sync", "free")
LAUNCH_KINDS = ("launch", "graph_launch", "copy_async", "memset")


def _spread_pct(x: np.ndarray) -> float:
    """Standard error of the median of per-step values, % of the median (1.4826 MAD / sqrt(n) x 1.25)."""
    med = float(np.median(x))
    if x.size < 2 or med <= 0:
        return 0.0
    mad = 1.4826 * float(np.median(np.abs(x - med)))
    return 100.0 * 1.25 * mad / np.sqrt(x.size) / med


def step_work(tv, steps) -> dict:
    """gpu_work_ms_per_step / host_work_ms_per_step (medians over the steady steps) and their spreads."""
    idx = steps.steady
    if idx.size == 0:
        return {}
    out: dict = {}
    gs, ge = tv.gpu_start, tv.gpu_end
    if gs.size:
        busy = IntervalSet.of(gs, ge)
        gpu = busy.overlap(steps.start[idx], steps.end[idx]).astype(float) / 1e6
        out["gpu_work_ms_per_step"] = float(np.median(gpu))
        out["gpu_work_spread_pct"] = _spread_pct(gpu)
    hs, he = tv.host_start, tv.host_end
    if hs.size:
        dur = (he - hs).astype(float)
        launch = tv.host_is(*LAUNCH_KINDS)
        cap = max(3.0 * float(np.percentile(dur[launch], 25)), 20_000.0) if launch.any() else 20_000.0
        waits = tv.host_is(*WAIT_KINDS) | (launch & (dur > cap))
        blocked = IntervalSet.of(hs[waits], he[waits])
        span = (steps.host_end[idx] - steps.host_start[idx]).astype(float)
        host = (span - blocked.overlap(steps.host_start[idx], steps.host_end[idx])) / 1e6
        out["host_work_ms_per_step"] = float(np.median(host))
        out["host_work_spread_pct"] = _spread_pct(host)
    return out
