"""Decoding that re-runs the whole prefix for every new token (no KV cache), from the op shapes of a torch
trace (record_shapes=True): issue 29, the inference tree's KV-cache step.

A decoder with a KV cache runs its projections and MLPs on the new token only: their input rows are the
batch, the same every forward pass. Without a cache every pass runs the model over the whole sequence: the
GEMM inputs' rows are batch x tokens so far, and grow by the batch every generated token.
The unit is the forward pass, not the profiler step: a hand loop with one prof.step() per token has one pass
a step, `model.generate()` profiled as one step has one pass per token inside it. A pass starts with the
token-embedding lookup (aten::index_select from a 2-D table, the op inside nn.Embedding; lookups with no GEMM
between them, token and position, start one pass); without lookups each profiler step is one pass. Per pass
this takes the most common row count of the GEMM-class ops (aten::linear / mm / addmm / matmul; the LM head
on the last position only is the odd one out) and checks that it grows by the same amount from pass to pass
(a pass whose rows drop starts a new request's sequence: not counted); rows / growth is then the number of
tokens each pass re-runs. Two passes are enough where a sequence visibly grows by one token a pass (torch.cat of
[batch, tokens] and [batch, 1]: the token ids of the hand loop and of generate(), or a KV cache's keys and
values) and that batch is the rows' growth (or, with a cache, the rows themselves); otherwise MIN_STEPS passes.
An Nsight Systems export has no shapes: its kernel durations grow with the position too, but by ~1/T per
step, which clock ramps and wave quantization hide (measured in tools/gen/README.md), so nothing is
measured there."""
from __future__ import annotations

import numpy as np

from .. import settings
from .roofline import _decoded

ROW_OPS = frozenset(("aten::linear", "aten::mm", "aten::addmm", "aten::matmul"))
MIN_STEPS = settings.register(
    "timeline.decode_prefix_min_steps", 3, "count",
    "forward passes needed to tell whether the GEMMs' rows grow by the same amount every pass (decode without a KV cache)")
MIN_FORWARDS_TOKENS = settings.register(
    "timeline.decode_prefix_min_steps_with_tokens", 2, "count",
    "forward passes needed where the token ids grow by one token a sequence (torch.cat of [B, T] and [B, 1]) and B is "
    "the GEMM rows' growth")
LOOKUP_OP = "aten::index_select"


def _rows(dims) -> int:
    d = _decoded(dims)
    if not isinstance(d, list) or not d or not isinstance(d[0], list) or len(d[0]) < 2:
        return 0
    try:
        return int(np.prod([int(x) for x in d[0][:-1]]))
    except (TypeError, ValueError):
        return 0


class _RowsOf(dict):
    """Raw dims -> _rows(dims), computed once per distinct value (the reader shares one bytes object per value)."""

    def __missing__(self, dims) -> int:
        r = self[dims] = _rows(dims)
        return r


def _step_rows(dims: np.ndarray, step: np.ndarray, n_steps: int) -> np.ndarray | None:
    """Per step, the most common GEMM row count of its ops (ties: the larger); None if a step has none."""
    try:
        rows = np.fromiter(map(_RowsOf().__getitem__, dims), np.int64, dims.size)
    except TypeError:  # unhashable values (decoded lists): one by one
        rows = np.fromiter(map(_rows, dims), np.int64, dims.size)
    ok = rows > 0
    step, rows = step[ok], rows[ok]
    if np.unique(step).size < n_steps:
        return None
    order = np.lexsort((rows, step))
    step, rows = step[order], rows[order]
    first = np.flatnonzero(np.r_[True, (step[1:] != step[:-1]) | (rows[1:] != rows[:-1])])
    count = np.diff(np.r_[first, step.size])
    step, rows = step[first], rows[first]
    best = np.lexsort((rows, count, step))  # per step its (count, rows) maximum comes last
    last = np.r_[step[best][1:] != step[best][:-1], True]
    return rows[best][last]


def _forwards(names, st, dims, sel, window) -> np.ndarray | None:
    """Per GEMM op of `sel`, the forward pass it belongs to (from the token-embedding lookups), -1 before the
    first; None where the window holds fewer than two lookups with a GEMM between them."""
    lo, hi = window
    look = np.flatnonzero((names == LOOKUP_OP) & (st >= lo) & (st < hi))
    look = look[[_is_table_lookup(dims[i]) for i in look]] if look.size else look
    if look.size < 2:
        return None
    ls = np.sort(st[look])
    gs = np.sort(st[sel])
    # a lookup starts a pass unless no GEMM ran since the previous lookup (token + position embeddings)
    k = np.searchsorted(gs, ls)
    starts = ls[np.r_[True, k[1:] > k[:-1]]]
    if starts.size < 2:
        return None
    return np.searchsorted(starts, st[sel], side="right") - 1


def _is_table_lookup(dims) -> bool:
    """index_select(weight [rows, dim], 0, indices [n]): an embedding table's lookup."""
    d = _decoded(dims)
    return (isinstance(d, list) and len(d) >= 3 and isinstance(d[0], list) and len(d[0]) == 2
            and isinstance(d[2], list) and len(d[2]) == 1)


def _token_batches(names, st, dims, window) -> set:
    """Batches B of a sequence growing one token per pass: torch.cat of [B, T, ...] and [B, 1, ...] along the
    token axis (the token ids, [B, T] + [B, 1], of a hand loop and of generate(); a KV cache's keys and values,
    [B, H, T, D] + [B, H, 1, D])."""
    lo, hi = window
    out = set()
    seen = set()
    for i in np.flatnonzero((names == "aten::cat") & (st >= lo) & (st < hi)):
        try:  # one look per distinct argument value (the reader shares one bytes object per value)
            if dims[i] in seen:
                continue
            seen.add(dims[i])
        except TypeError:
            pass
        d = _decoded(dims[i])
        parts = d[0] if isinstance(d, list) and d and isinstance(d[0], list) else None
        if not (isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, list) for p in parts)):
            continue
        a, b = parts
        if len(a) != len(b) or len(a) < 2 or not all(isinstance(x, int) for x in a + b):
            continue
        differ = [k for k in range(len(a)) if a[k] != b[k]]
        if len(differ) == 1 and differ[0] > 0 and b[differ[0]] == 1:
            out.add(a[0])
    return out


def _passes(names, st, dims, steps, first_step: int):
    """(the passes' GEMM rows, each pass's start, the window's end) over the profiled steps from first_step on;
    None where fewer than two passes have GEMM rows."""
    window = (int(steps.host_start[first_step]), int(steps.host_end[-1]))
    sel = np.flatnonzero(np.isin(names, list(ROW_OPS)) & (st >= window[0]) & (st < window[1]))
    if not sel.size:
        return None
    fwd = _forwards(names, st, dims, sel, window)
    if fwd is None:  # one pass per profiler step
        fwd = np.searchsorted(steps.host_start, st[sel], side="right") - 1
        inside = (fwd >= 0) & (st[sel] < steps.host_end[np.clip(fwd, 0, steps.count - 1)])
        fwd = np.where(inside, fwd, -1)
    keep = fwd >= 0
    sel, fwd = sel[keep], fwd[keep]
    ids = np.unique(fwd)
    if ids.size < 2:
        return None
    rows = _step_rows(dims[sel], np.searchsorted(ids, fwd), ids.size)
    if rows is None:
        return None
    starts = np.full(ids.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(starts, np.searchsorted(ids, fwd), st[sel])
    return rows, starts, window


def _growth(rows: np.ndarray) -> tuple[int, float]:
    """The rows' median growth pass to pass and the % of passes that grew by exactly it (rows that drop start
    a new request's sequence: not counted; a growth that is no whole number of tokens a sequence, rows not a
    multiple of it, is no decode: 0%)."""
    deltas = np.diff(rows)
    same_seq = deltas >= 0
    growth = int(np.median(deltas[same_seq])) if same_seq.any() else 0
    if growth <= 0 or rows[0] % growth:
        return growth, 0.0
    return growth, 100.0 * float((deltas[same_seq] == growth).mean())


def _pass_gpu_ms(kt, steps, starts: np.ndarray, window) -> np.ndarray:
    """GPU kernel ms of each pass: of its profiler step's window on the GPU clock where each pass is one step,
    else of the kernels launched from the pass's first GEMM op to the next pass's."""
    step = np.searchsorted(steps.host_start, starts, side="right") - 1
    tv = kt.tv
    if np.array_equal(step, np.arange(steps.count - starts.size, steps.count)):
        if step[0] >= steps.warmup:  # the steady steps: the kernel table's rows
            k = np.searchsorted(steps.start[step], kt.start_ns, side="right") - 1
            ok = (k >= 0) & kt.is_kernel
            return np.bincount(k[ok], weights=kt.dur_ns[ok], minlength=step.size)[:step.size] / 1e6
        k = np.searchsorted(steps.start[step], tv.gpu_start, side="right") - 1
        ok = (k >= 0) & tv.is_kernel & (tv.gpu_start < steps.end[-1])
        return np.bincount(k[ok], weights=(tv.gpu_end - tv.gpu_start)[ok], minlength=step.size)[:step.size] / 1e6
    edges = np.r_[starts[1:], window[1]]
    launch = tv.launch_ns
    k = np.searchsorted(starts, launch, side="right") - 1
    ok = (k >= 0) & tv.is_kernel & (launch < edges[np.clip(k, 0, starts.size - 1)])
    dur = np.maximum(tv.gpu_end - tv.gpu_start, 0)
    return np.bincount(k[ok], weights=dur[ok], minlength=starts.size)[:starts.size] / 1e6


def decode_prefix_stats(tl, kt, steps) -> dict:
    """decode_* facts of a torch trace with shapes and enough forward passes; {} without shapes; only
    decode_rows_steps_measured 0 where the shapes show no GEMM rows to follow pass to pass. The steady steps'
    passes where they are enough, else every profiled step's (the warm-up step's shapes are a decode step's
    like the others')."""
    shapes = getattr(tl, "op_shapes", None)
    if tl.source != "torch" or shapes is None or not len(shapes):
        return {}
    none = {"decode_rows_steps_measured": 0.0}  # shapes recorded, no GEMM rows to follow: nothing to act on
    if not steps.steady.size:
        return none
    names = shapes["name"].to_numpy(object)
    st = shapes["start_ns"].to_numpy(np.int64)
    dims = shapes["dims"].to_numpy(object)
    got = None
    for first_step in dict.fromkeys((int(steps.steady[0]), 0)):
        got = _passes(names, st, dims, steps, first_step)
        if got is None:
            continue
        growth, pct = _growth(got[0])
        # the ids grow by one token a sequence of batch B: the rows grow by B (no cache) or are B (a cache)
        batches = _token_batches(names, st, dims, got[2])
        by_tokens = (growth in batches) if growth > 0 else bool((got[0] == got[0][0]).all() and int(got[0][0]) in batches)
        # enough passes of one sequence (pass-to-pass steps that do not start a new request)
        if int((np.diff(got[0]) >= 0).sum()) + 1 >= (MIN_FORWARDS_TOKENS.value if by_tokens else MIN_STEPS.value):
            break
        got = None
    if got is None:
        return none
    rows, starts, window = got
    out = {"decode_rows_steps_measured": float(rows.size),
           "decode_gemm_rows_first": int(rows[0]), "decode_gemm_rows_last": int(rows[-1]),
           "decode_gemm_rows_growth_per_step": max(growth, 0), "decode_rows_growth_steps_pct": pct}
    if growth <= 0 or rows[0] % growth:
        return out
    out["decode_recomputed_tokens_first"] = int(rows[0] // growth)
    out["decode_recomputed_tokens_last"] = int(rows[-1] // growth)
    out["decode_recompute_work_ratio"] = float(rows.mean()) / growth  # tokens run per generated token
    ms = _pass_gpu_ms(kt, steps, starts, window)
    out["decode_gpu_ms_per_step_first"] = float(ms[0])
    out["decode_gpu_ms_per_step_last"] = float(ms[-1])
    tokens = rows / growth
    if rows.size >= MIN_STEPS.value and np.ptp(tokens) > 0:
        slope = float(np.polyfit(tokens, ms, 1)[0])
        out["decode_gpu_ms_per_prefix_token"] = slope  # GPU ms each re-run token adds to a step
    return out
