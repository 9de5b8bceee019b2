"""Memory analysis: snapshot / allocator counters -> OOM facts (pure functions, nothing rendered).

From a snapshot the allocator trace is replayed: allocated and reserved bytes after every event
(baselined on the final segments so a truncated history still adds up), the live blocks and free
gaps at the peak and at the OOM, who owns the live memory (from allocation stacks and lifetimes, and
for tensors the OOM caught alive, their stack's history), the short-lived temporaries by site and op
(with the failing request), the top allocation sites, and the memory made in earlier iterations
that is still alive (a leak; iterations are optimizer steps, backward passes or model calls).
Charts: `memory_composition` [{owner, bytes, share_pct}], `memory_timeline` [{t_ms,
allocated_bytes, reserved_bytes}] (<= 500 points), `top_sites` [{site, bytes, count, owner}].
The fact catalogue is in catalogue.py; owner, phase and site of a stack in owners.py;
the trace replay in replay.py; owners by lifetime and iteration starts in lifetimes.py.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..facts import AnalysisResult, Fact, Subject
from ..identity import UNIX_NS_MAX, UNIX_NS_MIN, program_identity
from .catalogue import CATALOGUE, COLLECT_SNAPSHOT
from .lifetimes import TEMP_PHASES, AllocationOwners, iteration_bounds
from .kv_cache import kv_cache_facts
from .owners import DURABLE_OWNER, OWNERS, describe_call, describe_stack, phase_of_stack, site_of_stack
from .replay import SMALL_SEGMENT, AllocatorReplay

__all__ = ["memory_analysis", "analyze_snapshot", "analyze_stats", "CATALOGUE", "OWNERS", "phase_of_stack",
           "site_of_stack"]

GIB, MIB = float(1 << 30), float(1 << 20)
TIMELINE_POINTS = 500
TOP_SITES = 10


def _timeline(rep):
    n = rep.n
    t0 = int(rep.tr.time_us[0])
    if n <= TIMELINE_POINTS:
        pick = np.arange(n)
    else:
        edges = np.linspace(0, n, TIMELINE_POINTS + 1).astype(np.int64)
        pick = np.array([lo + int(np.argmax(rep.allocated[lo:hi])) for lo, hi in zip(edges[:-1], edges[1:])])
    return [{"t_ms": round((int(rep.tr.time_us[i]) - t0) / 1000.0, 3), "allocated_bytes": int(rep.allocated[i]),
             "reserved_bytes": int(rep.reserved[i])} for i in pick.tolist()]


class _FactSink:
    def __init__(self, source):
        self.source, self.facts = source, []

    def add(self, name, value, unit, subject=None):
        if isinstance(value, float) and not math.isfinite(value):
            return  # omit rather than emit NaN/inf
        if isinstance(value, (np.integer, np.floating)):
            value = value.item()
        self.facts.append(Fact(name, value, unit, self.source, subject))


def snapshot_identity(snap) -> dict:
    """What places a snapshot among the run's other inputs: the span of its allocation history on the
    Unix clock, the Python files of its frames, the memory it holds (diagnoser.runs reads it)."""
    out: dict = {}
    # a trace entry's time_us is on the Unix clock (PyTorch >= 2.1); anything outside 2000..2100 is no time
    lo, hi = UNIX_NS_MIN // 1000, UNIX_NS_MAX // 1000
    times = [t.time_us[(t.time_us > lo) & (t.time_us < hi)] for t in snap.traces.values()]
    times = [t for t in times if t.size]
    if times:
        out["window_epoch_ns"] = (int(min(t.min() for t in times)) * 1000, int(max(t.max() for t in times)) * 1000)
    # the outermost Python frame of each stack (innermost first) is the program's `<module>`
    outermost = [next((f for f in reversed(st) if f.filename.endswith(".py")), None) for st in snap.stacks]
    out.update(program_identity((f.filename for st in snap.stacks for f in st),
                                ((f.filename, f.name) for f in outermost if f is not None)))
    out["reserved_bytes"] = sum(s.total_size for s in snap.segments)
    return out


def analyze_snapshot(snap) -> AnalysisResult:
    """Facts and charts for one CUDA memory snapshot (see module docstring)."""
    out = AnalysisResult(identity=snapshot_identity(snap))
    sink = _FactSink(snap.source)
    if snap.segments:  # the allocator's state when the snapshot was taken
        sink.add("current_allocated_gib", sum(s.allocated_size for s in snap.segments) / GIB, "GiB")
        sink.add("current_reserved_gib", sum(s.total_size for s in snap.segments) / GIB, "GiB")
    settings = snap.allocator_settings
    if "expandable_segments" in settings:
        sink.add("expandable_segments", bool(settings["expandable_segments"]), "")
    if not snap.traces:
        out.notes.append(f"{snap.path}: no allocation history in the snapshot; " + COLLECT_SNAPSHOT)
        out.facts = sink.facts
        return out
    device = snap.ooms[-1].device if snap.ooms else max(snap.traces, key=lambda d: len(snap.traces[d]))
    rep = AllocatorReplay(snap, device)
    ooms = [o for o in snap.ooms if o.device == device]
    oom = ooms[-1] if ooms else None  # the last one raised; earlier ones were caught (e.g. cuDNN workspace tries)
    cut = oom.index if oom else rep.n
    own = AllocationOwners(rep, snap.stacks, cut)
    upto = cut if oom else rep.n
    peak = int(np.argmax(rep.allocated[:max(upto, 1)]))
    sink.add("num_ooms", len(ooms), "count")
    sink.add("trace_entries", rep.n, "count")
    sink.add("peak_allocated_gib", rep.allocated[peak] / GIB, "GiB")
    sink.add("peak_reserved_gib", float(rep.reserved[:max(upto, 1)].max()) / GIB, "GiB")
    gaps = rep.free_blocks_at(peak, True)
    sink.add("peak_reserved_free_gib", float(gaps.sum() + rep.free_blocks_at(peak, False).sum()) / GIB, "GiB")
    if gaps.sum() > 0:
        sink.add("peak_fragmentation_pct", 100.0 * (1 - gaps.max() / gaps.sum()), "%")
    request = None
    if oom:
        _oom_facts(sink, rep, oom)
        request = _request_facts(sink, rep, snap, oom, own)
    ref = oom.index if oom else peak
    sink.add("composition_at", "oom" if oom else "peak", "")
    total = _composition(sink, out, rep, snap, ref, own.owners, own.sites)
    live, _older = rep.live_at(ref)
    kv_cache_facts(sink, rep, snap.stacks, own, live, np.searchsorted(rep.alloc_idx, live).tolist(), total)
    if oom and total + oom.size > 0:  # the failing request against everything live (with or without its frames)
        sink.add("oom_request_share_pct", 100.0 * oom.size / (total + oom.size), "%")
    _temporaries(sink, rep, snap, ref, own, total, request)
    bounds, kind = iteration_bounds(snap, device, rep, own.phases, own.call_starts)
    if len(bounds):
        sink.add("iteration_kind", kind, "")
    _growth(sink, rep, snap, ref, bounds, own)
    _profiler_step_growth(sink, rep, snap, device)
    out.charts["memory_timeline"] = _timeline(rep)
    if rep.orphans:
        pre = sum(o[2] for o in rep.orphans) / GIB
        out.notes.append(f"the trace starts after {pre:.2f} GiB were already allocated; those blocks count as "
                         "'unknown' (raise max_entries in _record_memory_history to see their owners)")
    out.facts = sink.facts
    return out


def _request_facts(sink, rep, snap, oom, own):
    """Site, op and would-be owner of the failing request; (site, op, size, owner, statement) for
    _temporaries, where statement lists the live tensors of a first-use failing statement (else None)."""
    s = int(rep.tr.stack[oom.index])
    if s < 0:
        return None
    phase, state, site = describe_stack(snap.stacks[s])
    _keep, _call, op = describe_call(snap.stacks[s])
    owner = "temporaries" if phase in TEMP_PHASES and own.temporary_by_history(s) else DURABLE_OWNER[phase]
    sink.add("oom_request_site", site, "")
    if op:
        sink.add("oom_request_op", op, "")
    sink.add("oom_request_owner", owner, "")
    statement = None
    if phase != "parameters" and not (phase == "optimizer" and state):
        statement = own.failing_statement(s, site, oom.size)
    return site, op, oom.size, owner, statement


def _oom_facts(sink, rep, oom):
    k = oom.index
    allocated, reserved = int(rep.allocated[k]), int(rep.reserved[k])
    request = oom.size
    free = rep.free_blocks_at(k, request > SMALL_SEGMENT // 2)
    free_sum = int(free.sum())
    is_cap = oom.device_free >= request
    # Under a cap (set_per_process_memory_fraction) the snapshot does not store the cap itself; the
    # most the allocator ever held before the OOM is a lower bound of it (it may have released cached
    # blocks and retried just before failing, so the reserved size at the OOM alone is too low).
    held = int(rep.reserved[:k + 1].max()) if k >= 0 else reserved
    limit = max(reserved, held) if is_cap else reserved + max(oom.device_free, 0)
    sink.add("oom_request_mib", request / MIB, "MiB")
    sink.add("oom_allocated_gib", allocated / GIB, "GiB")
    sink.add("oom_reserved_gib", reserved / GIB, "GiB")
    sink.add("oom_reserved_free_gib", free_sum / GIB, "GiB")
    sink.add("oom_largest_free_block_mib", (int(free.max()) if len(free) else 0) / MIB, "MiB")
    sink.add("oom_fragmentation_pct", 100.0 * int(free[free < request].sum()) / free_sum if free_sum else 0.0, "%")
    if request > 0:
        sink.add("oom_reserved_free_to_request_ratio", free_sum / request, "ratio")
    if oom.device_free >= 0:
        sink.add("oom_device_free_gib", oom.device_free / GIB, "GiB")
        sink.add("memory_limit_gib", limit / GIB, "GiB")
        sink.add("memory_limit_is_cap", bool(is_cap), "")
        # a cap refused reserved + request: it lies between what was held and that sum
        high = reserved + request if is_cap else limit
        sink.add("memory_limit_low_gib", limit / GIB, "GiB")
        sink.add("memory_limit_high_gib", high / GIB, "GiB")
        sink.add("memory_limit_said", _limit_said(limit, high, reserved, request, oom.device_free, is_cap), "")
        if limit > 0:
            sink.add("oom_reserved_free_pct", 100.0 * free_sum / limit, "%")
        short = max(0, allocated + request - limit)
        sink.add("oom_shortfall_gib", short / GIB, "GiB")
        if allocated > 0:
            sink.add("oom_shortfall_pct", 100.0 * short / allocated, "%")


def _limit_said(low, high, reserved, request, device_free, is_cap) -> str:
    """The limit in words: what the snapshot shows of it and how (it does not store a cap's size)."""
    if is_cap:
        return (f"a cap of {low / GIB:.2f}-{high / GIB:.2f} GiB (set_per_process_memory_fraction): {low / GIB:.2f} "
                f"GiB was held, {reserved / GIB:.2f} + {request / GIB:.2f} GiB refused with {device_free / GIB:.1f} "
                f"GiB of the device free")
    return (f"the device's {low / GIB:.2f} GiB: {reserved / GIB:.2f} GiB reserved + {device_free / GIB:.2f} GiB "
            f"the driver reported free at the OOM")


def _composition(sink, out, rep, snap, ref, owners, sites):
    """Owner shares and top sites of the memory live at `ref`; returns the live bytes."""
    live, older = rep.live_at(ref)
    pos = np.searchsorted(rep.alloc_idx, live).tolist()
    sizes = rep.tr.size[live].tolist()
    by_owner = defaultdict(int)
    by_site = defaultdict(lambda: [0, 0, defaultdict(int)])
    for p, sz in zip(pos, sizes):
        by_owner[owners[p]] += sz
        rec = by_site[sites[p]]
        rec[0] += sz
        rec[1] += 1
        rec[2][owners[p]] += sz
    for _addr, sz, stack in older:
        ph, _state, site = describe_stack(snap.stacks[stack]) if stack >= 0 else ("unknown", False, "<before trace>")
        by_owner[DURABLE_OWNER[ph]] += sz
        rec = by_site[site]
        rec[0] += sz
        rec[1] += 1
        rec[2][DURABLE_OWNER[ph]] += sz
    total = sum(by_owner.values())
    sink.add("composition_allocated_gib", total / GIB, "GiB")
    out.charts["memory_composition"] = [
        {"owner": o, "bytes": int(by_owner[o]), "share_pct": 100.0 * by_owner[o] / total if total else 0.0}
        for o in OWNERS]
    for o in OWNERS:
        sink.add(f"{o}_gib", by_owner[o] / GIB, "GiB")
        sink.add(f"allocated_without_{o}_gib", (total - by_owner[o]) / GIB, "GiB")
        if total:
            sink.add(f"{o}_share_pct", 100.0 * by_owner[o] / total, "%")
    if total:
        dom = max(OWNERS, key=lambda o: (by_owner[o], -OWNERS.index(o)))
        sink.add("dominant_owner", dom, "")
        sink.add("dominant_owner_gib", by_owner[dom] / GIB, "GiB")
        sink.add("dominant_owner_share_pct", 100.0 * by_owner[dom] / total, "%")
    top = sorted(by_site.items(), key=lambda kv: (-kv[1][0], kv[0]))[:TOP_SITES]
    out.charts["top_sites"] = []
    for site, (b, count, owner_bytes) in top:
        owner = max(sorted(owner_bytes), key=lambda o: owner_bytes[o])
        out.charts["top_sites"].append({"site": site, "bytes": int(b), "count": int(count), "owner": owner})
        subj = Subject("site", site, site)
        sink.add("site_gib", b / GIB, "GiB", subj)
        if total:
            sink.add("site_share_pct", 100.0 * b / total, "%", subj)
        sink.add("site_alloc_count", int(count), "count", subj)
        sink.add("site_owner", owner, "", subj)
    return total


def _temporaries(sink, rep, snap, ref, own, total, request):
    """Short-lived tensors at `ref` (plus the failing request when it is one), by allocation site.

    One site (file:line) is one fix, so the ops of a line (`(a - b).pow(2)`: sub, then pow) count together.
    """
    live, _older = rep.live_at(ref)
    groups = defaultdict(lambda: [0, 0, defaultdict(int)])  # site -> [bytes, count, {op: bytes}]

    def add(site, op, size):
        g = groups[site]
        g[0] += size
        g[1] += 1
        g[2][op] += size

    for p, sz in zip(np.searchsorted(rep.alloc_idx, live).tolist(), rep.tr.size[live].tolist()):
        if own.owners[p] == "temporaries":
            s = own.stack_ids[p]
            add(own.sites[p], describe_call(snap.stacks[s])[2] if s >= 0 else "", sz)
    needed = total
    if request is not None:
        site, op, size, owner, statement = request
        needed += size
        if owner == "temporaries":
            add(site, op, size)
        if statement is not None:  # first use of the failing line: what it made and asks for is its working set
            made = [p for p in statement if own.owners[p] != "temporaries"]
            for p in made:
                s = own.stack_ids[p]
                add(site, describe_call(snap.stacks[s])[2], int(rep.tr.size[rep.alloc_idx[p]]))
            if owner != "temporaries":
                add(site, op, size)
            stmt = size + sum(int(rep.tr.size[rep.alloc_idx[p]]) for p in statement)
            sink.add("oom_statement_gib", stmt / GIB, "GiB")
            if total + size:
                sink.add("oom_statement_share_pct", 100.0 * stmt / (total + size), "%")
    temp = sum(g[0] for g in groups.values())
    sink.add("needed_gib", needed / GIB, "GiB")
    sink.add("temporary_buffers_gib", temp / GIB, "GiB")
    if needed:
        sink.add("temporary_buffers_share_pct", 100.0 * temp / needed, "%")
    if not groups:
        return
    site, (b, count, ops) = max(groups.items(), key=lambda kv: (kv[1][0], kv[0]))
    sink.add("temporary_site", site, "")
    named = sorted((op for op in ops if op), key=lambda op: (-ops[op], op))
    if named:
        sink.add("temporary_site_op", ", ".join(named[:3]), "")
    sink.add("temporary_site_gib", b / GIB, "GiB")
    sink.add("temporary_site_count", int(count), "count")
    if needed:
        sink.add("temporary_site_share_pct", 100.0 * b / needed, "%")
    sink.add("needed_without_temporary_site_gib", (needed - b) / GIB, "GiB")


def _growth(sink, rep, snap, ref, bounds, own):
    """Iterations, the growth of memory at iteration starts, and what survives from earlier iterations.

    A leak is memory made in an earlier iteration and still alive: grouped by where it was kept (the
    user line that called the model, for tensors made inside it; else the allocation site), a group
    alive from several earlier iterations is a leak. What the running iteration holds is its working
    set (activations, temporaries), not a leak.
    """
    bounds = bounds[bounds <= ref]
    sink.add("iterations_seen", int(len(bounds)), "count")
    if len(bounds) >= 3:
        y = rep.allocated[np.maximum(bounds - 1, 0)].astype(float)
        x = np.arange(len(y), dtype=float)
        slope, icept = np.polyfit(x, y, 1)
        ss_tot = float(((y - y.mean()) ** 2).sum())
        r2 = 1 - float(((y - (slope * x + icept)) ** 2).sum()) / ss_tot if ss_tot > 0 else 0.0
        sink.add("iteration_growth_mib_per_iter", float(slope) / MIB, "MiB")
        sink.add("iteration_growth_r2", max(0.0, r2), "ratio")
    live, _older = rep.live_at(ref)
    current = int(np.searchsorted(bounds, ref, side="right"))
    per_key = defaultdict(lambda: [0, set(), defaultdict(int), defaultdict(int)])
    iters = np.searchsorted(bounds, live, side="right").tolist()
    pos = np.searchsorted(rep.alloc_idx, live).tolist()
    for p, it, sz in zip(pos, iters, rep.tr.size[live].tolist()):
        if it >= current:
            continue  # made in the iteration still running
        s = own.stack_ids[p]
        rec = per_key[describe_call(snap.stacks[s])[0] if s >= 0 else own.sites[p]]
        rec[0] += sz
        rec[1].add(it)
        rec[2][own.owners[p]] += sz
        rec[3][own.sites[p]] += sz
    total = int(rep.allocated[ref])
    multi = [(b, len(its), k) for k, (b, its, _o, _s) in per_key.items() if len(its) >= 2]
    if not multi:  # nothing outlives more than one iteration: no leak in this window
        sink.add("leak_iterations", max((len(r[1]) for r in per_key.values()), default=0), "count")
        sink.add("leak_gib", 0.0, "GiB")
        sink.add("leak_share_pct", 0.0, "%")
        return
    b, n_it, key = max(multi)
    _b, _its, owner_bytes, site_bytes = per_key[key]
    sink.add("leak_site", key, "")
    alloc_site = max(sorted(site_bytes), key=lambda k: site_bytes[k])
    if alloc_site != key:
        sink.add("leak_alloc_site", alloc_site, "")
    sink.add("leak_owner", max(sorted(owner_bytes), key=lambda o: owner_bytes[o]), "")
    sink.add("leak_iterations", n_it, "count")
    sink.add("leak_gib", b / GIB, "GiB")
    if total > 0:
        sink.add("leak_share_pct", 100.0 * b / total, "%")
        sink.add("allocated_without_leak_gib", (total - b) / GIB, "GiB")
    sink.add("leak_mib_per_iter", b / n_it / MIB, "MiB")


def _profiler_step_growth(sink, rep, snap, device) -> None:
    """Allocated memory added per profiler step (median over steps), from the allocator's state at each ProfilerStep start
    (a snapshot taken in the profiled process): a decode server's KV cache growing by a token a step."""
    starts = sorted(a.time_us for a in snap.annotations
                    if a.device == device and a.stage == "START" and "ProfilerStep#" in a.name)
    if len(starts) < 2 or not rep.n:
        return
    at = np.searchsorted(rep.tr.time_us, np.asarray(starts, np.int64), side="left") - 1
    if (at < 0).any():
        return  # a step began before the history did: its allocated total is unknown
    held = rep.allocated[at].astype(np.float64)
    sink.add("profiler_steps_seen", len(starts), "count")
    # the median step-to-step change: the first step also starts with what the warm-up (a prefill) left
    sink.add("profiler_step_growth_mib", float(np.median(np.diff(held))) / MIB, "MiB")


def analyze_stats(stats) -> AnalysisResult:
    """The subset of facts allocator counters give (no frames: owners, sites and leaks need a snapshot)."""
    sink = _FactSink(stats.source)
    for name, value in (("peak_allocated_gib", stats.allocated_peak), ("peak_reserved_gib", stats.reserved_peak),
                        ("current_allocated_gib", stats.allocated_current),
                        ("current_reserved_gib", stats.reserved_current),
                        ("inactive_split_peak_gib", stats.inactive_split_peak)):
        if value is not None:
            sink.add(name, value / GIB, "GiB")
    if stats.allocated_peak is not None and stats.reserved_peak is not None:
        sink.add("peak_reserved_free_gib", max(0, stats.reserved_peak - stats.allocated_peak) / GIB, "GiB")
    if stats.num_ooms is not None:
        sink.add("num_ooms", int(stats.num_ooms), "count")
    if stats.num_alloc_retries is not None:
        sink.add("num_alloc_retries", int(stats.num_alloc_retries), "count")
    out = AnalysisResult(facts=sink.facts, identity={"reserved_bytes": stats.reserved_peak or stats.reserved_current or 0})
    out.notes.append(f"{Path(stats.path).name}: allocator counters only; which tensors filled memory needs a "
                     "snapshot: " + COLLECT_SNAPSHOT)
    return out


def memory_analysis(models) -> AnalysisResult:
    """Pipeline entry point: one AnalysisResult for the memory inputs of one run."""
    out = AnalysisResult()
    for model in models:
        part = analyze_snapshot(model) if hasattr(model, "traces") else analyze_stats(model)
        out.facts += part.facts
        out.notes += part.notes
        out.identity = out.identity or part.identity
        for key, value in part.charts.items():
            out.charts.setdefault(key, value)
    return out
