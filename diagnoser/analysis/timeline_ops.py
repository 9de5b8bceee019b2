"""Per-kernel view of a timeline's steady steps: the top-N kernel table and where `ncu` lands.

`top_kernels()` groups the steady-state kernels by (demangled name, grid, block), the key an Nsight
Compute launch is matched on (diagnoser/analysis/crosssource.py), and gives each its launches and
time per steady step and its share of step time. `ncu_window()` turns the per-step launch counts of
the top kernels into `--launch-skip` / `--launch-count` that land in a steady step.
"""
from __future__ import annotations

import numpy as np

TOP_KERNELS = 500  # rows kept in charts["top_kernels"] (the report shows the first 10; runs.py matches ncu launches on all)


def top_kernels(kt, steps, step_ms: float, limit: int = TOP_KERNELS) -> list[dict]:
    """[{name, grid, block, launches_per_step, ms_per_step, step_share_pct, gpu_share_pct, min_us, max_us}], costliest
    first; kernels only (copies and memsets are not profiled by ncu), over the steady steps."""
    n_steps = max(int(steps.steady.size), 1)
    mask = kt.is_kernel
    if not mask.any() or step_ms <= 0:
        return []
    codes = kt.names.codes[mask]
    grid = kt.column("grid")[mask].astype(np.int64)
    block = kt.column("block")[mask].astype(np.int64)
    dur = kt.dur_ns[mask].astype(np.float64)
    keys = np.stack([codes, grid, block], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    tot = np.bincount(inv, weights=dur, minlength=len(uniq))
    cnt = np.bincount(inv, minlength=len(uniq))
    lo = np.full(len(uniq), np.inf)
    hi = np.zeros(len(uniq))
    np.minimum.at(lo, inv, dur)
    np.maximum.at(hi, inv, dur)
    gpu_total = max(float(kt.dur_ns[mask].sum()), 1.0)
    order = sorted(range(len(uniq)), key=lambda i: (-tot[i], str(kt.names.uniques[uniq[i][0]]), int(uniq[i][1])))
    rows = []
    for i in order[:limit]:
        ms = float(tot[i]) / 1e6 / n_steps
        rows.append({"name": str(kt.names.uniques[uniq[i][0]]), "grid": int(uniq[i][1]), "block": int(uniq[i][2]),
                     "launches_per_step": float(cnt[i]) / n_steps, "ms_per_step": ms,
                     "step_share_pct": 100.0 * ms / step_ms, "gpu_share_pct": 100.0 * float(tot[i]) / gpu_total,
                     "min_us": float(lo[i]) / 1e3, "max_us": float(hi[i]) / 1e3})
    return rows


def ncu_window(kt, steps, pattern) -> dict:
    """`ncu -k regex:PATTERN --launch-skip S --launch-count C`: C = launches of the matching kernels in
    one steady step, S = their launches in the trace before the first steady step (at least one
    step's worth, so a process profiled from its start is past warm-up too)."""
    if pattern is None or not steps.steady.size:
        return {}
    hit = kt.tv.gpu_names.mask(pattern) & kt.tv.is_kernel
    starts = kt.tv.gpu_start[hit]
    first = int(steps.start[steps.steady[0]])
    per_step = int(round(kt.names.mask(pattern)[kt.is_kernel].sum() / steps.steady.size))
    if per_step <= 0:
        return {}
    before = int((starts < first).sum())
    return {"ncu_launch_skip": float(max(before, per_step)), "ncu_launch_count": float(per_step)}
