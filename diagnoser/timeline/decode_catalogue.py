"""Timeline facts the inference tree adds: device memory over the steady steps (kv_cache.py, from a
PyTorch trace's allocator events and the device's total memory) and the op distribution
(timeline/ops.py op_distribution, from the trace's aten op ranges)."""
from __future__ import annotations

from ..facts import FactSpec

SOURCES = ("torch-trace",)
MEMORY = ("record the allocator in the trace: `torch.profiler.profile(..., profile_memory=True)` (the device's "
          "total memory comes with the trace's deviceProperties); or pass, with the trace, a memory snapshot "
          "(`torch.cuda.memory._record_memory_history()` before the model is built, `torch.cuda.memory._dump_snapshot("
          "'mem.pickle')` after the profiled steps) or `json.dump(torch.cuda.memory_stats(), open('stats.json', 'w'))` "
          "of the same process: diagnoser joins it to the trace's run. An Nsight Systems export made with "
          "`nsys profile --cuda-memory-usage=true` gives the headroom, not what stays allocated")

OPS = ("profile with torch.profiler, activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] (the aten op ranges "
       "come with the CPU activity)")


def _n(name, unit, meaning, sources=SOURCES):
    return FactSpec(name, "number", unit, meaning, "run", sources, MEMORY)


RESERVED = ("torch-trace", "nsys-sqlite")  # also from an Nsight Systems export made with --cuda-memory-usage=true


CATALOGUE = [
    FactSpec("device_memory_total_gb", "number", "GiB", "the device's total memory (torch trace deviceProperties, "
             "Nsight Systems TARGET_INFO_GPU)", "run", ("torch-trace", "nsys-sqlite"),
             "profile with torch.profiler or Nsight Systems (both record the device's properties)"),
    _n("mem_allocated_peak_gb", "GiB", "peak memory allocated by PyTorch over the steady steps"),
    _n("mem_reserved_peak_gb", "GiB", "peak memory the caching allocator reserved over the steady steps", RESERVED),
    _n("memory_headroom_pct", "%", "device memory not reserved at the steady-state peak, % of the device", RESERVED),
    _n("memory_headroom_gb", "GiB", "device memory not reserved at the steady-state peak", RESERVED),
    _n("mem_persistent_gb", "GiB", "least memory allocated at any point of the steady steps: what stays across "
       "them (weights, KV cache)"),
    _n("mem_persistent_pct", "%", "mem_persistent_gb as % of the device's memory"),
    _n("mem_growth_mb_per_step", "MB", "allocated memory added per steady step (a KV cache growing by one token "
       "per decode step shows here; a preallocated cache does not)"),
    FactSpec("kv_cache_paged", "bool", "", "kernels of a paged KV cache run (vLLM reshape_and_cache / paged_attention, "
             "SGLang store_kvcache, FlashInfer paged decode): the server preallocates its cache pool on purpose",
             "run", ("torch-trace", "nsys-sqlite"), OPS),
    _n("memory_events_per_step", "count", "allocator events (allocations and frees) per steady step", RESERVED),
    FactSpec("ncu_attention_launch_skip", "number", "count", "`ncu --launch-skip` for the attention kernels "
             "(the attention kernel pattern of timeline/kernels.py): their launches before the first steady step, at least one step's worth",
             "run", SOURCES, OPS),
    FactSpec("ncu_attention_launch_count", "number", "count", "`ncu --launch-count` for the attention kernels: their "
             "launches in one steady step", "run", SOURCES, OPS),
    FactSpec("top_op_name", "string", "", "the aten op whose kernels take the most GPU time (kernels counted for the "
             "innermost op around their launch, as key_averages' self CUDA time)", "run", SOURCES, OPS),
    FactSpec("top_op_gpu_pct", "number", "%", "top_op_name's share of the GPU time attributed to ops", "run", SOURCES, OPS),
    FactSpec("top_op_cpu_ms_per_step", "number", "ms", "CPU time in top_op_name per steady step (its ranges' total "
             "duration)", "run", SOURCES, OPS),
]

SHAPES = ("profile the decode loop with torch.profiler, activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
          "record_shapes=True and one prof.step() per generated token (the GEMMs' input shapes say how many tokens "
          "each step runs; an Nsight Systems export has no shapes)")


def _d(name, unit, meaning, type="number"):
    return FactSpec(name, type, unit, meaning, "run", SOURCES, SHAPES)


CATALOGUE += [
    _d("decode_rows_steps_measured", "count", "forward passes whose GEMM-class ops' rows were followed pass to pass "
       "(timeline/decode_prefix.py: a pass starts at the token-embedding lookup, else one per profiler step; 0: the "
       "trace records shapes but too few passes, or a pass without a linear / mm op: no decode loop re-running its "
       "prefix to see)"),
    _d("decode_gemm_rows_first", "count", "input rows of the step's GEMM-class ops (linear / mm / addmm / matmul: "
       "the most common row count of the step) in the first steady step (timeline/decode_prefix.py)"),
    _d("decode_gemm_rows_last", "count", "... in the last steady step"),
    _d("decode_gemm_rows_growth_per_step", "count", "rows the GEMMs' inputs grow by per step (median; a decoder "
       "without a KV cache: the batch, one token per sequence per step; 0 with a cache)"),
    _d("decode_rows_growth_steps_pct", "%", "steps whose GEMM rows grew by exactly that amount"),
    _d("decode_recomputed_tokens_first", "count", "tokens each sequence runs through the model in the first steady "
       "step (rows / growth): the prefix re-run without a KV cache"),
    _d("decode_recomputed_tokens_last", "count", "... in the last steady step"),
    _d("decode_recompute_work_ratio", "ratio", "tokens run per generated token, averaged over the steps: the GEMM "
       "work against a decoder that keeps a KV cache and runs the new token only"),
    _d("decode_gpu_ms_per_step_first", "ms", "GPU kernel time of the first steady step"),
    _d("decode_gpu_ms_per_step_last", "ms", "GPU kernel time of the last steady step"),
    _d("decode_gpu_ms_per_prefix_token", "ms", "GPU kernel time each token of re-run prefix adds to a step "
       "(least-squares slope of kernel time per step against the tokens it re-runs)"),
]
