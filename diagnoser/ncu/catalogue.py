"""The vocabulary of kernel facts: every fact the Nsight Compute analysis (kernels/analysis.py) can
emit per launch or per report, with unit, meaning and how to collect it. Imports no pandas or numpy,
so `rules list` and rule validation start fast."""
from __future__ import annotations

from ..facts import FactSpec
from .units import PIPE_WORK
from ..program_kinds import FRAMEWORKS, GPU_ARCHS

READER = "ncu"
COLLECT_FULL = "ncu --set full -o report <app>   (these metrics are not in --set basic)"
COLLECT = "ncu --set full -o report <app>"


def _k(name, type_, unit, meaning, collect=COLLECT):
    return FactSpec(name, type_, unit, meaning, subject="kernel",
                    sources=("ncu-rep", "ncu-csv-raw", "ncu-csv-details"), collect=collect)


def _r(name, type_, unit, meaning):
    return FactSpec(name, type_, unit, meaning, subject="run",
                    sources=("ncu-rep", "ncu-csv-raw", "ncu-csv-details"), collect=COLLECT)


CATALOGUE: list[FactSpec] = [
    _r("kernel_launch_count", "number", "count", "kernel launches profiled in the Nsight Compute report"),
    _r("kernel_distinct_count", "number", "count", "distinct kernels (by demangled name) in the report"),
    _r("kernel_gpu_time_total_ms", "number", "ms", "sum of the profiled launches' durations"),
    _r("device_sm_count", "number", "count", "streaming multiprocessors on the profiled GPU"),
    _r("device_name", "string", "", "the profiled GPU's name, from the device attributes (its peaks: "
       "timeline/device_peaks.py)"),
    _r("framework", "string", "", "who wrote the kernels, by their names: " + " | ".join(FRAMEWORKS)),
    _r("framework_evidence", "string", "", "what decided `framework`"),
    _r("gpu_arch", "string", "", "the GPU generation, from the device attributes (compute capability), else "
       "the kernel names: " + " | ".join(GPU_ARCHS)),
    _r("gpu_arch_evidence", "string", "", "what decided `gpu_arch`"),
    _k("kernel_name", "string", "", "demangled kernel name"),
    _k("kernel_base_name", "string", "", "function name without namespaces/templates; groups launches"),
    _k("is_library_kernel", "bool", "", "kernel comes from cuBLAS/cuDNN/CUTLASS/flash-attention/NCCL/CUB"),
    _k("library_name", "string", "", "which library the kernel belongs to (only for library kernels)"),
    _k("kernel_origin", "string", "", "whose code it is, by name: cuBLAS | cuDNN | flash-attention | CUTLASS | NCCL | CUB | Triton | PyTorch | user code (a cuBLAS-built GEMM launched between cuDNN convolution kernels is cuDNN's)"),
    _k("tensor_core_switch", "string", "", "the call that puts this kernel's FP32 matrix math on tensor cores (depends on kernel_origin)"),
    _k("kernel_time_rank", "number", "count", "1 for the launch with the most GPU time in the report, 2 for the next, ..."),
    _k("kernel_duration_us", "number", "us", "GPU time of the launch (gpu__time_duration.sum)"),
    _k("kernel_time_share_pct", "number", "%", "launch duration as a share of all profiled GPU time"),
    _k("sm_throughput_pct", "number", "%", "SM Speed of Light: sm__throughput, % of peak"),
    _k("memory_throughput_pct", "number", "%", "memory Speed of Light: gpu__compute_memory_throughput, % of peak"),
    _k("sol_max_pct", "number", "%", "the larger of SM and memory throughput (distance to Speed of Light)"),
    _k("sol_bound_side", "string", "", "which Speed-of-Light side is higher: sm | memory"),
    _k("dram_throughput_pct", "number", "%", "DRAM throughput, % of peak"),
    _k("kernel_flop_count", "number", "FLOP", "floating-point operations the launch executed: tensor-core ops "
       "(sm__ops_path_tensor_src_*) plus FP32/FP64/FP16 FMA (x2), ADD and MUL instructions per thread", COLLECT_FULL),
    _k("kernel_tflops", "number", "TFLOP/s", "kernel_flop_count over the launch's duration", COLLECT_FULL),
    _k("dram_bytes", "number", "bytes", "bytes read from and written to DRAM (dram__bytes_read + dram__bytes_write)"),
    _k("dram_tbs", "number", "TB/s", "dram_bytes over the launch's duration"),
    _k("l1_throughput_pct", "number", "%", "L1/TEX throughput, % of peak (active)"),
    _k("l2_throughput_pct", "number", "%", "L2 throughput, % of peak"),
    _k("achieved_occupancy_pct", "number", "%", "achieved warps per SM as % of the hardware maximum"),
    _k("theoretical_occupancy_pct", "number", "%", "theoretical occupancy given registers/shared memory/block size"),
    _k("occupancy_achieved_of_theoretical_pct", "number", "%", "achieved occupancy as % of theoretical"),
    _k("occupancy_limiter", "string", "", "what caps theoretical occupancy: registers | shared_memory | block_size | blocks | none"),
    _k("waves_per_sm", "number", "count", "launch__waves_per_multiprocessor"),
    _k("grid_blocks_count", "number", "count", "blocks in the grid"),
    _k("block_threads_count", "number", "count", "threads per block"),
    _k("grid_sm_fill_pct", "number", "%", "blocks per SM count as % (100 = at least one block on every SM)"),
    _k("registers_per_thread_count", "number", "count", "registers allocated per thread"),
    _k("local_memory_bytes", "number", "bytes", "local-memory (register spill / stack array) traffic through L1", COLLECT_FULL),
    _k("local_memory_share_pct", "number", "%", "local-memory sectors as % of local + global L1 sectors", COLLECT_FULL),
    _k("tensor_pipe_pct", "number", "%", "tensor pipe active cycles, % of peak (elapsed)"),
    _k("fp32_pipe_pct", "number", "%", "FMA (FP32) pipe active cycles, % of peak (elapsed)"),
    _k("fp64_pipe_pct", "number", "%", "FP64 pipe active cycles, % of peak (elapsed)"),
    _k("xu_pipe_pct", "number", "%", "XU pipe (MUFU: reciprocal, rsqrt, sin/cos, exp2/log2; FP32 division), % of peak"),
    _k("lsu_pipe_pct", "number", "%", "LSU pipe (shared/global/local memory instructions, shuffles), % of peak"),
    _k("adu_pipe_pct", "number", "%", "ADU pipe (block barriers, divergent branches, constant loads), % of peak"),
    _k("alu_pipe_pct", "number", "%", "ALU pipe (integer, logic, compare, conversion), % of peak"),
    _k("issue_active_pct", "number", "%", "cycles an instruction was issued, % of peak (the issue-slot limit)"),
    _k("sm_busiest_pipe", "string", "", "SM pipe with the highest utilization: " + " | ".join(PIPE_WORK)),
    _k("sm_busiest_pipe_pct", "number", "%", "that pipe's utilization, % of its peak"),
    _k("sm_busiest_pipe_work", "string", "", "what the busiest pipe executes (plain words for messages)"),
    _k("sm_second_pipe_pct", "number", "%", "utilization of the next busiest pipe (the limit once the busiest is relieved)"),
    _k("shared_inst_share_pct", "number", "%", "shared-memory instructions as % of executed instructions", COLLECT_FULL),
    _k("shared_bank_conflicts_count", "number", "count", "shared-memory bank conflicts (L1 data pipe)", COLLECT_FULL),
    _k("shared_bank_conflict_pct", "number", "%", "bank conflicts as % of shared-memory wavefronts", COLLECT_FULL),
    _k("shared_load_conflict_pct", "number", "%", "bank conflicts of shared-memory loads as % of the load wavefronts", COLLECT_FULL),
    _k("shared_store_conflict_pct", "number", "%", "bank conflicts of shared-memory stores as % of the store wavefronts", COLLECT_FULL),
    _k("shared_load_wavefronts_per_request", "number", "count", "wavefronts per shared-memory load instruction (N-way: 1 conflict-free for 32-bit, 32 when a warp hits one bank)", COLLECT_FULL),
    _k("shared_store_wavefronts_per_request", "number", "count", "wavefronts per shared-memory store instruction (N-way)", COLLECT_FULL),
    _k("shared_conflict_side", "string", "", "the shared-memory direction with more bank conflicts: loads | stores", COLLECT_FULL),
    _k("shared_conflict_side_pct", "number", "%", "that direction's bank conflicts as % of its wavefronts (judged apart from the other direction)", COLLECT_FULL),
    _k("shared_conflict_side_ways", "number", "count", "that direction's wavefronts per instruction (Nsight Compute's 'N-way bank conflict')", COLLECT_FULL),
    _k("shared_conflict_pipe_pct", "number", "%", "L1 data-pipe time spent on bank-conflict wavefronts, % of the pipe's peak over the launch (what the conflicts cost)", COLLECT_FULL),
    _k("global_load_sectors_per_request", "number", "count", "32-byte sectors per global load request", COLLECT_FULL),
    _k("global_store_sectors_per_request", "number", "count", "32-byte sectors per global store request", COLLECT_FULL),
    _k("global_load_efficiency_pct", "number", "%", "bytes used per fetched sector, % (100 = fully coalesced loads)", COLLECT_FULL),
    _k("global_store_efficiency_pct", "number", "%", "bytes used per written sector, % (100 = fully coalesced stores)", COLLECT_FULL),
    _k("global_load_requests_count", "number", "count", "global load requests (warp level)", COLLECT_FULL),
    _k("global_store_requests_count", "number", "count", "global store requests (warp level)", COLLECT_FULL),
    _k("global_wasted_sector_share_pct", "number", "%", "global sectors (loads + stores) moved beyond the bytes requested, % of all global sectors", COLLECT_FULL),
    _k("global_load_wasted_share_pct", "number", "%", "wasted load sectors, % of all global sectors", COLLECT_FULL),
    _k("global_store_wasted_share_pct", "number", "%", "wasted store sectors, % of all global sectors", COLLECT_FULL),
    _k("global_wasteful_access", "string", "", "which side wastes the sectors: loads | stores | loads and stores | none", COLLECT_FULL),
    _k("active_threads_per_warp_count", "number", "count", "average active threads per executed warp instruction (32 = no divergence)", COLLECT_FULL),
    _k("warp_efficiency_pct", "number", "%", "active threads per warp instruction as % of 32", COLLECT_FULL),
    _k("dominant_stall_reason", "string", "", "warp stall reason with the most cycles per issued instruction", COLLECT_FULL),
    _k("dominant_stall_share_pct", "number", "%", "that reason's share of all stall cycles", COLLECT_FULL),
    _k("atomic_inst_count", "number", "count", "global atomic/reduction requests (warp level)", COLLECT_FULL),
    _k("atomic_inst_share_pct", "number", "%", "global atomics/reductions as % of executed instructions", COLLECT_FULL),
    _k("atomic_throughput_per_us", "number", "count", "global atomic/reduction requests per microsecond of kernel time", COLLECT_FULL),
    _k("l2_atomic_hotspot_ratio", "number", "count", "busiest L2 slice's atomic unit activity / average (same-address contention)"),
    _k("l2_atomic_hot_unit_busy_pct", "number", "%", "the busiest L2 slice's atomic unit active cycles, % of elapsed (the serial limit of same-address atomics)"),
    _k("sm_busiest_to_average_cycles_ratio", "number", "ratio", "the busiest SM's active cycles / the average SM's (1 = even; large: one block does most of the work)"),
    _k("sm_average_of_busiest_cycles_pct", "number", "%", "the average SM's active cycles as % of the busiest SM's"),
    _k("aten_op", "string", "", "the PyTorch operator that launches this ATen kernel (by the kernel's name)"),
    _k("aten_op_fix", "string", "", "what to call instead of that operator when most of its indices are equal"),
    _k("ncu_top_rule", "string", "", "Nsight Compute's own rule with the largest estimated speedup"),
    _k("ncu_top_rule_speedup_pct", "number", "%", "that rule's estimated speedup (as Nsight Compute states it)"),
    _k("ncu_top_rule_message", "string", "", "first sentence of that rule's message"),
    _k("ncu_sol_verdict", "string", "", "first sentence of Nsight Compute's SOLBottleneck message"),
]
