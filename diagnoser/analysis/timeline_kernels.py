"""What the GPU spends its time on: kernel categories from names, tensor-core use of GEMMs,
fused vs unfused attention, optimizer style, launch statistics, copies and synchronizations.

Kernel names are the only portable clue (both readers give the demangled name), so the
categories are name patterns; anything unrecognized is `other`, never guessed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..timeline.tables import Timeline
from .timeline_intervals import IntervalSet
from .timeline_names import name_mask, optimizer_ranges
from .timeline_steps import Steps, launch_times

KERNEL_CATEGORIES = ("gemm", "attention", "softmax", "normalization", "elementwise", "reduction", "copy",
                     "communication", "optimizer", "other")

# First match wins; order matters (an attention kernel contains "gemm"-like tile names).
CATEGORY_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("communication", re.compile(r"nccl", re.I)),
    ("attention", re.compile(r"flash|fmha|sdpa|attention|_mha_|mha_fwd|mha_bwd|compute_dot_do_o|convert_dq", re.I)),
    ("optimizer", re.compile(r"multi_tensor_apply|fused_?adamw?|FusedOptimizer|adam_kernel|sgd_kernel", re.I)),
    ("gemm", re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|splitKreduce|wgrad|dgrad|fprop|"
                        r"conv(?!ert)|cudnn::cnn|wmma|hmma|tensorop", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("normalization", re.compile(r"layer_?norm|batch_?norm|group_?norm|rms_?norm|instance_?norm|GammaBeta", re.I)),
    ("reduction", re.compile(r"reduce|argmax|argmin|scan|radix|sort|unique|cub::|nll_loss|segment|scatter", re.I)),
    ("copy", re.compile(r"copy|cat_?array|CatArray|gather|index|transpose|permute|nchwToNhwc|nhwcToNchw|"
                        r"AddPadding|Memcpy|Memset|fill", re.I)),
    ("elementwise", re.compile(r"elementwise|Functor|gelu|relu|silu|dropout|tanh|sigmoid|triu|tril|where|"
                               r"pointwise|distribution|lerp|addc|sqrt|scal_kernel|max_pool|avg_pool|pool", re.I)),
]

# GEMM kernels that run on the FP32 FMA pipe (no tensor cores) vs tensor-core GEMMs.
NO_TENSOR_CORE = re.compile(r"sgemm|simt|_f32f32_f32f32_f32|ffma|gemv2?T?_kernel_val<[^>]*float|dgemm", re.I)
TENSOR_CORE = re.compile(r"nvjet|hmma|wgmma|wmma|tensorop|s16816|s161616|bf16|f16|fp16|half|tf32|imma|i8816|"
                         r"_hsh_|_tst_|_hss_|e4m3|e5m2", re.I)

# A softmax between two GEMMs is hand-written attention; log-softmax is the loss, not attention.
LOG_SOFTMAX = re.compile(r"LogSoftMax|log_softmax|Backward|backward", re.I)
ATTENTION_WINDOW_KERNELS = 8  # how far (in kernels on the stream) a GEMM may sit from the softmax

BACKWARD_KERNEL = re.compile(r"backward|bprop|dgrad|wgrad|_grad_|grad_input|GammaBetaBackward", re.I)
FUSED_OPTIMIZER = re.compile(r"Fused|fused", re.I)
MULTI_TENSOR = re.compile(r"multi_tensor_apply", re.I)
TRAINING_RANGE = re.compile(r"^(?:backward|bwd)$|^Optimizer\.step#|^optimizer$|^autograd::engine", re.I)

SHORT_KERNEL_NS = 10_000


def _per_name(names: pd.Series, label) -> pd.Series:
    """Apply `label(name)` once per distinct name and spread the result over the rows."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes, uniques = names.cat.codes.to_numpy(), names.cat.categories
    else:
        codes, uniques = pd.factorize(names.astype(object), use_na_sentinel=True)
    labels = np.array([label(str(u)) for u in uniques] + [label("")], dtype=object)
    return pd.Series(labels[codes], index=names.index, dtype=object)


def _category(name: str) -> str:
    for label, pat in CATEGORY_PATTERNS:
        if pat.search(name):
            return label
    return "other"


def _tensor_core(name: str) -> str:
    return "no" if NO_TENSOR_CORE.search(name) else ("yes" if TENSOR_CORE.search(name) else "unknown")


def categorize(names: pd.Series) -> pd.Series:
    """Category of each kernel name (see CATEGORY_PATTERNS)."""
    return _per_name(names, _category)


def tensor_core_use(names: pd.Series) -> pd.Series:
    """'no' | 'yes' | 'unknown' for each GEMM kernel name."""
    return _per_name(names, _tensor_core)


@dataclass
class KernelTable:
    """Steady-state GPU rows with their category, step and launch time."""

    rows: pd.DataFrame  # gpu rows in the steady window + columns: category, dur_ns, launch_ns, in_optimizer
    steady_ns: int
    steady_steps: int


def kernel_table(tl: Timeline, steps: Steps) -> KernelTable:
    windows = steps.steady_windows
    gpu = tl.gpu.copy()
    gpu["launch_ns"] = launch_times(tl)
    gpu = gpu[windows.contains(gpu["start_ns"].to_numpy())].copy()
    gpu["dur_ns"] = (gpu["end_ns"] - gpu["start_ns"]).clip(lower=0)
    cat = categorize(gpu["name"])
    cat[gpu["kind"] != "kernel"] = "copy"
    opt = optimizer_ranges(tl)
    in_opt = IntervalSet.of(opt["start_ns"], opt["end_ns"]).contains(gpu["launch_ns"].to_numpy())
    gpu["in_optimizer"] = in_opt
    gpu["category"] = np.where(in_opt & (gpu["kind"] == "kernel").to_numpy() & (cat != "communication").to_numpy(),
                               "optimizer", cat)
    return KernelTable(gpu.reset_index(drop=True), windows.total, len(steps.steady))


def category_times(kt: KernelTable) -> pd.DataFrame:
    """Time per category (ms over the steady window) and share of GPU activity time (%)."""
    g = kt.rows.groupby("category")["dur_ns"].sum()
    total = max(int(g.sum()), 1)
    out = pd.DataFrame({"category": list(KERNEL_CATEGORIES)})
    out["time_ms"] = [float(g.get(c, 0)) / 1e6 for c in KERNEL_CATEGORIES]
    out["share_pct"] = [100.0 * float(g.get(c, 0)) / total for c in KERNEL_CATEGORIES]
    return out


def launch_stats(tl: Timeline, kt: KernelTable) -> dict[str, float]:
    k = kt.rows[kt.rows["kind"] == "kernel"]
    n = len(k)
    out: dict[str, float] = {}
    if n == 0:
        return out
    out["kernels_per_step"] = n / max(kt.steady_steps, 1)
    out["kernel_median_us"] = float(np.median(k["dur_ns"])) / 1e3
    out["short_kernel_pct"] = 100.0 * float((k["dur_ns"] < SHORT_KERNEL_NS).mean())
    out["kernel_time_ms_per_step"] = float(k["dur_ns"].sum()) / 1e6 / max(kt.steady_steps, 1)
    corr = set(k["correlation"][k["correlation"] >= 0].tolist())
    calls = tl.host[tl.host["correlation"].isin(corr)]
    if len(calls):
        calls = calls.drop_duplicates("correlation")
        out["launch_api_us_per_kernel"] = float((calls["end_ns"] - calls["start_ns"]).sum()) / len(calls) / 1e3
    return out


def tensor_core_stats(kt: KernelTable) -> dict:
    g = kt.rows[(kt.rows["category"] == "gemm") & (kt.rows["kind"] == "kernel")]
    out: dict = {}
    total = float(g["dur_ns"].sum())
    kernel_total = float(kt.rows["dur_ns"].sum())
    if kernel_total <= 0:
        return out
    out["gemm_time_pct"] = 100.0 * total / kernel_total
    if total <= 0:
        return out
    use = tensor_core_use(g["name"])
    no_tc = g[use == "no"]
    out["gemm_no_tensor_core_pct"] = 100.0 * float(no_tc["dur_ns"].sum()) / total
    out["gemm_no_tensor_core_step_pct"] = 100.0 * float(no_tc["dur_ns"].sum()) / max(kt.steady_ns, 1)
    if len(no_tc):
        top = no_tc.groupby("name")["dur_ns"].sum().sort_values(ascending=False)
        out["top_no_tensor_core_kernel"] = str(top.index[0])
    return out


def attention_stats(kt: KernelTable) -> dict[str, float]:
    """Fused attention kernel time, and softmax-between-GEMMs (hand-written) attention blocks."""
    rows = kt.rows[kt.rows["kind"] == "kernel"]
    kernel_total = max(float(kt.rows["dur_ns"].sum()), 1.0)
    out: dict[str, float] = {}
    fused = rows[rows["category"] == "attention"]
    out["fused_attention_pct"] = 100.0 * float(fused["dur_ns"].sum()) / kernel_total
    blocks, block_ns = 0, 0
    attention_softmax = (rows["category"] == "softmax").to_numpy() & ~name_mask(rows["name"], LOG_SOFTMAX)
    rows = rows.assign(_softmax=attention_softmax)
    for _, g in rows.groupby(["device", "stream"], sort=True):
        if not g["_softmax"].any():
            continue
        g = g.sort_values("start_ns", kind="stable")
        pos = np.arange(len(g))
        is_gemm = (g["category"] == "gemm").to_numpy()
        # nearest GEMM before / after each kernel on this stream
        prev = np.maximum.accumulate(np.where(is_gemm, pos, -1))
        prev = np.concatenate(([-1], prev[:-1]))
        nxt = np.minimum.accumulate(np.where(is_gemm, pos, len(g))[::-1])[::-1]
        nxt = np.concatenate((nxt[1:], [len(g)]))
        soft = np.flatnonzero(g["_softmax"].to_numpy())
        ok = ((prev[soft] >= 0) & (soft - prev[soft] <= ATTENTION_WINDOW_KERNELS)
              & (nxt[soft] < len(g)) & (nxt[soft] - soft <= ATTENTION_WINDOW_KERNELS))
        soft = soft[ok]
        if soft.size == 0:
            continue
        blocks += int(soft.size)
        edges = np.zeros(len(g) + 1, dtype=np.int64)  # mark kernels from the score GEMM to the value GEMM
        np.add.at(edges, prev[soft], 1)
        np.add.at(edges, nxt[soft] + 1, -1)
        covered = np.cumsum(edges[:-1]) > 0
        block_ns += int(g["dur_ns"].to_numpy()[covered].sum())
    out["unfused_attention_blocks_per_step"] = blocks / max(kt.steady_steps, 1)
    out["unfused_attention_pct"] = 100.0 * block_ns / max(kt.steady_ns, 1)
    out["unfused_attention_kernel_pct"] = 100.0 * block_ns / kernel_total
    return out


def memory_bound_stats(kt: KernelTable) -> dict[str, float]:
    """Share of kernel time in bandwidth-bound categories (elementwise, copy, norm, softmax, reduction)."""
    total = max(float(kt.rows["dur_ns"].sum()), 1.0)
    mem = kt.rows["category"].isin(["elementwise", "copy", "normalization", "softmax", "reduction"])
    pct = 100.0 * float(kt.rows.loc[mem, "dur_ns"].sum()) / total
    busy_share = min(total / max(kt.steady_ns, 1), 1.0)
    return {"memory_bound_kernel_pct": pct,
            "memory_bound_step_pct": pct * busy_share}


def optimizer_stats(tl: Timeline, kt: KernelTable, steps: Steps) -> dict:
    """Optimizer kernels per step and whether they are per-parameter, foreach or fused."""
    rows = kt.rows[(kt.rows["kind"] == "kernel") & (kt.rows["category"] == "optimizer")]
    out: dict = {}
    if rows.empty:
        return out
    n = len(rows)
    multi = name_mask(rows["name"], MULTI_TENSOR)
    fused = multi & name_mask(rows["name"], FUSED_OPTIMIZER)
    out["optimizer_kernels_per_step"] = n / max(kt.steady_steps, 1)
    out["optimizer_single_tensor_pct"] = 100.0 * float((~multi).sum()) / n
    out["optimizer_style"] = ("fused" if fused.mean() >= 0.5 else "foreach" if multi.mean() >= 0.5 else "single_tensor")
    out["optimizer_gpu_pct"] = 100.0 * float(rows["dur_ns"].sum()) / max(kt.steady_ns, 1)
    opt = optimizer_ranges(tl)
    if len(opt):
        iv = IntervalSet.of(opt["start_ns"], opt["end_ns"])
        idx = steps.steady
        host = iv.overlap(steps.host_start[idx], steps.host_end[idx]).sum()
        out["optimizer_step_pct"] = 100.0 * float(host) / max(kt.steady_ns, 1)
    return out


def is_training(tl: Timeline, kt: KernelTable) -> bool:
    """Training if the trace shows backward or optimizer work (ranges, annotations or kernels)."""
    if name_mask(tl.ranges["name"], TRAINING_RANGE).any():
        return True
    k = kt.rows[kt.rows["kind"] == "kernel"]
    if k.empty:
        return False
    return bool(name_mask(k["name"], BACKWARD_KERNEL).any() or (k["category"] == "optimizer").any())
