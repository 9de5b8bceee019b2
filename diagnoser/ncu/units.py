"""Which SM pipe a kernel keeps busy, how much of its global traffic is wasted, and whose code it is.

Pure functions over one launch's Nsight Compute metrics (names as Nsight Compute writes them, in
the binary report and the raw CSV alike). `sm__throughput` is the maximum of many sub-metrics
(issue slots, each pipe, the MIO queues), so "SM throughput is high" says nothing about WHAT is
busy: a kernel can be at 85% because the XU pipe does divisions, because the LSU pipe serves
shared-memory loads, or because the ADU pipe executes barriers. The advice differs for each.
"""
from __future__ import annotations

import math
import re

from .. import settings
from ..kernel_names import kernel_origin
from ..program_kinds import SM_PIPES

WASTE_MIN_SHARE = settings.register(
    "kernel.wasteful_access_min_share", 0.01, "fraction",
    "loads (or stores) are named in global_wasteful_access when their wasted sectors are at least this share of "
    "all global sectors moved")
WASTE_SIDE_SHARE = settings.register(
    "kernel.wasteful_access_side_share", 0.2, "fraction",
    "... and at least this share of all wasted sectors (so the side that wastes little is not named)")

# pipe -> metric bases (each read as .avg.pct_of_peak_sustained_elapsed, else _active); the pipe's
# utilization is the largest of its bases. `sm__pipe_shared_cycles_active` is left out on purpose:
# the "shared pipe" is the FP64 + tensor datapath, not shared memory.
PIPES = (
    ("tensor", ("sm__pipe_tensor_cycles_active", "sm__inst_executed_pipe_tensor_op_hmma",
                "sm__inst_executed_pipe_tensor_op_gmma", "sm__pipe_tensor_op_hmma_cycles_active",
                "sm__pipe_tensor_op_gmma_cycles_active")),
    ("fma", ("sm__pipe_fma_cycles_active", "sm__inst_executed_pipe_fma")),
    ("alu", ("sm__pipe_alu_cycles_active", "sm__inst_executed_pipe_alu")),
    ("fp64", ("sm__pipe_fp64_cycles_active", "sm__inst_executed_pipe_fp64")),
    ("xu", ("sm__inst_executed_pipe_xu",)),
    ("lsu", ("sm__inst_executed_pipe_lsu",)),
    ("adu", ("sm__inst_executed_pipe_adu",)),
    ("cbu", ("sm__inst_executed_pipe_cbu",)),
    ("uniform", ("sm__inst_executed_pipe_uniform",)),
    ("tex", ("sm__inst_executed_pipe_tex",)),
    ("tma", ("sm__inst_executed_pipe_tma", "sm__pipe_tma_cycles_active")),
)
# What each pipe executes (for messages: the user must see why "compute bound" is or is not math).
PIPE_WORK = dict(zip(SM_PIPES, (  # what each pipe of the vocabulary (program_kinds.SM_PIPES) executes
    "tensor-core matrix math (HMMA/GMMA)",
    "FP32 multiply-add (FFMA/FADD/FMUL) and integer multiply-add (IMAD)",
    "integer, logic, compare and conversion instructions (IADD3, LOP3, ISETP, FSETP, F2I)",
    "double-precision math (DFMA/DADD/DMUL; an FP64 division or sqrt expands into DFMA steps)",
    "special functions: reciprocal, rsqrt, sin/cos, exp2/log2 (MUFU), the core of every FP32 division and sqrt",
    "memory instructions (shared LDS/STS, global LDG/STG, local) and warp shuffles (SHFL)",
    "block barriers (BAR.SYNC), divergent-branch handling and constant loads",
    "branches and warp convergence (BRA, BSSY/BSYNC)",
    "uniform-datapath (per-warp scalar) instructions",
    "texture and surface fetches",
    "bulk tensor copies (TMA)",
), strict=True))
MIN_PIPES = 3  # fewer pipe metrics than this (a CSV with a few columns): no busiest-pipe verdict

def _num(metrics: dict, name: str) -> float | None:
    v = metrics.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _pct(m: dict, base: str) -> float | None:
    v = _num(m, base + ".avg.pct_of_peak_sustained_elapsed")
    return v if v is not None else _num(m, base + ".avg.pct_of_peak_sustained_active")


def pipe_utilization(m: dict) -> dict[str, float]:
    """pipe -> % of its peak (only pipes with a metric present)."""
    out = {}
    for pipe, bases in PIPES:
        vals = [v for b in bases if (v := _pct(m, b)) is not None]
        if vals:
            out[pipe] = max(vals)
    return out


def pipe_facts(m: dict) -> dict[str, object]:
    pipes = pipe_utilization(m)
    f: dict[str, object] = {f"{p}_pipe_pct": pipes.get(p) for p in ("xu", "lsu", "adu", "alu")}
    f["issue_active_pct"] = _num(m, "sm__issue_active.avg.pct_of_peak_sustained_elapsed")
    if len(pipes) >= MIN_PIPES:
        busiest = max(sorted(pipes), key=lambda p: pipes[p])
        f["sm_busiest_pipe"] = busiest
        f["sm_busiest_pipe_pct"] = pipes[busiest]
        f["sm_busiest_pipe_work"] = PIPE_WORK[busiest]
        rest = [v for p, v in pipes.items() if p != busiest]
        f["sm_second_pipe_pct"] = max(rest) if rest else 0.0
    return f


def access_waste_facts(m: dict) -> dict[str, object]:
    """Global sectors moved beyond what the requested bytes need, loads and stores weighed by traffic.

    Efficiency alone misleads: a reduction that stores one float per block has 12.5% store
    efficiency on a few hundred sectors next to millions of perfectly used load sectors.
    """
    f: dict[str, object] = {}
    wasted, total = {}, 0.0
    for op, word in (("ld", "load"), ("st", "store")):
        requests = _num(m, f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum")
        sectors = _num(m, f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum")
        used = _num(m, f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio")
        peak = _num(m, f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.max_rate")
        if requests is not None:
            f[f"global_{word}_requests_count"] = requests
        if sectors is None:
            return f
        total += sectors
        if sectors == 0:
            wasted[word] = 0.0
        elif used == 0:
            return f  # sectors moved by instructions the SASS counter skips (LDGSTS/cp.async, TMA): unknown
        elif used is not None and peak:
            wasted[word] = sectors * max(0.0, 1.0 - min(1.0, used / peak))
        else:
            return f
    if total <= 0:
        return f
    share = 100.0 * sum(wasted.values()) / total
    f["global_wasted_sector_share_pct"] = share
    f["global_load_wasted_share_pct"] = 100.0 * wasted["load"] / total
    f["global_store_wasted_share_pct"] = 100.0 * wasted["store"] / total
    all_wasted = sum(wasted.values())
    sides = [w + "s" for w in ("load", "store")
             if wasted[w] >= WASTE_MIN_SHARE.value * total and wasted[w] >= WASTE_SIDE_SHARE.value * all_wasted]
    f["global_wasteful_access"] = " and ".join(sides) if sides else "none"
    return f


# cuDNN's FFT and Winograd convolutions run their GEMM step on cuBLAS-built kernels
# (`..._5x_cublas`): launched right after or before one of those algorithms' transform kernels,
# such a GEMM is cuDNN's work, and the switch that changes it is cuDNN's, not cuBLAS's. (Implicit
# GEMM convolutions are self-contained: a GEMM next to one is a separate matmul.)
CUDNN_CONV_STEP = re.compile(r"fft2d_|fft_r2c|fft_c2r|winograd", re.IGNORECASE)


def cudnn_conv_gemm(prev_name: str | None, name: str, next_name: str | None, origin: str) -> bool:
    """A cuBLAS-named GEMM sitting between cuDNN convolution kernels (its caller is cuDNN)."""
    if origin != "cuBLAS":
        return False
    return any(n is not None and CUDNN_CONV_STEP.search(n) and kernel_origin(n) == "cuDNN"
               for n in (prev_name, next_name))


# The call that moves an FP32 matmul/convolution of this origin onto tensor cores.
TENSOR_CORE_SWITCH = {
    "cuBLAS": "cuBLAS matmul: `torch.backends.cuda.matmul.allow_tf32 = True` or `torch.set_float32_matmul_precision('high')` (C++: `cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH)`)",
    "cuDNN": "cuDNN convolution: `torch.backends.cudnn.allow_tf32 = True` (PyTorch's default: find what turned it off; C++: `cudnnSetConvolutionMathType(desc, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)`)",
    "CUTLASS": "CUTLASS kernel: instantiate a tensor-op configuration (`OpClassTensorOp` with `tfloat32_t` or bf16 operands) instead of `OpClassSimt`",
    "Triton": "Triton kernel: `tl.dot(a, b, input_precision='tf32')` (or bf16 operands)",
}
TENSOR_CORE_SWITCH_DEFAULT = "hand-written kernel: call cuBLAS/cuBLASLt (TF32 or bf16) or use WMMA / `mma.sync` tensor-core fragments"


def tensor_core_switch(origin: str) -> str:
    return TENSOR_CORE_SWITCH.get(origin, TENSOR_CORE_SWITCH_DEFAULT)
