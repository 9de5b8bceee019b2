"""The vocabulary of memory facts: every fact memory analysis can emit, with unit and meaning,
and how to collect the input that yields it (shown when a rule is "not evaluated")."""
from __future__ import annotations

from ..facts import FactSpec
from ..shares import ALL_OWNERS, PEAK_MEMORY, Share, owner
from .owners import OWNERS

COLLECT_SNAPSHOT = ("record allocation history before the code to examine and dump it after the OOM (without an "
                    "OOM: after a few iterations, at the peak): "
                    "`torch.cuda.memory._record_memory_history(max_entries=100000)` ... "
                    "`torch.cuda.memory._dump_snapshot(\"snap.pickle\")`")
COLLECT_STATS = ("`json.dump(torch.cuda.memory_stats(), open(\"memory_stats.json\", \"w\"))` after the OOM, "
                 "or a snapshot: " + COLLECT_SNAPSHOT)

_SNAP = ("mem-snapshot",)
_ALL = ("mem-snapshot", "mem-stats", "mem-summary")
_STATS = ("mem-stats", "mem-summary")


def _spec(name, unit, meaning, sources=_SNAP, type="number", subject="run", share=None):
    return FactSpec(name, type, unit, meaning, subject, sources,
                    COLLECT_SNAPSHOT if sources == _SNAP else COLLECT_STATS, share)


_OWNER_MEANING = {
    "parameters": "model weights (allocated by module construction or .to())",
    "gradients": "gradients and other tensors made by backward that outlive it",
    "optimizer_state": "optimizer state (e.g. Adam exp_avg/exp_avg_sq from optimizer.step/_init_group)",
    "activations": "activations and saved tensors: made in forward and kept past it",
    "temporaries": "tensors freed before the phase (forward/backward/step) that made them ended",
    "unknown": "allocations with no telling stack (user code outside modules, or before the trace)",
}

CATALOGUE: list[FactSpec] = [
    _spec("num_ooms", "count", "out-of-memory events recorded", _ALL),
    _spec("num_alloc_retries", "count", "cudaMalloc retries after freeing the cache (allocator counter)", _STATS),
    _spec("peak_allocated_gib", "GiB", "peak bytes allocated to tensors", _ALL),
    _spec("peak_reserved_gib", "GiB", "peak bytes reserved by the caching allocator", _ALL),
    _spec("peak_reserved_free_gib", "GiB", "reserved but free bytes at the allocated peak (counters: peak reserved "
          "- peak allocated)", _ALL),
    _spec("profiler_steps_seen", "count", "torch.profiler steps (ProfilerStep# annotations) in the snapshot's history "
          "(a snapshot taken in the profiled process)"),
    _spec("profiler_step_growth_mib", "MiB", "allocated memory added per profiler step: the median change between "
          "consecutive ProfilerStep starts (a KV cache grown by torch.cat shows its bytes per token here)"),
    _spec("current_allocated_gib", "GiB", "bytes allocated when the counters were read (the snapshot was taken)", _ALL),
    _spec("current_reserved_gib", "GiB", "bytes reserved when the counters were read (the snapshot was taken)", _ALL),
    _spec("inactive_split_peak_gib", "GiB", "peak bytes in free pieces of split blocks (fragmentation proxy)",
          _STATS),
    _spec("peak_fragmentation_pct", "%", "at the peak: share of reserved-free memory outside the largest free "
          "block (0 = one contiguous free block)"),
    _spec("trace_entries", "count", "allocator trace entries on the analysed device"),
    _spec("oom_request_mib", "MiB", "size of the allocation that failed"),
    _spec("oom_allocated_gib", "GiB", "bytes allocated to tensors when the OOM happened"),
    _spec("oom_reserved_gib", "GiB", "bytes reserved by the allocator when the OOM happened"),
    _spec("oom_reserved_free_gib", "GiB", "free blocks in the reserved segments of the request's pool at the OOM "
          "(unsplittable remainders count as used, as the allocator counts them)"),
    _spec("oom_reserved_free_pct", "%", "oom_reserved_free_gib as a share of the memory limit",
       share=Share(PEAK_MEMORY, ("reserved_free",))),
    _spec("oom_largest_free_block_mib", "MiB", "largest free block in reserved segments of the request's pool"),
    _spec("oom_fragmentation_pct", "%", "share of reserved-free memory in blocks too small for the failing request"),
    _spec("oom_reserved_free_to_request_ratio", "ratio", "oom_reserved_free_gib / failing request bytes"),
    _spec("oom_device_free_gib", "GiB", "free device memory the driver reported at the OOM"),
    _spec("memory_limit_gib", "GiB", "estimated limit hit: under a per-process cap (device still had free "
          "memory) the most the allocator reserved up to the OOM, a lower bound of the cap; else reserved + device free"),
    _spec("memory_limit_is_cap", "", "the OOM hit a per-process cap (set_per_process_memory_fraction), "
          "not the device's memory", type="bool"),
    _spec("memory_limit_low_gib", "GiB", "the least the limit can be: under a cap, the most the allocator reserved "
          "up to the OOM (it held that much); else reserved + device free"),
    _spec("memory_limit_high_gib", "GiB", "the most the limit can be: under a cap, reserved at the OOM + the request "
          "(the allocator refused that sum); else reserved + device free"),
    _spec("memory_limit_said", "", "the limit in words, with how it was found (the cap's range, or the device's "
          "free memory at the OOM)", type="string"),
    _spec("oom_shortfall_gib", "GiB", "allocated + request - limit at the OOM: what must go for it to fit "
          "(an upper bound under a cap, whose exact size the snapshot does not record)"),
    _spec("oom_shortfall_pct", "%", "oom_shortfall_gib as a share of allocated memory at the OOM",
       share=Share(PEAK_MEMORY, ALL_OWNERS)),
    _spec("oom_request_share_pct", "%", "the failing request as a share of what was needed (live memory at the "
          "OOM + the request): near 100 when one allocation alone dwarfs everything live",
          share=Share(PEAK_MEMORY, ("request",))),
    _spec("oom_request_site", "", "allocation site (file:line in function, innermost user frame) of the failing "
          "request, from the OOM event's stack", type="string"),
    _spec("oom_request_op", "", "ATen operator that made the failing request (`aten::pow`), from the OOM event's "
          "C++ frames", type="string"),
    _spec("oom_request_owner", "", "owner the failing request would have had: temporaries when most earlier "
          "allocations from its stack were freed within their phase, else the durable owner of its phase",
          type="string"),
    _spec("oom_statement_gib", "GiB", "when the failing line runs for the first time: the request plus the live "
          "tensors that line made just before it (each op of the line once, e.g. the difference whose square failed; "
          "only when those are at least half the request)"),
    _spec("oom_statement_share_pct", "%", "oom_statement_gib as a share of needed_gib"),
    _spec("needed_gib", "GiB", "memory the program needed at the composition point: live bytes plus the failing "
          "request"),
    _spec("temporary_buffers_gib", "GiB", "short-lived tensors in needed_gib: live temporaries (freed within the "
          "phase that made them, or from a stack whose tensors mostly were) plus the failing request when it is one; "
          "on a line's first run, the failing statement (oom_statement_gib) counts as its working set"),
    _spec("temporary_buffers_share_pct", "%", "temporary_buffers_gib as a share of needed_gib"),
    _spec("temporary_site", "", "allocation site holding the most temporary bytes (the failing request included)",
          type="string"),
    _spec("temporary_site_op", "", "ATen operators of temporary_site's temporaries, most bytes first (up to 3)",
          type="string"),
    _spec("temporary_site_gib", "GiB", "temporary bytes from temporary_site (with the failing request when it is "
          "one)"),
    _spec("temporary_site_count", "count", "temporary tensors from temporary_site at the composition point"),
    _spec("temporary_site_share_pct", "%", "temporary_site_gib as a share of needed_gib",
       share=Share(PEAK_MEMORY, owner("temporaries"))),
    _spec("needed_without_temporary_site_gib", "GiB", "needed_gib minus temporary_site_gib: the peak once that "
          "temporary is chunked, computed in place or fused away"),
    _spec("expandable_segments", "", "allocator setting expandable_segments was on", type="bool"),
    _spec("composition_at", "", "when the owner composition was taken: oom | peak", type="string"),
    _spec("composition_allocated_gib", "GiB", "allocated bytes at the composition point"),
    _spec("kv_cache_gib", "GiB", "live memory in KV-cache tensors at the OOM (else the peak): blocks whose stack names a KV "
          "cache, or an even run of equal tensors allocated back to back outside any model call (memory/kv_cache.py)"),
    _spec("kv_cache_share_pct", "%", "the KV cache's share of live memory at the OOM (else the peak)",
       share=Share(PEAK_MEMORY, owner("unknown", "activations", "temporaries"))),
    _spec("kv_cache_limit_pct", "%", "the KV cache's size as a share of the memory limit at the OOM (memory_limit_gib)"),
    _spec("kv_cache_tensor_count", "count", "KV-cache tensors live (K and V per layer, or the blocks of a pool)"),
    _spec("kv_cache_tensor_mib", "MiB", "the most common size of one KV-cache tensor (layers x batch x heads x "
          "positions x head_dim x bytes over the tensors)"),
    _spec("kv_cache_equal_tensor_count", "count", "KV-cache tensors of that most common size"),
    _spec("kv_cache_site", "", "allocation site holding most KV-cache bytes", type="string"),
    _spec("kv_cache_evidence", "", "how the KV cache was recognised: frames (a frame names it) | shape (equal "
          "tensors preallocated together)", type="string"),
    _spec("dominant_owner", "", "owner holding the most live memory: " + " | ".join(OWNERS), type="string"),
    _spec("dominant_owner_gib", "GiB", "live memory of the dominant owner"),
    _spec("dominant_owner_share_pct", "%", "dominant owner's share of live memory"),
    _spec("iterations_seen", "count", "iterations seen in the trace (optimizer steps or backward passes; "
          "model calls when neither runs)"),
    _spec("iteration_kind", "", "what an iteration is in this trace: optimizer step | backward pass | model call "
          "(model call: no backward ran)", type="string"),
    _spec("iteration_growth_mib_per_iter", "MiB", "slope of allocated memory at iteration starts"),
    _spec("iteration_growth_r2", "ratio", "how linear that growth is (R^2 of the fit, 0..1)"),
    _spec("leak_site", "", "where the tensors that survive iterations are kept: the user line that called the "
          "model for tensors made inside it (its outputs and their graphs), else the allocation site",
          type="string"),
    _spec("leak_alloc_site", "", "allocation site of most of the leaked bytes (innermost user frame)",
          type="string"),
    _spec("leak_owner", "", "owner class of the leak site's allocations", type="string"),
    _spec("leak_iterations", "count", "distinct earlier iterations whose allocations kept at leak_site are still live"),
    _spec("leak_gib", "GiB", "live bytes made in earlier iterations and kept at leak_site, at the composition point"),
    _spec("leak_share_pct", "%", "leak_gib as a share of live memory", share=Share(PEAK_MEMORY, by="leak_owner")),
    _spec("leak_mib_per_iter", "MiB", "bytes leak_site keeps per iteration"),
    _spec("allocated_without_leak_gib", "GiB", "live memory minus leak_gib: the point a fix returns to"),
    _spec("site_gib", "GiB", "live bytes allocated at this site", subject="site"),
    _spec("site_share_pct", "%", "this site's share of live memory", subject="site"),
    _spec("site_alloc_count", "count", "live allocations made at this site", subject="site"),
    _spec("site_owner", "", "owner class of most of this site's bytes", type="string", subject="site"),
]
for _o in OWNERS:
    CATALOGUE += [
        _spec(f"{_o}_gib", "GiB", f"live memory of {_o}: {_OWNER_MEANING[_o]}"),
        _spec(f"{_o}_share_pct", "%", f"{_o}' share of live memory at the composition point",
              share=Share(PEAK_MEMORY, owner(_o))),
        _spec(f"allocated_without_{_o}_gib", "GiB", f"live memory minus {_o}: the floor a fix of {_o} reaches"),
    ]
