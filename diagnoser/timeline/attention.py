"""Hand-written (unfused) attention on a timeline: a softmax between the score and the value matmul.

Decided from the op tree where the trace has one (a PyTorch trace): on each host thread, a softmax op
(`aten::softmax`, `aten::_softmax_backward_data`, ...) whose nearest batched matmul before and after
(`aten::bmm` / `aten::baddbmm`, what `matmul`, `einsum` and the SDPA math path run) is not separated
from it by a projection or a normalization (`aten::linear`, `aten::addmm`, `aten::mm`, layer norm,
...). The block is the host span from the first matmul to the second; its GPU time is that of the
kernels launched inside the span, however many launches PyTorch split its elementwise ops into (an
fp32 score tensor over 2^31 bytes is processed in several launches).

Without an op tree (an Nsight Systems export), by NVTX ranges that name attention (`attention`,
`self_attn`, `mha`, ...) where the export has them: such a range whose kernels include a softmax (and
no fused attention kernel) is a block, its kernels' time the block's. Else by the kernels' order on
each stream: a softmax kernel
whose nearest GEMM kernel before and after lies in the same step with only elementwise, copy and
softmax kernels between them (scale, mask, dtype casts, dropout): any other kernel (a normalization,
a reduction such as a router's top-k, a fused attention or optimizer kernel) ends the search.
ATTENTION_MAX_KERNELS only bounds degenerate streams. Log-softmax (the loss) is never attention.
"""
from __future__ import annotations

import re

import numpy as np

from .. import settings
from .intervals import IntervalSet
from .names import lazy_pattern, name_mask
from .view import Names, is_sorted

ATTENTION_MAX_KERNELS = settings.register(
    "timeline.attention_max_kernels", 64, "kernels",
    "at most this many kernels may lie between a softmax and the GEMM before or after it for the three to be "
    "hand-written attention (a bound for degenerate streams: what lies between decides)")
# PyTorch's warp softmax serves log_softmax too: its 5th template argument says which
LOG_SOFTMAX = lazy_pattern(r"LogSoftMax|log_softmax|softmax_warp_(?:forward|backward)<(?:[^,<>]+,\s*){4}(?:true|\(bool\)1)", re.I)
ATTENTION_RANGE = lazy_pattern(r"attention|attn|(?<![a-z])mha(?![a-z])|(?<![a-z])sdpa(?![a-z])", re.I)
SOFTMAX_OP = re.compile(r"^aten::(?:_?softmax|_safe_softmax|_softmax_backward_data)$")
BATCHED_MATMUL_OP = lazy_pattern(r"^aten::(?:bmm|baddbmm)$")
FUSED_ATTENTION_KERNEL = lazy_pattern(r"flash|fmha|cutlassF|cutlassB|attn_fwd|attn_bwd|mha_fwd|mha_bwd", re.I)
# ops that end the search: projections, normalizations, convolutions, embeddings, fused attention
DELIMITER_OP = lazy_pattern(r"^aten::(?:linear|addmm|mm|_addmm_activation|layer_norm|native_layer_norm|"
                            r"native_layer_norm_backward|rms_norm|_fused_rms_norm|group_norm|native_group_norm|"
                            r"batch_norm|native_batch_norm|cudnn_batch_norm|convolution|_convolution|embedding|"
                            r"_scaled_dot_product_\w*(?:flash|efficient|cudnn)\w*|_flash_attention\w*|"
                            r"_efficient_attention\w*)$")


def _nearest(is_gemm: np.ndarray, is_delim: np.ndarray, soft: np.ndarray, step: np.ndarray | None):
    """For each softmax position, the nearest GEMM before and after (-1 / n where a delimiter, a step
    boundary or more than ATTENTION_MAX_KERNELS kernels come first)."""
    n = is_gemm.size
    pos = np.arange(n)
    last_g = np.maximum.accumulate(np.where(is_gemm, pos, -1))
    last_d = np.maximum.accumulate(np.where(is_delim, pos, -1))
    next_g = np.minimum.accumulate(np.where(is_gemm, pos, n)[::-1])[::-1]
    next_d = np.minimum.accumulate(np.where(is_delim, pos, n)[::-1])[::-1]
    prev = last_g[soft]
    nxt = next_g[soft]
    cap = ATTENTION_MAX_KERNELS.value
    ok = (prev >= 0) & (prev > last_d[soft]) & (soft - prev <= cap + 1)
    ok &= (nxt < n) & (nxt < next_d[soft]) & (nxt - soft <= cap + 1)
    if step is not None:
        ok &= (step[np.maximum(prev, 0)] == step[soft]) & (step[np.minimum(nxt, n - 1)] == step[soft])
    return prev[ok], nxt[ok]


def _unfused_blocks(is_gemm: np.ndarray, is_delim: np.ndarray, soft: np.ndarray, dur: np.ndarray,
                    step: np.ndarray | None = None) -> tuple[int, int]:
    """Kernels of one stream in time order: how many softmax kernels sit between a score GEMM and a value
    GEMM (see module doc), and the time of the kernels from each score GEMM to its value GEMM."""
    n = is_gemm.size
    if soft.size == 0 or n == 0:
        return 0, 0
    prev, nxt = _nearest(is_gemm, is_delim, soft, step)
    if prev.size == 0:
        return 0, 0
    edges = np.zeros(n + 1, dtype=np.int64)  # coverage of [prev, nxt] spans, counted once
    np.add.at(edges, prev, 1)
    np.add.at(edges, nxt + 1, -1)
    return int(prev.size), int(dur[np.cumsum(edges[:-1]) > 0].sum())


def op_tree_spans(ranges, within: IntervalSet | None = None) -> tuple[IntervalSet, dict, int] | None:
    """From a trace's op tree: the host spans of hand-written attention blocks per thread, and how many
    blocks (distinct matmul pairs) start `within` the given host windows (all, when None). None when the
    trace has no ops (then kernel order decides)."""
    is_op = (ranges["kind"] == "op").to_numpy() if len(ranges) else np.zeros(0, bool)
    if not is_op.any():
        return None
    names = Names.of(ranges["name"])  # masks over every range (no index or row list of the ops)
    soft = names.mask(SOFTMAX_OP) & is_op
    spans: dict = {}
    blocks = 0
    if not soft.any():
        return IntervalSet.of([], []), spans, 0
    marked = ranges.iloc[np.flatnonzero(soft | (is_op & (names.mask(BATCHED_MATMUL_OP()) | names.mask(DELIMITER_OP()))))]
    kind = np.where(name_mask(marked["name"], SOFTMAX_OP), 0, np.where(name_mask(marked["name"], BATCHED_MATMUL_OP()), 1, 2))
    for thread in sorted(set(marked["thread"].tolist()), key=str):
        sel = (marked["thread"] == thread).to_numpy()
        s = marked["start_ns"].to_numpy(np.int64)[sel]
        e = marked["end_ns"].to_numpy(np.int64)[sel]
        k = kind[sel]
        if not is_sorted(s):
            order = np.argsort(s, kind="stable")
            s, e, k = s[order], e[order], k[order]
        idx = np.flatnonzero(k == 0)
        if idx.size == 0:
            continue
        prev, nxt = _nearest(k == 1, k == 2, idx, None)
        pairs = sorted(set(zip(prev.tolist(), nxt.tolist())))
        if not pairs:
            continue
        p = np.array(pairs, dtype=np.int64)
        blocks += int(within.contains(s[p[:, 0]]).sum()) if within is not None else len(pairs)
        spans[thread] = IntervalSet.of(s[p[:, 0]], e[p[:, 1]])
    starts = [iv.starts for iv in spans.values()]
    ends = [iv.ends for iv in spans.values()]
    all_spans = IntervalSet.of(np.concatenate(starts), np.concatenate(ends)) if starts else IntervalSet.of([], [])
    return all_spans, spans, blocks


def unfused_attention(kt, step_starts: np.ndarray | None, softmax_cat: int, gemm_cat: int, between: list[int],
                      host_windows: IntervalSet | None = None) -> tuple[int, int, str]:
    """(blocks, GPU ns of the blocks, how it was decided) over the kernel table `kt` (its steady
    kernels; `step_starts`: where the steps start, None for one step; `between`: the categories that may lie
    between a block's GEMMs besides its softmax; `host_windows`: the steady steps on the host clock, where
    op-tree blocks are counted)."""
    k = kt.is_kernel
    tree = op_tree_spans(kt.tv.tl.ranges, host_windows)
    if tree is not None:
        _, spans, blocks = tree
        if not spans:
            return 0, 0, "op tree"
        launch_row = kt.launch_row
        thread_of = kt.tv.tl.host["thread"].to_numpy()
        launched = kt.launch_ns
        hit = np.zeros(k.size, dtype=bool)
        known = k & (launch_row >= 0)
        threads = np.full(k.size, None, dtype=object)
        threads[known] = thread_of[launch_row[known]]
        for thread, iv in spans.items():
            sel = known & (threads == thread)
            hit[sel] = iv.contains(launched[sel])
        return blocks, int(kt.dur_ns[hit].sum()), "op tree"
    softmax = k & (kt.category == softmax_cat)
    if softmax.any():
        softmax &= ~kt.names.mask(LOG_SOFTMAX())
    if not softmax.any():
        return 0, 0, "kernel order"
    ranged = _nvtx_blocks(kt, softmax, host_windows)
    if ranged is not None:
        return ranged
    blocks, block_ns = 0, 0
    device, stream_of, start_ns = kt.column("device"), kt.column("stream"), kt.start_ns
    for dev, stream in sorted(set(zip(device[softmax].tolist(), stream_of[softmax].tolist()))):
        rows = np.flatnonzero(k & (device == dev) & (stream_of == stream))
        start = start_ns[rows]
        if not is_sorted(start):
            rows = rows[np.argsort(start, kind="stable")]
        cat = kt.category[rows]
        delim = ~np.isin(cat, between) & (cat != gemm_cat)  # (of these rows only, as the step of each)
        step_of = (np.searchsorted(step_starts, start_ns[rows], side="right") - 1 if step_starts is not None
                   else np.zeros(rows.size, dtype=np.int64))
        b, ns = _unfused_blocks(cat == gemm_cat, delim, np.flatnonzero(softmax[rows]), kt.dur_ns[rows], step_of)
        blocks += b
        block_ns += ns
    return blocks, block_ns, "kernel order"


def _nvtx_blocks(kt, softmax: np.ndarray, host_windows: IntervalSet | None) -> tuple[int, int, str] | None:
    """Blocks from NVTX ranges that name attention: innermost such ranges that launched a softmax kernel
    and no fused attention kernel. None when the export has no such range with a softmax in it."""
    r = kt.tv.tl.ranges
    if not len(r):
        return None
    r = r[(r["kind"] == "nvtx").to_numpy() & name_mask(r["name"], ATTENTION_RANGE())]
    if not len(r):
        return None
    rs, re_ = r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)
    launched = kt.launch_ns
    k = kt.is_kernel & (kt.launch_row >= 0)
    order = np.argsort(launched[k], kind="stable")
    rows = np.flatnonzero(k)[order]
    t = launched[rows]
    lo, hi = np.searchsorted(t, rs, side="left"), np.searchsorted(t, re_, side="right")
    soft_cum = np.concatenate(([0], np.cumsum(softmax[rows])))
    fused = kt.names.mask(FUSED_ATTENTION_KERNEL())
    fused_cum = np.concatenate(([0], np.cumsum(fused[rows])))
    with_soft = (soft_cum[hi] - soft_cum[lo] > 0) & (fused_cum[hi] - fused_cum[lo] == 0)
    if not with_soft.any():
        return None
    spans = IntervalSet.of(rs[with_soft], re_[with_soft])
    hit = np.zeros(k.size, dtype=bool)
    hit[rows] = spans.contains(t)
    starts = rs[with_soft]
    blocks = int(host_windows.contains(starts).sum()) if host_windows is not None else int(starts.size)
    return blocks, int(kt.dur_ns[hit].sum()), "nvtx ranges"
