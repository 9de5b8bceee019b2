"""Per-kernel and per-op views of a timeline's steady steps: the top-N kernel table, where `ncu`
lands, and the op distribution (the profiler's key_averages view).

`top_kernels()` groups the steady-state kernels by (demangled name, grid, block), the key an Nsight
Compute launch is matched on (diagnoser/runs/merge.py), and gives each its launches and
time per steady step and its share of step time. `ncu_window()` turns the per-step launch counts of
the top kernels into `--launch-skip` / `--launch-count` that land in a steady step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..result_tables import KernelRow, OpRow

# rows kept in the kernels table (the report draws the first 10; run grouping matches ncu launches on all, compare
# matches the two sides' kernels on them)
TOP_KERNELS = 500
GROUP_CHUNK = 1 << 17  # rows hashed at a time by _group_rows (its hash table is sized by them)


def top_kernels(kt, steps, step_ms: float, limit: int = TOP_KERNELS) -> list[KernelRow]:
    """The kernels table, costliest first: kernels only (copies and memsets are not profiled by ncu), over
    the steady steps."""
    n_steps = max(int(steps.steady.size), 1)
    mask = kt.is_kernel
    if not mask.any() or step_ms <= 0:
        return []
    # a chunk of rows at a time, each chunk's kernels summed by key, the chunks' sums then summed by key: no
    # temporaries of every row (durations are integers: their sums are exact in float64 whatever the order)
    grid, block = kt.tv.tl.gpu["grid"].to_numpy(), kt.tv.tl.gpu["block"].to_numpy()
    parts = []
    for a in range(0, mask.size, GROUP_CHUNK):
        m, rows = mask[a:a + GROUP_CHUNK], kt.gpu_rows(a, a + GROUP_CHUNK)
        if not m.any():
            continue
        dur = kt.dur_ns[a:a + GROUP_CHUNK][m].astype(np.float64)
        # (the columns as they are: the grouping packs them into one int64 key)
        uniq, inv = _group_rows(kt.names.codes[a:a + GROUP_CHUNK][m], grid[rows][m], block[rows][m])
        parts.append(_sums_by_group(uniq, inv, dur, np.ones(dur.size, np.int64), dur, dur))
    if len(parts) == 1:
        uniq, tot, cnt, lo, hi = parts[0]
    else:
        uniq, inv = _group_rows(*np.concatenate([p[0] for p in parts]).T)
        uniq, tot, cnt, lo, hi = _sums_by_group(uniq, inv, *(np.concatenate([p[k] for p in parts]) for k in range(1, 5)))
    del parts
    gpu_total = max(float(kt.dur_ns.sum(where=mask)), 1.0)
    order = sorted(range(len(uniq)), key=lambda i: (-tot[i], str(kt.names.uniques[uniq[i][0]]), int(uniq[i][1])))
    rows = []
    for i in order[:limit]:
        ms = float(tot[i]) / 1e6 / n_steps
        rows.append(KernelRow(str(kt.names.uniques[uniq[i][0]]), int(uniq[i][1]), int(uniq[i][2]),
                              float(cnt[i]) / n_steps, ms, 100.0 * ms / step_ms, 100.0 * float(tot[i]) / gpu_total,
                              float(lo[i]) / 1e3, float(hi[i]) / 1e3))
    return rows


def _sums_by_group(uniq: np.ndarray, inv: np.ndarray, tot: np.ndarray, cnt: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per group (inv: each row's), the sum of tot, the sum of cnt, the least lo and the greatest hi."""
    least = np.full(len(uniq), np.inf)
    most = np.zeros(len(uniq))
    np.minimum.at(least, inv, lo)
    np.maximum.at(most, inv, hi)
    return (uniq, np.bincount(inv, weights=tot, minlength=len(uniq)),
            np.bincount(inv, weights=cnt, minlength=len(uniq)).astype(np.int64), least, most)


def _group_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)` for integer columns (the groups as
    int64), in linear time:
    the columns packed into one int64 key when their ranges fit, hashed (pandas.factorize, a chunk of rows
    at a time), and only the distinct keys sorted. Groups in lexicographic order of the columns, the
    inverse in row order."""
    if cols[0].size == 0:
        return np.zeros((0, len(cols)), np.int64), np.zeros(0, np.int64)
    lows = [int(c.min()) for c in cols]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(cols, lows)]
    if int(np.prod([float(s) for s in spans])) >= 1 << 62:  # no room to pack: sort the rows
        order = np.lexsort(cols[::-1])
        rows = np.stack([c[order] for c in cols], axis=1)
        new = np.r_[True, (rows[1:] != rows[:-1]).any(axis=1)]
        inv = np.empty(order.size, np.int64)
        inv[order] = np.cumsum(new) - 1
        return rows[new], inv
    key = np.zeros(cols[0].size, np.int64)
    for c, lo, span in zip(cols, lows, spans):
        key *= span
        key += c  # (in place into int64: an int32 column's c - lo could overflow int32)
        key -= lo
    # hashed a chunk of rows at a time (pandas.factorize sizes its table by the rows it is given: 32 MiB for
    # 1M kernels), then each chunk's labels mapped to ranks among all the distinct keys, sorted; keys nearly
    # all distinct (no few kernels repeated) are hashed whole: the chunks' ranks would cost more than the table
    first_labels, first_distinct = pd.factorize(key[:GROUP_CHUNK], sort=False)
    if key.size <= GROUP_CHUNK or first_distinct.size * 8 > GROUP_CHUNK:
        labels, distinct = pd.factorize(key, sort=False) if key.size > GROUP_CHUNK else (first_labels, first_distinct)
        order = np.argsort(distinct, kind="stable")
        rank = np.empty(order.size, np.int64)
        rank[order] = np.arange(order.size)
        distinct, inv = distinct[order], rank[labels]
    else:
        inv, firsts = key, [first_distinct]  # each chunk's labels replace its keys
        inv[:GROUP_CHUNK] = first_labels
        for a in range(GROUP_CHUNK, key.size, GROUP_CHUNK):
            chunk_labels, chunk_distinct = pd.factorize(key[a:a + GROUP_CHUNK], sort=False)
            inv[a:a + GROUP_CHUNK] = chunk_labels
            firsts.append(chunk_distinct)
        distinct = np.unique(np.concatenate(firsts))
        for a, chunk_distinct in zip(range(0, key.size, GROUP_CHUNK), firsts):
            rank = np.searchsorted(distinct, chunk_distinct)
            inv[a:a + GROUP_CHUNK] = rank[inv[a:a + GROUP_CHUNK]]
    uniq = np.empty((distinct.size, len(cols)), np.int64)
    rest = distinct.astype(np.int64)
    for j in range(len(cols) - 1, -1, -1):
        uniq[:, j] = rest % spans[j] + lows[j]
        rest //= spans[j]
    return uniq, inv


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


def op_distribution(kt, steps, limit: int = TOP_OPS) -> list[OpRow]:
    """The profiler's key_averages view over the steady steps: per aten op name, its kernels' GPU time
    (each kernel counted for the innermost op around its launch: "self CUDA"), its calls and its CPU
    time (the op ranges' total duration), per steady step; top `limit` by GPU time. [] without ops."""
    tl = kt.tv.tl
    ranges = tl.ranges
    is_op = (ranges["kind"] == "op").to_numpy()  # (masks over the ranges: no row list or copy of the ops)
    if not is_op.any() or not steps.steady.size:
        return []
    n_steps = int(steps.steady.size)
    lo, hi = int(steps.host_start[steps.steady[0]]), int(steps.host_end[steps.steady[-1]])
    rs, re_ = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
    in_win = is_op & (rs >= lo) & (rs < hi)
    # per op name (codes into its distinct names, as narrow as the Categorical's): calls and CPU time in the
    # window, GPU time of its kernels; bincount adds in row order, so every sum is the one a loop over the rows gives
    code, distinct, win_code = _name_codes(ranges["name"], is_op, in_win)
    del is_op
    n_names = len(distinct)
    calls = np.bincount(win_code, minlength=n_names)
    cpu = re_[in_win] - rs[in_win]
    cpu = cpu.astype(np.float64)
    cpu /= 1e6
    cpu_ms = np.bincount(win_code, weights=cpu, minlength=n_names)
    del cpu, win_code, in_win
    gpu_code, gpu_w = _kernel_op_codes(kt, code)
    gpu_ms, total = np.zeros(n_names), 0
    seen = calls > 0
    if gpu_code:
        gcode = np.concatenate(gpu_code)
        gpu_ms = np.bincount(gcode, weights=np.concatenate(gpu_w), minlength=n_names)
        hit, first = np.unique(gcode, return_index=True)
        seen[hit] = True
        total = sum(float(v) for v in gpu_ms[hit[np.argsort(first)]])  # added in the order names were first hit
    keep = np.flatnonzero(seen)
    order = sorted(keep.tolist(), key=lambda i: (-gpu_ms[i], -cpu_ms[i], distinct[i]))
    rows = []
    for i in order[:limit]:
        rows.append(OpRow(str(distinct[i]), int(calls[i]) / n_steps, float(gpu_ms[i]) / n_steps,
                          100.0 * float(gpu_ms[i]) / total if total else 0.0, float(cpu_ms[i]) / n_steps))
    return rows


def _kernel_op_codes(kt, code: np.ndarray) -> tuple[list, list]:
    """The op name code of each kernel's innermost op at its launch (the timeline's op tree) and the kernel's
    time (ms), thread by thread in thread order, kernel order within a thread: the order the sums are made in."""
    launch = kt.launch_row
    known = np.flatnonzero(kt.is_kernel & (launch >= 0))
    if not known.size:
        return [], []
    tree = kt.tv.op_tree
    op = tree.at_launch(kt.tv, launch[known])
    thr = kt.tv.tl.host["thread"].to_numpy()[launch[known]].astype(np.int64)
    order = np.argsort(thr, kind="stable")
    order = order[op[order] >= 0]
    if not order.size:
        return [], []
    return [code[tree.rows[op[order]]]], [kt.dur_ns[known[order]].astype(np.float64) / 1e6]


def _name_codes(names, is_op: np.ndarray, in_win: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ops' name codes (one per op, in row order), the distinct names they index and the codes of the ops
    `in_win` (a mask over every range): a Categorical's own codes (no copy wider than they are); else hashed,
    NaN a name too."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        every = names.array.codes
        code = every[is_op]
        if not (code < 0).any():
            return code, np.asarray(names.cat.categories, dtype=object), every[in_win]
    code, distinct = pd.factorize(names[is_op].to_numpy(object), sort=False, use_na_sentinel=False)
    return code, distinct, code[in_win[is_op]]


def op_facts(rows: list[OpRow]) -> dict:
    """Run-level facts of the op distribution: its top op by GPU time."""
    top = next((r for r in rows if r.gpu_ms_per_step > 0), None)
    if top is None:
        return {}
    return {"top_op_name": top.op, "top_op_gpu_pct": top.gpu_share_pct, "top_op_cpu_ms_per_step": top.cpu_ms_per_step}
