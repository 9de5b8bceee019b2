"""What the GPU spends its time on: kernel categories from names, tensor-core use of GEMMs,
fused vs unfused attention, optimizer style, launch statistics, copies and synchronizations.

Kernel names are the only portable clue (both readers give the demangled name), so the
categories are name patterns; anything unrecognized is `other`, never guessed.
"""
from __future__ import annotations

import functools
import re
import numpy as np
import pandas as pd

from .. import settings
from ..case_blind import ascii_lower, found
from ..kernel_categories import KERNEL_CATEGORIES, MEMORY_BOUND_CATEGORIES
from ..kernel_names import ALIGNED_BYTES, gemm_alignment
from ..ordering import is_sorted
from .tables import Timeline
from .intervals import IntervalSet
from .names import COMM_KERNEL, lazy_pattern, name_mask, optimizer_ranges
from .steps import Steps
from .attention import unfused_attention
from .view import Names, RowRuns, TimelineView, codes_of, take_rows

# The categories (diagnoser/kernel_categories.py) by name. First match wins; order matters (an attention
# kernel contains "gemm"-like tile names).
CATEGORY_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("communication", COMM_KERNEL),
    ("attention", re.compile(r"flash|fmha|sdpa|attention|_mha_|mha_fwd|mha_bwd|compute_dot_do_o|convert_dq|"
                             r"attn_fwd|attn_bwd|_attn_|paged_attn|xformers|cutlassF|cutlassB", re.I)),
    ("optimizer", re.compile(r"multi_tensor_apply|fused_?adamw?|FusedOptimizer|adam_kernel|sgd_kernel", re.I)),
    # NVIDIA (cuBLAS, cuBLASLt nvjet, CUTLASS, cuDNN) and AMD (Tensile / hipBLASLt `Cijk_*`, rocBLAS,
    # composable kernel, MIOpen, skinny `wvSplitK`) GEMMs and convolutions; Triton's mm templates
    ("gemm", re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|splitKreduce|wgrad|dgrad|fprop|"
                        r"conv(?!ert)|cudnn::cnn|wmma|hmma|tensorop|^Cijk_|hipblaslt|rocblas|Tensile|"
                        r"wvSplitK|miopen|igemm|triton_tem_fused_\w*mm|"
                        # Triton matmuls by name (triton_kernels' MoE `_matmul_ogs_*`, tutorials' `matmul_kernel`),
                        # vLLM / SGLang MoE GEMMs; a MoE `finalize_matmul_scatter` only sums the experts' rows
                        r"(?<!finalize_)matmul|fused_moe_kernel|moe_gemm|grouped?_gemm|"
                        # cuDNN 7/8 convolutions by their old names: FP32 / FP16 implicit GEMMs (volta_scudnn_*,
                        # cudnn_train_volta_scudnn_*, *_hcudnn_*), Winograd and FFT convolutions
                        r"scudnn|hcudnn|winograd|implicit_convolve|precomputed_convolve|fft2d_|fft_rt_|conv2d", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("normalization", re.compile(r"layer_?norm|batch_?norm|group_?norm|rms_?norm|instance_?norm|GammaBeta|"
                                 r"\bbn_(?:fw|bw)_|cudnn::bn_", re.I)),  # cuDNN's batch norm: bn_fw_tr_1C11_*, bn_bw_*
    ("reduction", re.compile(r"reduce|argmax|argmin|scan|radix|sort|unique|cub::|nll_loss|NLLCriterion|segment|scatter|"
                             r"rocprim|hipcub|triton_red_|triton_per_", re.I)),
    ("copy", re.compile(r"copy|cat_?array|CatArray|gather|index|transpose|permute|nchwToNhwc|nhwcToNchw|"
                        r"AddPadding|Memcpy|Memset|fill", re.I)),
    ("elementwise", re.compile(r"elementwise|Functor|gelu|relu|silu|dropout|tanh|sigmoid|triu|tril|where|"
                               r"pointwise|distribution|lerp|addc|sqrt|scal_kernel|max_pool|avg_pool|pool|"
                               r"triton_poi_", re.I)),
]

# GEMM kernels that run on the FP32 FMA pipe (no tensor cores) vs tensor-core GEMMs.
NO_TENSOR_CORE = re.compile(r"sgemm|simt|_f32f32_f32f32_f32|ffma|dgemm|scudnn|winograd|fft2d_|fft_rt_", re.I)
# matrix-vector products stream the matrix once (bandwidth-bound): tensor cores cannot speed them up
GEMV = re.compile(r"gemv|gemvx|dot_kernel|gemmk1|gemvNSP|wvSplitK", re.I)
TENSOR_CORE = re.compile(r"nvjet|hmma|wgmma|wmma|tensorop|s16816|s161616|bf16|f16|fp16|half|tf32|imma|i8816|"
                         r"_hsh_|_tst_|_hss_|e4m3|e5m2|"
                         r"_MI\d+x\d+x\d+|_(?:BBS|HHS|BSS|HSS|BBH|F8)_|mfma|xdl", re.I)  # AMD matrix cores (MFMA)

# Kernels that read or write a paged KV cache (a block pool the server preallocates and hands out per
# token): vLLM's cache writes and paged attention, SGLang's KV store and FlashInfer's paged decode.
PAGED_KV = re.compile(r"reshape_and_cache|paged_attention|PagedKV|paged_kv|store_kvcache|kv_indices|"
                      r"BatchDecodeWithPaged|BatchPrefillWithPaged|block_table", re.I)

# dgrad alone is no evidence: a ConvTranspose2d forward runs cuDNN dgrad kernels
BACKWARD_KERNEL = lazy_pattern(r"backward|bprop|wgrad|_grad_|grad_input|GammaBetaBackward", re.I)
BACKWARD_OP = lazy_pattern(r"Backward\d*$|^autograd::engine|^torch::autograd::AccumulateGrad$")
FUSED_OPTIMIZER = re.compile(r"Fused|fused", re.I)
OPTIMIZER_KERNEL = lazy_pattern(r"adamw?(?![a-z])|sgd|lamb(?!da)|(?<![a-z])lion|adagrad|rmsprop|momentum|FusedOptimizer", re.I)
MULTI_TENSOR = re.compile(r"multi_tensor_apply", re.I)
TRAINING_RANGE = re.compile(r"^(?:backward|bwd)$|^Optimizer\.step#|^optimizer$|^autograd::engine", re.I)

SHORT_KERNEL_NS = settings.register("timeline.short_kernel_ns", 10_000, "ns", "a kernel shorter than this is short (short_kernel_pct, small batch)")
OPTIMIZER_STYLE_SHARE = settings.register(
    "timeline.optimizer_style_share", 0.5, "fraction",
    "optimizer_style is fused when at least this share of the optimizer kernels are fused multi-tensor kernels, "
    "else foreach when this share are multi-tensor, else single_tensor")


def _per_name(names: pd.Series, label) -> pd.Series:
    """Apply `label(name)` once per distinct name and spread the result over the rows."""
    codes, uniques = codes_of(names)
    labels = np.array([label(str(u)) for u in uniques] + [label("")], dtype=object)
    return pd.Series(labels[codes], index=names.index, dtype=object)


# per distinct name, once a process: a step's graph, the kernel table and the tensor-core stats label the same
# names (each ~50 us: long template names against case-blind alternations)
@functools.lru_cache(maxsize=8192)
def _category(name: str) -> str:
    lowered = ascii_lower(name)
    for label, pat in CATEGORY_PATTERNS:
        if found(pat, name, lowered):
            return label
    return "other"


@functools.lru_cache(maxsize=8192)
def _tensor_core(name: str) -> str:
    """'no' | 'yes' | 'unknown' | 'n/a' (a GEMV: no tensor-core candidate) for a GEMM kernel name."""
    lowered = ascii_lower(name)
    if found(GEMV, name, lowered):
        return "n/a"
    return "no" if found(NO_TENSOR_CORE, name, lowered) else ("yes" if found(TENSOR_CORE, name, lowered) else "unknown")


def categorize(names: pd.Series) -> pd.Series:
    """Category of each kernel name (see CATEGORY_PATTERNS)."""
    return _per_name(names, _category)


def tensor_core_use(names: pd.Series) -> pd.Series:
    """'no' | 'yes' | 'unknown' for each GEMM kernel name."""
    return _per_name(names, _tensor_core)


CATEGORY_CODE = {c: i for i, c in enumerate(KERNEL_CATEGORIES)}
GEMM, ATTENTION, SOFTMAX, COPY, COMMUNICATION, OPTIMIZER = (
    CATEGORY_CODE[c] for c in ("gemm", "attention", "softmax", "copy", "communication", "optimizer"))
MEMORY_BOUND = [CATEGORY_CODE[c] for c in MEMORY_BOUND_CATEGORIES]
# what hand-written attention runs between its score and value GEMMs: scale, mask, casts, softmax, dropout
BETWEEN_SCORE_AND_VALUE = [CATEGORY_CODE[c] for c in ("elementwise", "copy", "softmax")]


ROW_CHUNK = 1 << 16


class KernelTable:
    """Steady-state GPU rows (kernels, copies, memsets) with category and time, as arrays.

    The columns every metric reads are built once; the others are read from the timeline on
    demand (they would double the memory of a 10M-kernel trace for a few uses)."""

    def __init__(self, tv: TimelineView, rows, steady_ns: int, steady_steps: int):
        self.tv, self.rows = tv, rows  # rows: slice, RowRuns or index array into the timeline's gpu table
        self.steady_ns, self.steady_steps = steady_ns, steady_steps
        self.names: Names = tv.gpu_names.subset(rows)
        self.is_kernel: np.ndarray = take_rows(tv.is_kernel, rows)  # else a copy or memset
        if isinstance(rows, RowRuns):  # (take makes new arrays: the difference in place)
            dur = rows.take(tv.gpu_end)
            dur -= rows.take(tv.gpu_start)
        else:
            dur = tv.gpu_end[rows] - tv.gpu_start[rows]
        self.dur_ns: np.ndarray = np.maximum(dur, 0, out=dur)
        per_name = self.names.per_unique("category", lambda n: CATEGORY_CODE[_category(n)],
                                         CATEGORY_CODE[_category("")])
        cat = per_name.astype(np.int8)[self.names.codes]
        cat[~self.is_kernel] = COPY
        opt = optimizer_ranges(tv.tl)
        opt = IntervalSet.of(opt["start_ns"], opt["end_ns"])
        in_opt = np.zeros(self.dur_ns.size, dtype=bool)
        for a in range(0, in_opt.size if len(opt) else 0, ROW_CHUNK):  # (launch times of a chunk of rows at a time)
            in_opt[a:a + ROW_CHUNK] = opt.contains(tv.launch_ns_of(self.gpu_rows(a, a + ROW_CHUNK)))
        cat[in_opt & self.is_kernel & (cat != COMMUNICATION)] = OPTIMIZER
        self.category: np.ndarray = cat  # index into KERNEL_CATEGORIES
        self.in_optimizer: np.ndarray = in_opt  # launched inside an optimizer step range

    def __len__(self) -> int:
        return int(self.dur_ns.size)

    @property
    def start_ns(self) -> np.ndarray:
        return take_rows(self.tv.gpu_start, self.rows)

    @property
    def launch_row(self) -> np.ndarray:
        """Host row of each row's launch call, -1 when unknown."""
        return take_rows(self.tv.launch_row, self.rows)

    @property
    def launch_ns(self) -> np.ndarray:
        """When each row's launch call began (its own start where the launch is unknown)."""
        return self.tv.launch_ns_of(self.rows)

    def gpu_rows(self, a: int, b: int):
        """The timeline's gpu rows of this table's rows a..b - 1 (a slice or an index array)."""
        if isinstance(self.rows, slice):
            start = self.rows.start or 0
            return slice(start + a, start + min(b, len(self)))
        if isinstance(self.rows, RowRuns):
            return self.rows.part(a, b)
        return self.rows[a:b]

    def timeline_rows(self, positions: np.ndarray) -> np.ndarray:
        """The timeline's gpu row (int64) of each of this table's rows at `positions`."""
        if isinstance(self.rows, slice):
            return np.asarray(positions, dtype=np.int64) + (self.rows.start or 0)
        if isinstance(self.rows, RowRuns):
            return self.rows.rows_at(np.asarray(positions, dtype=np.int64))
        return self.rows[positions].astype(np.int64)

    def during(self, s: int, e: int) -> tuple[int, int]:
        """The rows a..b - 1 of this table among which lie all that run during [s, e) (each starts before e and
        after s less the longest row); every row where the timeline's gpu rows are not sorted by start."""
        start, n = self.tv.gpu_start, len(self)
        if n == 0 or not is_sorted(start):
            return 0, n
        lo = int(np.searchsorted(start, s - int(self.dur_ns.max()), side="left"))
        hi = int(np.searchsorted(start, e, side="left"))
        if isinstance(self.rows, slice):
            first = self.rows.start or 0
            a, b = min(max(lo - first, 0), n), min(max(hi - first, 0), n)
        elif isinstance(self.rows, RowRuns):
            a, b = (int(x) for x in self.rows.positions_of(np.array([lo, hi], dtype=np.int64)))
        else:
            a, b = (int(x) for x in np.searchsorted(self.rows, [lo, hi], side="left"))
        return a, max(a, b)

    def column(self, name: str) -> np.ndarray:
        return take_rows(self.tv.tl.gpu[name].to_numpy(), self.rows)


RUN_ROWS = 64  # rows a run holds on average, at least, for a selection to be kept as runs (RowRuns)


def _rows(mask: np.ndarray):
    """The rows a mask selects: a slice when they are contiguous (no copy), runs when they are few long
    runs (no index of every row), else indices."""
    runs = RowRuns.of_mask(mask)
    if len(runs.starts) == 1:
        return slice(int(runs.starts[0]), int(runs.stops[0]))
    if len(runs.starts) * RUN_ROWS <= len(runs):
        return runs
    return np.flatnonzero(mask)


def kernel_table(tv: TimelineView, steps: Steps) -> KernelTable:
    windows = steps.steady_windows
    return KernelTable(tv, _rows(windows.contains(tv.gpu_start)), windows.total, len(steps.steady))


def category_times(kt: KernelTable) -> pd.DataFrame:
    """Time per category (ms over the steady window) and share of GPU activity time (%)."""
    g = np.zeros(len(KERNEL_CATEGORIES))
    for a in range(0, len(kt), ROW_CHUNK):  # (no intp copy of the categories and float copy of the durations; the
        # sums are of integers, exact in float64 below 2**53 ns whatever the order)
        g += np.bincount(kt.category[a:a + ROW_CHUNK], weights=kt.dur_ns[a:a + ROW_CHUNK], minlength=len(KERNEL_CATEGORIES))
    total = max(int(kt.dur_ns.sum()), 1)
    out = pd.DataFrame({"category": list(KERNEL_CATEGORIES)})
    out["time_ms"] = [float(g[i]) / 1e6 for i in range(len(KERNEL_CATEGORIES))]
    out["share_pct"] = [100.0 * float(g[i]) / total for i in range(len(KERNEL_CATEGORIES))]
    return out


def launch_stats(tv: TimelineView, kt: KernelTable) -> dict[str, float]:
    k = kt.is_kernel
    n = int(k.sum())
    out: dict[str, float] = {}
    if n == 0:
        return out
    own = n < k.size  # (the kernels' durations copied out: the median may reorder them, not copy them again)
    dur = kt.dur_ns[k] if own else kt.dur_ns
    short, total = np.count_nonzero(dur < SHORT_KERNEL_NS.value), float(dur.sum())
    out["kernels_per_step"] = n / max(kt.steady_steps, 1)
    out["kernel_median_us"] = float(np.median(dur, overwrite_input=own)) / 1e3
    out["short_kernel_pct"] = 100.0 * (short / n)
    out["kernel_time_ms_per_step"] = total / 1e6 / max(kt.steady_steps, 1)
    del dur
    # the launch calls of these kernels, each call once (a graph launch starts many kernels), a chunk of rows at a time
    called = np.zeros(tv.host_start.size, dtype=bool)
    for a in range(0, k.size, ROW_CHUNK):
        launch = tv.launch_row[kt.gpu_rows(a, a + ROW_CHUNK)][k[a:a + ROW_CHUNK]]
        called[launch[launch >= 0]] = True
    calls = int(np.count_nonzero(called))
    if calls:  # the sum of the durations: the sums of ends and of starts wrap alike in int64, their difference does not
        ns = (int(tv.host_end.sum(where=called)) - int(tv.host_start.sum(where=called)) + (1 << 63)) % (1 << 64) - (1 << 63)
        out["launch_api_us_per_kernel"] = float(ns) / calls / 1e3
    return out


def tensor_core_stats(kt: KernelTable) -> dict:
    g = (kt.category == GEMM) & kt.is_kernel
    out: dict = {}
    total = float(kt.dur_ns[g].sum())
    kernel_total = float(kt.dur_ns.sum())
    if kernel_total <= 0:
        return out
    out["gemm_time_pct"] = 100.0 * total / kernel_total
    if total <= 0:
        return out
    names = kt.names.subset(g)
    use = names.per_unique("tensor_core", _tensor_core, _tensor_core(""))[names.codes]
    no_tc = use == "no"
    no_tc_ns = float(kt.dur_ns[g][no_tc].sum())
    out["gemm_no_tensor_core_pct"] = 100.0 * no_tc_ns / total
    out["gemm_no_tensor_core_step_pct"] = 100.0 * no_tc_ns / max(kt.steady_ns, 1)
    if no_tc.any():
        top = names.subset(no_tc).sum_by_name(kt.dur_ns[g][no_tc]).sort_values(ascending=False)
        out["top_no_tensor_core_kernel"] = str(top.index[0])
    return out


def _alignment_bytes(name: str) -> int:
    a = gemm_alignment(name)
    return a[0] * a[1] if a else -1


def gemm_alignment_stats(kt: KernelTable) -> dict:
    """GEMM kernels whose names say they were built for operands aligned to less than 16 bytes (`align1`,
    `align2` in bf16): the fallback cuBLAS takes when a dimension is not a multiple of 8 elements."""
    kernel_total = float(kt.dur_ns.sum())
    if kernel_total <= 0:
        return {}
    g = (kt.category == GEMM) & kt.is_kernel
    names = kt.names.subset(g)
    nbytes = names.per_unique("align_bytes", _alignment_bytes, -1)[names.codes] if g.any() else np.zeros(0, int)
    bad = (nbytes >= 0) & (nbytes < ALIGNED_BYTES)
    dur = kt.dur_ns[g]
    ns = float(dur[bad].sum())
    out = {"gemm_unaligned_kernel_pct": 100.0 * ns / kernel_total, "gemm_unaligned_step_pct": 100.0 * ns / max(kt.steady_ns, 1)}
    if ns <= 0:
        return out
    out["gemm_unaligned_ms_per_step"] = ns / 1e6 / max(kt.steady_steps, 1)
    out["gemm_unaligned_kernel_count"] = int(bad.sum()) / max(kt.steady_steps, 1)
    top = names.subset(bad).sum_by_name(dur[bad]).sort_values(ascending=False, kind="stable")
    out["gemm_unaligned_top_kernel"] = str(top.index[0])[:200]
    out["gemm_unaligned_top_kernel_pct"] = 100.0 * float(top.iloc[0]) / kernel_total
    a = gemm_alignment(str(top.index[0]))
    out["gemm_unaligned_alignment"] = f"{a[0]} element{'s' if a[0] > 1 else ''} ({a[0] * a[1]} bytes)"
    return out


def attention_stats(kt: KernelTable, steps: Steps | None = None) -> dict[str, float]:
    """Fused attention kernel time, and softmax-between-GEMMs (hand-written) attention blocks
    (timeline/attention.py: from the op tree where there is one, else from the kernels' order)."""
    k = kt.is_kernel
    kernel_total = max(float(kt.dur_ns.sum()), 1.0)
    out: dict[str, float] = {}
    out["fused_attention_pct"] = 100.0 * float(kt.dur_ns[k & (kt.category == ATTENTION)].sum()) / kernel_total
    host = IntervalSet.of(steps.host_start[steps.steady], steps.host_end[steps.steady]) if steps is not None else None
    blocks, block_ns, how = unfused_attention(kt, steps.start if steps is not None else None, SOFTMAX, GEMM,
                                              BETWEEN_SCORE_AND_VALUE, host)
    out["unfused_attention_blocks_per_step"] = blocks / max(kt.steady_steps, 1)
    out["unfused_attention_pct"] = 100.0 * block_ns / max(kt.steady_ns, 1)
    out["unfused_attention_kernel_pct"] = 100.0 * block_ns / kernel_total
    if blocks:
        out["unfused_attention_evidence"] = how
    out["kv_cache_paged"] = bool((k & kt.names.mask(PAGED_KV)).any())
    return out


def memory_bound_stats(kt: KernelTable) -> dict[str, float]:
    """Share of kernel time in bandwidth-bound categories (elementwise, copy, norm, softmax, reduction)."""
    total = max(float(kt.dur_ns.sum()), 1.0)
    mem = np.isin(kt.category, MEMORY_BOUND)
    pct = 100.0 * float(kt.dur_ns[mem].sum()) / total
    busy_share = min(total / max(kt.steady_ns, 1), 1.0)
    return {"memory_bound_kernel_pct": pct,
            "memory_bound_step_pct": pct * busy_share}


def optimizer_stats(tl: Timeline, kt: KernelTable, steps: Steps) -> dict:
    """Optimizer kernels per step and whether they are per-parameter, foreach or fused."""
    sel = kt.is_kernel & (kt.category == OPTIMIZER)
    out: dict = {}
    n = int(sel.sum())
    if n == 0:
        return out
    names = kt.names.subset(sel)
    multi = names.mask(MULTI_TENSOR)
    fused = multi & names.mask(FUSED_OPTIMIZER)
    out["optimizer_kernels_per_step"] = n / max(kt.steady_steps, 1)
    out["optimizer_single_tensor_pct"] = 100.0 * float((~multi).sum()) / n
    style = OPTIMIZER_STYLE_SHARE.value
    out["optimizer_style"] = "fused" if fused.mean() >= style else "foreach" if multi.mean() >= style else "single_tensor"
    out["optimizer_gpu_pct"] = 100.0 * float(kt.dur_ns[sel].sum()) / max(kt.steady_ns, 1)
    opt = optimizer_ranges(tl)
    if len(opt):
        iv = IntervalSet.of(opt["start_ns"], opt["end_ns"])
        idx = steps.steady
        host = iv.overlap(steps.host_start[idx], steps.host_end[idx]).sum()
        out["optimizer_step_pct"] = 100.0 * float(host) / max(kt.steady_ns, 1)
    return out


def is_training(tl: Timeline, kt: KernelTable) -> bool:
    """Training if the trace shows backward or optimizer work (ranges, annotations or kernels); a
    trace without either is inference (an inference server's decode loop is not training)."""
    r = tl.ranges
    if name_mask(r["name"], TRAINING_RANGE).any():
        return True
    ops = (r["kind"] == "op").to_numpy()
    if ops.any():  # the op tree is the evidence where the trace has one: kernel names can mislead
        return bool((name_mask(r["name"], BACKWARD_OP()) & ops).any())
    k = kt.is_kernel
    if not k.any():
        return False
    # a multi_tensor_apply kernel alone is no optimizer (foreach copies and fills use it too): the
    # optimizer shows as a kernel named after one, or as kernels launched inside an optimizer range
    optimizer = kt.names.mask(OPTIMIZER_KERNEL()) | kt.in_optimizer
    return bool(((kt.names.mask(BACKWARD_KERNEL()) | optimizer) & k).any())


def graph_kernel_pct(tv: TimelineView, kt: KernelTable) -> float:
    """Share of steady kernel time launched by graph replays (cudaGraphLaunch / hipGraphLaunch)."""
    k = kt.is_kernel
    total = float(kt.dur_ns.sum(where=k))
    if total <= 0:
        return 0.0
    by_graph, ns = tv.host_is("graph_launch"), 0
    for a in range(0, k.size, ROW_CHUNK):  # (a chunk of rows at a time: no launch rows or durations copied whole)
        rows = tv.launch_row[kt.gpu_rows(a, a + ROW_CHUNK)]
        graph = k[a:a + ROW_CHUNK] & (rows >= 0)
        graph[graph] = by_graph[rows[graph]]
        ns += int(kt.dur_ns[a:a + ROW_CHUNK][graph].sum())
    return 100.0 * float(ns) / total
