"""The vocabulary of timeline facts: every fact timeline analysis can emit, with unit and meaning,
and how to collect the input that yields it (shown when a rule is "not evaluated")."""
from __future__ import annotations

from ..facts import FactSpec
from ..idle_classes import IDLE_CLASSES, IDLE_PARTS, PEER_WAIT
from ..kernel_categories import BUSY_CATEGORIES, KERNEL_CATEGORIES, MEMORY_BOUND_CATEGORIES
from ..shares import GPU_TIME, STEP_TIME, TRACE_TIME, Share, busy, gpu, idle
from ..program_kinds import ATTENTION_KINDS, FRAMEWORKS, GPU_ARCHS
from .decode_catalogue import CATALOGUE as DECODE_CATALOGUE
from .roofline_catalogue import CATALOGUE as ROOFLINE_CATALOGUE

SOURCES = ("nsys-sqlite", "nsys-rep", "torch-trace")
TIMELINE = ("profile a few steady steps: `nsys profile -t cuda,nvtx,osrt -o run python train.py` "
            "(then `nsys export --type sqlite run.nsys-rep`), or torch.profiler with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and `prof.export_chrome_trace('trace.json')`")
STEPS = ("mark steps: call `prof.step()` each iteration under torch.profiler, or wrap each iteration in "
         "`torch.cuda.nvtx.range(f'step_{i}')` and profile with `nsys profile -t cuda,nvtx`")
PHASES = ("wrap the phases in NVTX ranges named data / forward / backward / optimizer "
          "(`with torch.cuda.nvtx.range('forward'):`) and profile with `nsys profile -t cuda,nvtx`")
HOST = ("profile the host side too: torch.profiler with ProfilerActivity.CPU (record_shapes=True), or "
        "`nsys profile -t cuda,nvtx,osrt` with NVTX ranges around data loading")
OPTIMIZER = ("profile with torch.profiler (it marks Optimizer.step#...), or wrap `opt.step()` in "
             "`torch.cuda.nvtx.range('optimizer')` under `nsys profile -t cuda,nvtx`")
GIL = ("record the host threads: torch.profiler with `with_stack=True` (the other threads' Python frames), or "
       "`nsys profile -t cuda,nvtx,osrt --sample=process-tree --cpuctxsw=process-tree` (the launching threads' waits for "
       "the GIL and the thread sampled meanwhile)")
STAGING = ("record the host's CPU samples: `nsys profile -t cuda,nvtx,osrt --sample=process-tree "
           "--cpuctxsw=process-tree`, or a PyTorch trace (its operators name the copies)")
TORCH_OPS = ("a PyTorch trace (torch.profiler with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]): its "
             "operator and compile ranges; an Nsight Systems export does not carry them")
RANKS = ("profile every rank of the job (torch.profiler on each rank writes one trace per rank; or "
         "`nsys profile -o rank%q{RANK}`) and pass all rank files together")


def _n(name, unit, meaning, collect=TIMELINE, subject="run", share=None):
    return FactSpec(name, "number", unit, meaning, subject, SOURCES, collect, share)


def _s(name, meaning, collect=TIMELINE, subject="run"):
    return FactSpec(name, "string", "", meaning, subject, SOURCES, collect)


def _b(name, meaning, collect=TIMELINE, subject="run"):
    return FactSpec(name, "bool", "", meaning, subject, SOURCES, collect)


CATALOGUE: list[FactSpec] = [
    # steps
    _s("step_detection", "how steps were found: profiler_step | nvtx | optimizer | kernel_pattern | none", STEPS),
    _n("step_count", "count", "steady-state steps measured (warm-up step excluded)", STEPS),
    _n("step_time_ms_mean", "ms", "mean steady-state step time (host range and the GPU work it launched)", STEPS),
    _n("step_time_ms_p50", "ms", "median steady-state step time", STEPS),
    _n("step_time_ms_p95", "ms", "95th percentile steady-state step time", STEPS),
    _n("phase_data_ms", "ms", "host time per step in annotated data loading", PHASES),
    _n("phase_forward_ms", "ms", "host time per step in the annotated forward pass", PHASES),
    _n("phase_backward_ms", "ms", "host time per step in the annotated backward pass (or autograd functions)", PHASES),
    _n("phase_optimizer_ms", "ms", "host time per step in the annotated optimizer step", PHASES),
    _s("workload_kind", "training (backward or optimizer work seen) or inference"),
    # utilization and idle classes
    _n("gpu_busy_pct", "%", "share of steady step time the GPU runs kernels/copies (NCCL kernels excluded)",
       share=Share(STEP_TIME, busy(*BUSY_CATEGORIES))),
    _n("gpu_idle_pct", "%", "share of steady step time with no compute or copy on the GPU",
       share=Share(STEP_TIME, idle(*IDLE_PARTS))),
    _n("idle_data_pct", "%", "share of step time the GPU idles while the host loads/preprocesses data", HOST,
       share=Share(STEP_TIME, idle("data"))),
    _n("idle_sync_pct", "%", "share of step time the GPU idles because the host blocked in a host-device sync", HOST,
       share=Share(STEP_TIME, idle("sync"))),
    _n("idle_host_pct", "%", "share of step time the GPU idles while the host computes something that is not input: "
       "inside an optimizer step range without CUDA calls (an optimizer on CPU tensors, ZeRO-offload style), or "
       "on results it read back (post-processing, metrics); idle_host_optimizer_pct + idle_host_after_sync_pct", HOST,
       share=Share(STEP_TIME, idle("host"))),
    _n("idle_host_optimizer_pct", "%", "the host-class idle inside optimizer step ranges (the host runs the "
       "optimizer on CPU tensors)", HOST, share=Share(STEP_TIME, idle("host"))),
    _n("idle_host_after_sync_pct", "%", "the host-class idle in gaps that began as a sync returned, with (almost) no "
       "CUDA calls after it and no next input copied in at their end: the host computes on what it read back "
       "(NumPy post-processing or metrics, CPU operators on copied-back tensors)", HOST,
       share=Share(STEP_TIME, idle("host"))),
    _n("idle_sync_quiet_pct", "%", "the sync-class idle in long gaps that began at a sync the host did not stay in: it "
       "made (almost) no CUDA calls afterwards and nothing recorded shows it computing (no op tree, no stacks): it "
       "computed on what it read back or waited on something else (measured only where it is most of the sync-class "
       "idle)", HOST),
    _s("host_gap_ranges", "the host ranges (optimizer step, CPU ops) covering the host-class idle gaps most, "
       "with their ms per step (only when the first covers most of those gaps)", HOST),
    _s("host_gap_python", "the innermost Python function (with_stack traces) spanning most of the host-class idle "
       "gaps, with its ms per step", HOST),
    _s("host_gap_functions", "the functions the launching thread was sampled in during the host-class idle gaps "
       "(leaf frames of the CPU samples' call chains, module in brackets) with their share of those samples (an "
       "Nsight Systems export with CPU samples)", HOST),
    _s("host_wait_calls", "the blocking OS calls (poll, futex, read ...) the launching thread sat in during the "
       "sync-class idle after its syncs returned, ms per step and share of that idle (an Nsight Systems export "
       "with OS runtime tracing)", HOST),
    _s("host_side_collect", "how to record what the host does after a sync returns, given when the export has no "
       "CPU samples or scheduling and part of that idle is unexplained", HOST),
    _n("setup_pct", "%", "share of the trace (first CUDA call or GPU activity to the end) spent in one-time start-up "
       "work: context creation, lazy module loading, first-call costs, compilation (timeline/setup.py)",
       share=Share(TRACE_TIME, ("setup",))),
    _n("setup_ms", "ms", "host time in one-time start-up work"),
    _n("trace_span_ms", "ms", "from the first CUDA call or GPU activity to the last event of the trace"),
    _s("setup_calls", "the start-up calls that took the most time, with their time and count"),
    _n("alloc_calls_per_step", "count", "device malloc/free and pinned-host allocation calls per steady step"),
    _n("alloc_ms_per_step", "ms", "host time per steady step in device malloc/free calls"),
    _n("alloc_steps_pct", "%", "share of the steady steps in which device malloc/free calls recur (start-up calls "
       "such as the context-creating cudaFree(0) left out)"),
    _n("graph_kernel_pct", "%", "share of steady kernel time launched by graph replays (cudaGraphLaunch / hipGraphLaunch)"),
    _s("tensor_core_dtypes", "what the GPU's tensor cores take, from its compute capability: tf32,bf16,fp16 "
       "(8.0+) | fp16 (Volta/Turing 7.x) | none | unknown (no device properties and no generation-specific "
       "kernel names: gpu_arch unknown)"),
    # the program (timeline/program.py): what the advice is written for
    _s("framework", "who wrote the GPU work: " + " | ".join(FRAMEWORKS) + " (from Python files, operators, "
       "annotations, kernel names and the API the host calls)"),
    _s("framework_evidence", "what decided `framework`"),
    _s("attention_kind", "where the trace shows attention: " + " | ".join(ATTENTION_KINDS) + " (triangular masks, "
       "causal-mask code, KV caches, encoder or decoder modules, mask ops around the softmax)"),
    _s("attention_evidence", "what decided `attention_kind`"),
    _s("gpu_arch", "the GPU generation: " + " | ".join(GPU_ARCHS) + " (device properties, else the kernel names "
       "built for one generation: a lower bound)"),
    _s("gpu_arch_evidence", "what decided `gpu_arch`"),
    _s("data_gap_ranges", "the host ranges (DataLoader __next__, NVTX data, CPU ops) covering the data-class idle gaps "
       "most, with their ms per step", HOST),
    _s("data_gap_python", "the innermost Python function (with_stack traces) spanning most of the data-class idle "
       "gaps, with its ms per step"),
    _n("data_gaps_ending_in_input_copy", "count", "data-class idle gaps per step that end with the next input's "
       "host-to-device copy"),
    _n("input_copy_mb", "MB", "per step, the host-to-device copies that end data-class idle gaps"),
    _s("sync_calls", "per step, the synchronizing calls that blocked the host longest (name, calls, ms)"),
    _s("alloc_calls", "per step, the allocation calls that took the most time (name, calls, ms)"),
    _n("idle_alloc_pct", "%", "share of step time the GPU idles while the host allocates or frees device memory "
       "(cudaMalloc/cudaFree, hipMalloc/hipFree: allocator churn)", HOST, share=Share(STEP_TIME, idle("alloc"))),
    _n("idle_launch_pct", "%", "share of step time in short GPU gaps while the host launches work (launch overhead)",
       share=Share(STEP_TIME, idle("launch"))),
    _n("idle_comm_pct", "%", "share of step time the GPU only waits in communication (NCCL) or for a collective; "
       "in a multi-rank run only the collectives' transfer (waiting for peers is idle_peer_wait_pct)",
       share=Share(STEP_TIME, idle("communication"))),
    _n("idle_unexplained_pct", "%", "share of step time the GPU idles with no recognized host activity", HOST,
       share=Share(STEP_TIME, idle("unexplained"))),
    _n("recompiles_per_step", "count", "torch.compile compiles (Dynamo `_compile.compile_inner`) that start inside the "
       "steady steps, per step: a recompile for each new shape or specialised constant (a PyTorch trace)", TORCH_OPS),
    _n("compile_ms_per_step", "ms", "host time inside torch.compile's compile ranges (Dynamo, AOTAutograd, Inductor) "
       "in the steady steps, per step", TORCH_OPS),
    _n("compile_step_pct", "%", "share of the steady steps' time the host spends compiling (torch.compile ranges)", TORCH_OPS,
       share=Share(STEP_TIME, idle("unexplained", "launch"))),
    _n("idle_compile_pct", "%", "share of the steady steps' time the GPU idles while the host compiles (torch.compile "
       "ranges over unexplained idle gaps)", HOST, share=Share(STEP_TIME, idle("unexplained"))),
    _n("gil_idle_pct", "%", "share of the steady steps' time the GPU idles while its launching threads wait for "
       "Python's interpreter lock (an export: their waits that end at the switch interval; a PyTorch trace with stacks: "
       "the unexplained idle covered by the Python frames of a thread that launches nothing)", GIL,
       share=Share(STEP_TIME, idle("unexplained", "launch"))),
    _n("gil_waits_per_step", "count", "the launching threads' condition-variable / futex waits of at least a millisecond "
       "per step, when enough of them end at the interpreter's switch interval (an export with OS runtime calls)", GIL),
    _n("gil_wait_ms_per_step", "ms", "the time of those waits per step", GIL),
    _n("gil_waits_at_interval_pct", "%", "the share of those waits that end at the switch interval (5 ms): timed out "
       "waiting for the GIL", GIL),
    _s("gil_wait_call", "the OS call the launching threads wait for the GIL in (pthread_cond_timedwait, futex)", GIL),
    _s("gil_holder", "the thread that runs while the launching threads wait: its name and share of the other threads' "
       "CPU samples in those waits (an export), or its innermost Python frame (a PyTorch trace with stacks)", GIL),
    _n("conv_autotune_syncs_per_step", "count", "device synchronizations inside convolution operators "
       "(aten::cudnn_convolution, aten::convolution_backward) per steady step: cuDNN timing candidate algorithms "
       "for a shape it has not seen (cudnn.benchmark = True)", TORCH_OPS),
    _n("conv_autotune_calls_per_step", "count", "convolution calls per steady step that synchronized (autotuned)", TORCH_OPS),
    _n("conv_autotune_ms_per_step", "ms", "host time inside the convolution calls that synchronized, per step", TORCH_OPS),
    _n("conv_autotune_step_pct", "%", "share of the steady steps spent inside convolution calls that synchronized "
       "(cuDNN's algorithm trials)", TORCH_OPS,
       share=Share(STEP_TIME, idle("launch", "sync", "alloc", "unexplained"))),
    _n("idle_staging_copy_pct", "%", "share of the steady steps the GPU idles in gaps that end in a host-to-device copy "
       "while the launching thread, sampled, sits in the C library outside data ranges: it copies data already in host "
       "memory into a staging buffer for the upload (CuPy `asarray` of a NumPy array), nothing is prepared (an export "
       "with CPU samples)", STAGING, share=Share(STEP_TIME, idle("unexplained"))),
    _n("staged_copy_mb_per_step", "MB", "the host-to-device copies that end those gaps, MB per step", STAGING),
    _s("data_gap_unseen", "set when the data-class idle of an export is read only from gaps ending in a host-to-device "
       "copy, with no NVTX data range and no CPU samples to show the host preparing anything: the collect line that "
       "tells preparing input from copying data already in host memory", HOST),
    _s("compile_ids", "the Dynamo compile ids (frame/compile number) of the compiles inside the steady steps: "
       "which compiled frame recompiles, and how often", TORCH_OPS),
    _s("idle_unexplained_contents", "what the trace shows inside the unexplained idle gaps, each with its share of "
       "that idle: the host ranges and operators covering them, the Python files whose frames (launching nothing) "
       "cover them, the launching thread's blocking OS calls and CPU samples there (an Nsight Systems export)", HOST),
    _s("idle_top_class", f"the idle class with the most time: {' | '.join(IDLE_CLASSES + ('none',))}"),
    _n("comm_kernel_ms_per_step", "ms", "time per step in NCCL kernels (waiting for peers plus transfer)"),
    _n("comm_transfer_ms_per_step", "ms", "NCCL transfer time per step: for each collective, its shortest NCCL "
       "kernel over the ranks (the time all ranks spend once everyone has arrived), summed; mean over ranks", RANKS),
    _n("comm_peer_wait_ms_per_step", "ms", "NCCL time per step beyond the transfer: ranks waiting in collectives for "
       "a peer to arrive; mean over ranks", RANKS),
    _n("idle_peer_wait_pct", "%", "share of step time the GPU of the idle-breakdown rank idles in NCCL kernels "
       "waiting for a peer to arrive (not counted in idle_comm_pct)", RANKS, share=Share(STEP_TIME, idle(PEER_WAIT))),
    _s("idle_breakdown_rank", "in a multi-rank run, the rank whose busy/idle breakdown the run-level gpu_busy_pct, "
       "idle_*_pct and idle_top_class report: the one arriving last at the collectives", RANKS),
    # launches
    _n("kernels_per_step", "count", "kernels launched per steady step"),
    _n("kernel_median_us", "us", "median kernel duration"),
    _n("short_kernel_pct", "%", "share of kernels shorter than 10 us"),
    _n("kernel_time_ms_per_step", "ms", "summed kernel time per step"),
    _n("launch_api_us_per_kernel", "us", "host time in the launch API call per kernel"),
    # what the code controls, apart from what the machine does (step_work.py; compare's regression gate)
    _n("gpu_work_ms_per_step", "ms", "GPU busy time (kernels, copies) per steady step, median over the steps"),
    _n("gpu_work_spread_pct", "%", "standard error of gpu_work_ms_per_step over the steady steps, % of it"),
    _n("host_work_ms_per_step", "ms", "the host's own work per steady step: its step range less the time it waited "
       "for the GPU (syncs, blocking copies, frees, launches held by a full queue), median over the steps"),
    _n("host_work_spread_pct", "%", "standard error of host_work_ms_per_step over the steady steps, % of it"),
    # syncs and copies
    _n("syncs_per_step", "count", "host-device synchronizations per step (stream/device syncs, blocking copies, reads of a result)"),
    _n("sync_blocked_ms_per_step", "ms", "host time per step blocked in synchronizations"),
    _n("sync_blocked_pct", "%", "share of step time the host is blocked in synchronizations"),
    _n("kernels_per_sync", "count", "kernels launched between two synchronizations, on average"),
    _n("memcpy_mb_per_step", "MB", "bytes copied per step (all directions)"),
    _n("memcpy_per_step", "count", "copies per step"),
    _n("dtoh_memcpy_per_step", "count", "device-to-host copies per step"),
    _n("pageable_memcpy_bytes_pct", "%", "share of copied bytes that went through pageable (unpinned) host memory"),
    _n("pageable_memcpy_ms_per_step", "ms", "time per step in copies from/to pageable memory (host call or copy)"),
    _n("pageable_memcpy_pct", "%", "share of step time spent in pageable copies",
       share=Share(STEP_TIME, busy("copy") + idle("data", "sync"))),
    # kernel categories
    *[_n(f"kernel_{c}_pct", "%", f"share of GPU activity time in {c} kernels", share=Share(GPU_TIME, gpu(c)))
      for c in KERNEL_CATEGORIES],
    _s("top_kernel_category", "kernel category with the most GPU time"),
    _s("top_kernel_name", "base name of the kernel with the most GPU time"),
    _n("top_kernel_pct", "%", "share of GPU activity time in the top kernel",
       share=Share(STEP_TIME, by="top_kernel_category", of_gpu_time=True)),
    _s("ncu_kernel_regex", "regex matching the top kernels' base names, for `ncu -k regex:...`"),
    _n("ncu_launch_skip", "count", "`ncu --launch-skip` for ncu_kernel_regex: its launches before the first steady step "
       "(at least one step's worth)"),
    _n("ncu_launch_count", "count", "`ncu --launch-count` for ncu_kernel_regex: its launches in one steady step"),
    # tensor cores, attention, memory-bound work
    _n("gemm_time_pct", "%", "share of GPU activity time in GEMM/convolution kernels"),
    _n("gemm_no_tensor_core_pct", "%", "share of GEMM time in kernels without tensor cores (SGEMM / FFMA)"),
    _n("gemm_no_tensor_core_step_pct", "%", "share of step time in GEMMs without tensor cores",
       share=Share(STEP_TIME, busy("gemm"))),
    _s("top_no_tensor_core_kernel", "the GEMM without tensor cores that takes the most time"),
    FactSpec("anomaly_nan_checks_per_step", "number", "count", "NaN checks of autograd's anomaly mode per steady step "
             "(`aten::_is_any_true` inside `autograd::engine::evaluate_function` ranges, each followed by a read-back: "
             "`torch.autograd.set_detect_anomaly(True)` left on; timeline/debug_apis.py)", "run", ("torch-trace",),
             "profile with torch.profiler, activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] (the aten op ranges "
             "come with the CPU activity)"),
    FactSpec("anomaly_check_sync_pct", "number", "%", "those NaN checks as a share of the step's host syncs (each "
             "check reads its result back)", "run", ("torch-trace",),
             "profile with torch.profiler, activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] (the aten op ranges "
             "inside backward show anomaly mode's NaN checks; an Nsight Systems export has no op ranges)"),
    _n("gemm_unaligned_kernel_pct", "%", "share of GPU kernel time in GEMM kernels whose names say they were built for "
       "operands aligned to fewer than 16 bytes (`align1`, `align2` in bf16/fp16, `align1`-`align2` in fp32): cuBLAS's "
       "fallback when a dimension is not a multiple of 8 elements (a vocabulary of 50257)"),
    _n("gemm_unaligned_step_pct", "%", "share of step time in those narrow-alignment GEMM kernels",
       share=Share(STEP_TIME, busy("gemm"))),
    _n("gemm_unaligned_ms_per_step", "ms", "time per steady step in those narrow-alignment GEMM kernels"),
    _n("gemm_unaligned_kernel_count", "count", "narrow-alignment GEMM launches per steady step"),
    _s("gemm_unaligned_top_kernel", "the narrow-alignment GEMM kernel that takes the most time"),
    _n("gemm_unaligned_top_kernel_pct", "%", "its share of GPU kernel time"),
    _s("gemm_unaligned_alignment", "the alignment its name declares, in elements and bytes"),
    _n("fused_attention_pct", "%", "share of GPU activity time in fused attention kernels (flash / cuDNN SDPA / mem-efficient)",
       share=Share(GPU_TIME, gpu("attention"))),
    _n("unfused_attention_blocks_per_step", "count", "softmax kernels sandwiched between GEMMs (hand-written attention) per step"),
    _n("unfused_attention_pct", "%", "share of step time in hand-written attention (score GEMM through value GEMM)",
       share=Share(STEP_TIME, busy("gemm", "softmax", "elementwise", "copy", "reduction", "normalization", "other"))),
    _n("unfused_attention_kernel_pct", "%", "share of GPU activity time in hand-written attention"),
    _s("unfused_attention_evidence", "how the hand-written attention blocks were found: op tree (a softmax op between "
       "two batched matmul ops on one thread) | kernel order (a softmax kernel between two GEMMs on one stream)"),
    _n("memory_bound_kernel_pct", "%", "share of GPU activity time in bandwidth-bound kernels (elementwise, copy, norm, softmax, reduction)"),
    _n("memory_bound_step_pct", "%", "share of step time in bandwidth-bound kernels",
       share=Share(STEP_TIME, busy(*MEMORY_BOUND_CATEGORIES))),
    # optimizer
    _n("optimizer_kernels_per_step", "count", "optimizer kernels per step", OPTIMIZER),
    _n("optimizer_single_tensor_pct", "%", "share of optimizer kernels that update one tensor each (for-loop implementation)", OPTIMIZER),
    _s("optimizer_style", "single_tensor | foreach | fused, from the optimizer's kernels", OPTIMIZER),
    _n("optimizer_gpu_pct", "%", "share of step time in optimizer kernels", OPTIMIZER,
       share=Share(STEP_TIME, busy("optimizer"))),
    _n("optimizer_step_pct", "%", "share of step time the host spends in the optimizer step", OPTIMIZER,
       share=Share(STEP_TIME, busy("optimizer") + idle("launch"))),
    # ranks
    _n("world_size", "count", "ranks analysed together", RANKS),
    _s("straggler_rank", "the rank that arrives last at collectives (waits least in NCCL)", RANKS),
    _n("straggler_cost_pct", "%", "extra time per step the other ranks wait in collectives for the straggler, % of step", RANKS,
       share=Share(STEP_TIME, by="straggler_rank")),
    _n("rank_step_time_spread_pct", "%", "slowest minus fastest rank step time, % of mean step time", RANKS),
    _n("max_rank_comm_wait_pct", "%", "largest per-rank share of step time in NCCL kernels", RANKS),
    _n("rank_step_time_ms", "ms", "this rank's mean step time", RANKS, "rank"),
    _n("rank_gpu_busy_pct", "%", "this rank's GPU busy share (NCCL excluded)", RANKS, "rank"),
    _n("rank_comm_wait_ms", "ms", "this rank's time per step in NCCL kernels", RANKS, "rank"),
    _n("rank_comm_wait_pct", "%", "this rank's share of step time in NCCL kernels", RANKS, "rank"),
    _n("rank_extra_wait_pct", "%", "this rank's NCCL time beyond the straggler's, % of step", RANKS, "rank"),
    _b("rank_is_straggler", "this rank arrives last at collectives", RANKS, "rank"),
    _s("rank_idle_top_class", "this rank's dominant GPU idle class", RANKS, "rank"),
    _n("rank_idle_top_pct", "%", "share of this rank's step time in its dominant idle class", RANKS, "rank"),
    _n("rank_straggler_cost_pct", "%", "extra time per step the other ranks wait for this (straggler) rank, % of step", RANKS, "rank",
       share=Share(STEP_TIME, by="straggler_rank")),
    _n("rank_straggler_cost_ms", "ms", "extra time per step the other ranks wait for this (straggler) rank", RANKS, "rank"),
    _n("rank_comm_transfer_ms", "ms", "this rank's NCCL transfer time per step (each collective's shortest "
       "kernel over the ranks)", RANKS, "rank"),
    _n("rank_peer_wait_ms", "ms", "this rank's NCCL time per step beyond the transfer: waiting for peers", RANKS, "rank"),
    _n("rank_idle_peer_wait_pct", "%", "share of this rank's step time its GPU idles in NCCL waiting for peers",
       RANKS, "rank"),
    _n("rank_own_work_pct", "%", "this rank's own work, % of step: GPU busy (NCCL excluded) plus GPU idle while its host "
       "does something other than launching or communicating (data, sync, unexplained idle)", RANKS, "rank"),
    _n("rank_straggler_excess_work_pct", "%", "the straggler's rank_own_work_pct minus the other ranks' mean: the work "
       "it does that they do not; near 0 when all ranks do the same work and the straggler only issues it later "
       "(launch gaps), as in a launch-bound run", RANKS, "rank"),
]

CATALOGUE += DECODE_CATALOGUE  # device memory over the steps, op distribution (decode_catalogue.py)
CATALOGUE += ROOFLINE_CATALOGUE  # per-op roofline (roofline_catalogue.py)
SPECS: dict[str, FactSpec] = {s.name: s for s in CATALOGUE}
