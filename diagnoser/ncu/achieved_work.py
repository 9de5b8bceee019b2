"""What one launch did, as Nsight Compute counted it: FLOPs executed and DRAM bytes moved, and the
throughput they give over its duration. The per-op roofline of a PyTorch trace sets its own numbers
(FLOPs and compulsory bytes from the shapes, over the traced kernel time) next to these when a trace
and an ncu report of one run are given (diagnoser/runs/roofline_ncu.py).

FLOPs as Nsight Compute's own roofline section counts them: the tensor-core operations of each source
type (`sm__ops_path_tensor_src_<type>.sum`: one multiply-add of a matrix instruction is two
operations), plus the non-tensor FP32 / FP64 / FP16 instructions per thread (2 x FMA + ADD + MUL;
an HFMA2 does two FMAs), from their per-cycle rates times the SM sub-partitions' elapsed cycles.
Integer tensor ops (int8, int1) are not floating point and are left out. Bytes: DRAM reads plus
writes (what crossed HBM; data served from L2 is not counted). A metric the report lacks (a report
without --set full) leaves the fact out.
"""
from __future__ import annotations

from .units import _num

TENSOR_SOURCES = ("bf16_dst_fp32", "fp16", "tf32_dst_fp32", "fp8", "fp64")
# (instruction, FLOPs per thread instruction): smsp__sass_thread_inst_executed_op_<inst>_pred_on
SCALAR_FLOPS = (("ffma", 2), ("fadd", 1), ("fmul", 1), ("dfma", 2), ("dadd", 1), ("dmul", 1),
                ("hfma", 4), ("hadd", 2), ("hmul", 2))


def launch_work(m: dict) -> dict[str, float]:
    """{kernel_flop_count, kernel_tflops, dram_bytes, dram_tbs} of one launch's metrics, where present."""
    out: dict[str, float] = {}
    tensor = [_num(m, f"sm__ops_path_tensor_src_{s}.sum") for s in TENSOR_SOURCES]
    cycles = _num(m, "smsp__cycles_elapsed.avg")
    rates = [(_num(m, f"smsp__sass_thread_inst_executed_op_{i}_pred_on.sum.per_cycle_elapsed"), k)
             for i, k in SCALAR_FLOPS]
    if any(t is not None for t in tensor) or (cycles is not None and any(r is not None for r, _ in rates)):
        flops = sum(t for t in tensor if t is not None)
        if cycles is not None:
            flops += sum(r * k * cycles for r, k in rates if r is not None)
        out["kernel_flop_count"] = float(flops)
    read, write = _num(m, "dram__bytes_read.sum"), _num(m, "dram__bytes_write.sum")
    if read is not None and write is not None:
        out["dram_bytes"] = float(read + write)
    ns = _num(m, "gpu__time_duration.sum")
    if ns:
        if "kernel_flop_count" in out:
            out["kernel_tflops"] = out["kernel_flop_count"] / ns / 1e3
        if "dram_bytes" in out:
            out["dram_tbs"] = out["dram_bytes"] / ns / 1e3
    return out
