"""Per-kernel and per-op views of a timeline's steady steps: the top-N kernel table, where `ncu`
lands, and the op distribution (the profiler's key_averages view).

`top_kernels()` groups the steady-state kernels by (demangled name, grid, block), the key an Nsight
Compute launch is matched on (diagnoser/runs/merge.py), and gives each its launches and
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


TOP_OPS = 15


def _parents(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of each range's innermost enclosing range (ranges sorted by start, properly nested), -1 at top."""
    parent = np.full(start.size, -1, dtype=np.int64)
    stack: list[int] = []
    for i in range(start.size):
        s = start[i]
        while stack and end[stack[-1]] < s:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def _innermost(start, end, parent, t: np.ndarray) -> np.ndarray:
    """For each time t, the innermost range containing it, or -1."""
    j = np.searchsorted(start, t, side="right") - 1
    for _ in range(256):  # nesting depth bound
        open_ = j >= 0
        out = open_ & (end[np.maximum(j, 0)] < t)
        if not out.any():
            break
        j = np.where(out, parent[np.maximum(j, 0)], j)
    return j


def op_distribution(kt, steps, limit: int = TOP_OPS) -> list[dict]:
    """The profiler's key_averages view over the steady steps: per aten op name, its kernels' GPU time
    (each kernel counted for the innermost op around its launch: "self CUDA"), its calls and its CPU
    time (the op ranges' total duration), per steady step; top `limit` by GPU time. [] without ops."""
    tl = kt.tv.tl
    ranges = tl.ranges
    ops = ranges[ranges["kind"].to_numpy() == "op"]
    if not len(ops) or not steps.steady.size:
        return []
    n_steps = int(steps.steady.size)
    lo, hi = int(steps.host_start[steps.steady[0]]), int(steps.host_end[steps.steady[-1]])
    rs, re_ = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    in_win = (rs >= lo) & (rs < hi)
    names = ops["name"].to_numpy(object)
    gpu_ms: dict[str, float] = {}
    calls: dict[str, int] = {}
    cpu_ms: dict[str, float] = {}
    for n, d in zip(names[in_win], (re_ - rs)[in_win]):
        calls[n] = calls.get(n, 0) + 1
        cpu_ms[n] = cpu_ms.get(n, 0.0) + float(d) / 1e6
    launch = kt.launch_row
    known = kt.is_kernel & (launch >= 0)
    if known.any():
        host_thread = tl.host["thread"].to_numpy(np.int64)
        t = kt.tv.host_start[launch[known]]
        thr = host_thread[launch[known]]
        dur = kt.dur_ns[known].astype(np.float64)
        op_thr = ops["thread"].to_numpy(np.int64)
        for th in np.unique(thr):
            sel = op_thr == th
            if not sel.any():
                continue
            s, e, nm = rs[sel], re_[sel], names[sel]
            order = np.argsort(s, kind="stable")
            s, e, nm = s[order], e[order], nm[order]
            j = _innermost(s, e, _parents(s, e), t[thr == th])
            for k, d in zip(j, dur[thr == th]):
                if k >= 0:
                    gpu_ms[nm[k]] = gpu_ms.get(nm[k], 0.0) + d / 1e6
    total = sum(gpu_ms.values())
    order = sorted(set(calls) | set(gpu_ms), key=lambda n: (-gpu_ms.get(n, 0.0), -cpu_ms.get(n, 0.0), n))
    rows = []
    for n in order[:limit]:
        rows.append({"op": str(n), "calls_per_step": calls.get(n, 0) / n_steps,
                     "gpu_ms_per_step": float(gpu_ms.get(n, 0.0)) / n_steps,
                     "gpu_share_pct": 100.0 * float(gpu_ms.get(n, 0.0)) / total if total else 0.0,
                     "cpu_ms_per_step": float(cpu_ms.get(n, 0.0)) / n_steps})
    return rows


def op_facts(rows: list[dict]) -> dict:
    """Run-level facts of the op distribution: its top op by GPU time."""
    top = next((r for r in rows if r["gpu_ms_per_step"] > 0), None)
    if top is None:
        return {}
    return {"top_op_name": top["op"], "top_op_gpu_pct": top["gpu_share_pct"], "top_op_cpu_ms_per_step": top["cpu_ms_per_step"]}
