"""cuDNN autotuning in the steady steps (`torch.backends.cudnn.benchmark = True` with input shapes that keep
changing): for every new shape cuDNN times each candidate algorithm, launching trial kernels and synchronizing
the device between them, inside the convolution operators. A PyTorch trace shows it as device synchronizations
inside `aten::cudnn_convolution` / `aten::convolution_backward`, steps after steps; once tuned (a shape seen
before) a convolution launches its kernels and never syncs.
"""
from __future__ import annotations

import re

import numpy as np

from .. import settings
from .intervals import IntervalSet
from .names import lazy_pattern, name_mask
from .view import TimelineView

CONV_OP = re.compile(r"^aten::(?:cudnn_convolution(?:_transpose)?|convolution_backward|miopen_convolution\w*)$")
CONV_KERNEL = lazy_pattern(r"wgrad|dgrad|fprop|implicit_?gemm|winograd|miopen|convolution|conv_?[123]d", re.I)
AUTOTUNE_MIN_SYNCS = settings.register("timeline.autotune_min_syncs", 4, "syncs/step", "fewer device syncs per steady step than this cannot be cuDNN timing its algorithms (several candidates per convolution, each timed between syncs): an export without operators measures no autotuning then")
ATTENTION_KERNEL = lazy_pattern(r"sdpa|attention|fmha|flash", re.I)  # cuDNN's fused attention is not a convolution
NONE = {"conv_autotune_syncs_per_step": 0.0, "conv_autotune_calls_per_step": 0.0, "conv_autotune_ms_per_step": 0.0,
        "conv_autotune_step_pct": 0.0}


def autotune_stats(tv: TimelineView, steps) -> dict:
    """Synchronizing calls inside convolution operators in the steady steps: how many per step, and the share
    of the steps spent inside the convolution calls that synchronized (the trials)."""
    r = tv.tl.ranges
    idx = steps.steady
    if idx.size == 0:
        return {}
    windows = steps.steady_windows
    sync = tv.host_is("sync")
    ss = tv.host_start[sync]
    ss = ss[windows.contains(ss)]
    if tv.tl.source == "nsys":  # no operators: measured only where nothing could be autotuning
        conv_kernels = tv.is_kernel & tv.gpu_names.mask(CONV_KERNEL()) & ~tv.gpu_names.mask(ATTENTION_KERNEL())
        return dict(NONE) if ss.size < AUTOTUNE_MIN_SYNCS.value * idx.size or not conv_kernels.any() else {}
    conv = r[(r["kind"] == "op").to_numpy() & name_mask(r["name"], CONV_OP)] if len(r) else r
    if not len(conv) or ss.size == 0:
        return dict(NONE)
    cs, ce = conv["start_ns"].to_numpy(np.int64), conv["end_ns"].to_numpy(np.int64)
    order = np.argsort(cs, kind="stable")
    cs, ce = cs[order], ce[order]
    # per sync, the conv op it lies in (ops of one name do not nest; the latest start before it)
    k = np.searchsorted(cs, ss, side="right") - 1
    inside = (k >= 0) & (ss < ce[np.maximum(k, 0)])
    n = int(inside.sum())
    if n == 0:
        return dict(NONE)
    tuned = np.unique(k[inside])
    trials = IntervalSet.of(cs[tuned], ce[tuned])
    ns = float(trials.overlap(windows.starts, windows.ends).sum())
    return {"conv_autotune_syncs_per_step": n / idx.size, "conv_autotune_calls_per_step": tuned.size / idx.size,
            "conv_autotune_ms_per_step": ns / 1e6 / idx.size, "conv_autotune_step_pct": 100.0 * ns / max(windows.total, 1)}
