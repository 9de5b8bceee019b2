"""Timeline analysis: one set of metrics for Nsight Systems exports and PyTorch profiler traces.

`timeline_analysis(timelines)` takes one Timeline (or one per rank of a distributed run) and
returns facts for the train-slow / inference-slow trees plus chart series:
  charts["steps"]: per steady step {step, start_ms, dur_ms, busy_ms, idle_ms_by_class: {class: ms}}
  charts["kernel_categories"]: [{category, time_ms, share_pct}]
  charts["ranks"] (2+ ranks): [{rank, step_ms, busy_pct, comm_wait_ms, straggler}]
Metrics cover the steady-state steps only (the first step is warm-up). Pure: renders nothing.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from ..facts import AnalysisResult, Fact, Subject
from ..source_files import user_python_file
from .tables import Timeline
from .catalogue import CATALOGUE, SPECS
from .gaps import (ALLOC, COMM, COMM_KERNEL, DATA, IDLE_CLASSES, LAUNCH, SYNC, queued_mask, classify_gaps,
                            data_gap_evidence,
                            device_busy, host_activity, idle_gaps, per_step_breakdown)
from .intervals import IntervalSet
from .kv_cache import kv_cache_stats
from .ops import ncu_window, op_distribution, op_facts, top_kernels
from .kernels import CATEGORY_PATTERNS
from .kernels import (KERNEL_CATEGORIES, attention_stats, category_times, graph_kernel_pct, is_training,
                               kernel_table,
                               launch_stats, memory_bound_stats, optimizer_stats, tensor_core_stats)
from .ranks import (CollectiveKernels, RankSummary, critical_rank, straggler_analysis,
                             transfer_per_kernel)
from .setup import find_setup, setup_text, with_warmup
from .steps import find_steps, phase_ms
from .sync import alloc_stats, memcpy_stats, sync_calls, sync_stats
from .view import TimelineView

__all__ = ["timeline_analysis", "measured_analysis", "measure_timeline", "CATALOGUE", "analyze_timeline"]

GENERIC_KERNEL_NAMES = {"Kernel", "Kernel2", "kernel", "device_kernel"}
READER = {"nsys": "nsys_sqlite", "torch": "torch_trace"}
IDLE_FACT = {"data": "idle_data_pct", "sync": "idle_sync_pct", "alloc": "idle_alloc_pct", "launch": "idle_launch_pct",
             "communication": "idle_comm_pct", "unexplained": "idle_unexplained_pct"}


@dataclass
class TimelineMetrics:
    """Everything measured on one Timeline: run-level values, chart rows, notes."""

    values: dict
    steps_chart: list[dict]
    categories_chart: list[dict]
    notes: list[str]
    rank: RankSummary | None
    comm: "RankComm | None" = None
    kernels_chart: list = field(default_factory=list)  # ops.top_kernels rows
    ops_chart: list = field(default_factory=list)  # ops.op_distribution rows


@dataclass
class RankComm:
    """What the cross-rank transfer/wait split needs from one rank (ns)."""

    kernels: CollectiveKernels
    gap_start: np.ndarray   # its communication-class idle gaps
    gap_end: np.ndarray
    gap_host_cls: np.ndarray  # per gap, the host class that holds the GPU up there (launch/data/sync), else COMM
    span_ns: int            # its steady steps' total time
    steps: int


def _kernel_short_name(name: str) -> str:
    """A distinctive part of the demangled name for `ncu --kernel-name-base demangled -k regex:`: the
    function's base name (no return type, scope, templates, args), or a generic wrapper's instance."""
    n = re.sub(r"^void\s+", "", name.strip()).replace("(anonymous namespace)", "anonymous")
    depth, base = 0, []
    for ch in n:
        if ch in "<(":
            if depth == 0 and ch == "(":
                break
            depth += 1
            continue
        if ch in ">)":
            depth -= 1
            continue
        if depth == 0:
            base.append(ch)
    short = "".join(base).split("::")[-1].strip()
    if short in GENERIC_KERNEL_NAMES:  # cutlass::Kernel2<cutlass_80_simt_sgemm_...>: name the instance
        inner = re.search(r"<\s*([A-Za-z_][\w]*)", n)
        short = inner.group(1) if inner else short
    return short or n[:60]


def _collectives(tv: TimelineView, steps, device: int) -> CollectiveKernels:
    """The device's NCCL kernels that start in a steady step, with that step's label."""
    gpu = tv.tl.gpu
    rows = np.flatnonzero(tv.is_kernel & tv.gpu_names.mask(COMM_KERNEL) & (gpu["device"].to_numpy() == device))
    idx = steps.steady
    ss, se = steps.start[idx], steps.end[idx]
    s = tv.gpu_start[rows]
    k = np.searchsorted(ss, s, side="right") - 1
    inside = (k >= 0) & (s < se[np.maximum(k, 0)])
    labels = [steps.labels[i] for i in idx.tolist()]
    rows, k = rows[inside], k[inside]
    return CollectiveKernels(np.array([labels[j] for j in k.tolist()], dtype=object),
                             gpu["stream"].to_numpy()[rows], tv.gpu_start[rows], tv.gpu_end[rows], labels,
                             np.asarray(gpu["name"].to_numpy()[rows], dtype=object))


def _host_held(dev, gs: np.ndarray, ge: np.ndarray, act) -> np.ndarray:
    """For communication-class gaps: the host class holding the GPU up (launch, data or sync; COMM when
    none). The gap classes give NCCL precedence; but when the next compute work was not yet launched
    as the gap began and the host was launching, loading or syncing, the GPU waited for its host, not
    for the collective running beside it: overlapping the collective better would not shorten the gap."""
    if gs.size == 0:
        return np.zeros(0, dtype=np.int8)
    queued = queued_mask(dev, gs, ge)
    none = IntervalSet.of([], [])
    under = classify_gaps(gs, ge, replace(act, comm=none), none, queued)
    held = ~queued & np.isin(under, [LAUNCH, DATA, SYNC, ALLOC])
    return np.where(held, under, COMM).astype(np.int8)


CHART_STEPS = 1000


def _utilization(tv: TimelineView, steps, act, v: dict, notes: list[str]) -> tuple[list[dict], RankComm] | None:
    """GPU busy and idle time (by class) over the steady steps into v; the steps chart and what the
    cross-rank communication split needs (None: no GPU activity). Its device intervals and gaps are
    large: they are freed on return."""
    devices = device_busy(tv)
    if not devices:
        return None
    lo, hi = steps.steady_span
    windows = steps.steady_windows
    span = max(windows.total, 1)
    # a rank or process drives one device; with several, the busiest one sets the pace
    dev = max(devices, key=lambda d: (d.busy.overlap(lo, hi), -d.device))
    if len(devices) > 1:
        notes.append(f"{len(devices)} devices in one timeline: utilization is reported for device {dev.device}")
    gaps = idle_gaps(dev, steps, act)
    idle_ns = gaps.ns_by_class()
    busy_ns = int(dev.compute.overlap(windows.starts, windows.ends).sum())
    comm_ns = int(dev.comm.overlap(windows.starts, windows.ends).sum())
    steps_chart = [{
        "step": row["label"], "start_ms": (row["start_ns"] - lo) / 1e6,
        "dur_ms": (row["end_ns"] - row["start_ns"]) / 1e6, "busy_ms": row["compute_ns"] / 1e6,
        "idle_ms_by_class": {c: ns / 1e6 for c, ns in row["idle_ns_by_class"].items()},
    } for row in per_step_breakdown(dev, steps, gaps, limit=CHART_STEPS)]
    if steps.steady.size > len(steps_chart) > 0:  # the chart holds the first CHART_STEPS steps only
        steps_chart[0]["of"] = int(steps.steady.size)
    v["gpu_busy_pct"] = 100.0 * busy_ns / span
    v["gpu_idle_pct"] = 100.0 - v["gpu_busy_pct"]
    for c in IDLE_CLASSES:
        v[IDLE_FACT[c]] = 100.0 * idle_ns[c] / span
    top = max(IDLE_CLASSES, key=lambda c: (idle_ns[c], c))
    v["idle_top_class"] = top if idle_ns[top] > 0 else "none"
    v["comm_kernel_ms_per_step"] = comm_ns / 1e6 / max(steps.steady.size, 1)
    v.update(data_gap_evidence(tv, gaps, act, max(steps.steady.size, 1)))
    comm_gaps = gaps.cls == COMM
    gs, ge = gaps.start[comm_gaps], gaps.end[comm_gaps]
    comm = RankComm(_collectives(tv, steps, dev.device), gs, ge, _host_held(dev, gs, ge, act),
                    int(span), int(steps.steady.size))
    return steps_chart, comm


def analyze_timeline(tl: Timeline) -> TimelineMetrics:
    """All single-timeline metrics (see the catalogue for their meaning)."""
    tv = TimelineView(tl)
    setup = find_setup(tv)
    steps = find_steps(tv, setup.end_ns)
    setup = with_warmup(setup, steps)
    notes = list(steps.notes)
    v: dict = {"step_detection": steps.method, "setup_pct": setup.pct, "setup_ms": setup.intervals.total / 1e6,
               "trace_span_ms": setup.span_ns / 1e6}
    if setup.top:
        v["setup_calls"] = setup_text(setup)
    if setup.pct >= 50 and steps.steady.size > 2:
        notes.append(f"{setup.pct:.0f}% of the trace is one-time start-up work ({setup_text(setup, 2)}); it is left out: "
                     f"the numbers are over the {steps.steady.size} steady steps")
    idx = steps.steady
    dur_ms = (steps.end[idx] - steps.start[idx]) / 1e6
    v["step_count"] = int(idx.size)
    v["step_time_ms_mean"] = float(dur_ms.mean())
    v["step_time_ms_p50"] = float(np.percentile(dur_ms, 50))
    v["step_time_ms_p95"] = float(np.percentile(dur_ms, 95))
    for phase, ms in phase_ms(tl, steps).items():
        v[f"phase_{phase}_ms"] = ms

    act = host_activity(tv)
    util = _utilization(tv, steps, act, v, notes)
    if util is None:
        notes.append("no GPU activity (kernels, copies, memsets) in the trace: utilization and kernel facts "
                     "are not measured; profile with CUDA activity on (`nsys profile -t cuda` or "
                     "ProfilerActivity.CUDA)")
        return TimelineMetrics(v, [], [], notes, None)
    steps_chart, comm = util
    act = replace(act, launch=IntervalSet.of([], []), cuda=IntervalSet.of([], []))  # only idle gaps need them (large)

    kt = kernel_table(tv, steps)
    cats = category_times(kt)
    categories_chart = [{"category": r.category, "time_ms": float(r.time_ms), "share_pct": float(r.share_pct)}
                        for r in cats.itertuples()]
    for r in cats.itertuples():
        v[f"kernel_{r.category}_pct"] = float(r.share_pct)
    if cats["time_ms"].sum() > 0:
        v["top_kernel_category"] = str(cats.sort_values(["time_ms", "category"], ascending=[False, True]).iloc[0].category)
    kernels = kt.is_kernel & (kt.category != KERNEL_CATEGORIES.index("communication"))
    if kernels.any():  # NCCL kernels mostly wait for peers: Nsight Compute has nothing to say on them
        by_name = kt.names.subset(kernels).sum_by_name(kt.dur_ns[kernels]).sort_values(ascending=False, kind="stable")
        total = max(float(kt.dur_ns.sum()), 1.0)
        v["top_kernel_name"] = _kernel_short_name(str(by_name.index[0]))
        v["top_kernel_pct"] = 100.0 * float(by_name.iloc[0]) / total
        shorts = list(dict.fromkeys(_kernel_short_name(str(n)) for n in by_name.index[:5]))[:3]
        v["ncu_kernel_regex"] = "|".join(re.escape(s) for s in shorts)
        v.update(ncu_window(kt, steps, re.compile(v["ncu_kernel_regex"])))
    kernels_chart = top_kernels(kt, steps, v["step_time_ms_mean"])
    ops_chart = op_distribution(kt, steps)
    att = dict(CATEGORY_PATTERNS)["attention"]  # where `ncu -k regex:` on the attention kernels lands
    v.update({f"ncu_attention_{k[4:]}": x for k, x in ncu_window(kt, steps, att).items()})
    v.update(op_facts(ops_chart))
    ls = launch_stats(tv, kt)
    ls["graph_kernel_pct"] = graph_kernel_pct(tv, kt)
    v.update(ls)
    v.update(sync_stats(tl, steps, act, ls.get("kernels_per_step")))
    v.update(memcpy_stats(tv, steps, act))
    v.update(alloc_stats(tv, steps))
    v.update(sync_calls(tv, steps, act))
    v.update(tensor_core_stats(kt))
    att = attention_stats(kt)
    v.update(att)
    v.update(memory_bound_stats(kt))
    v.update(optimizer_stats(tl, kt, steps))
    v["workload_kind"] = "training" if is_training(tl, kt) else "inference"
    v.update(kv_cache_stats(tl, steps))  # device memory over the steps (allocator events), when the trace has them
    v["tensor_core_dtypes"] = tensor_core_dtypes(tl.devices)
    total = max((int(d.get("total_memory") or 0) for d in tl.devices), default=0)
    if total and "device_memory_total_gb" not in v:  # memory headroom can come from a snapshot of the run
        v["device_memory_total_gb"] = total / float(1 << 30)
    if v["workload_kind"] == "inference":  # measured: no optimizer work at all
        v.setdefault("optimizer_kernels_per_step", 0.0)
        v.setdefault("optimizer_step_pct", 0.0)

    summary = RankSummary(tl.rank if tl.rank is not None else -1, v["step_time_ms_mean"],
                          v["comm_kernel_ms_per_step"], v["gpu_busy_pct"],
                          {c: v[IDLE_FACT[c]] for c in IDLE_CLASSES})
    return TimelineMetrics(v, steps_chart, categories_chart, notes, summary, comm, kernels_chart, ops_chart)


def tensor_core_dtypes(devices: list[dict]) -> str:
    """What the GPU's tensor cores take, from its compute capability (the trace's device
    properties): Ampere and later (8.0+) TF32, bf16 and fp16; Volta / Turing (7.x) fp16 only."""
    ccs = [d.get("cc", "") for d in devices if d.get("cc")]
    if not ccs:
        return "unknown"
    try:
        major = min(int(str(cc).split(".")[0]) for cc in ccs)
    except ValueError:
        return "unknown"
    return "tf32,bf16,fp16" if major >= 8 else "fp16" if major == 7 else "none"


def _fact(name: str, value, source: str, subject: Subject | None = None) -> Fact | None:
    spec = SPECS.get(name)
    if spec is None:
        raise KeyError(f"fact {name} is not in the timeline catalogue")
    if isinstance(value, (np.bool_,)):
        value = bool(value)
    elif isinstance(value, (np.integer,)):
        value = int(value)
    elif isinstance(value, (np.floating,)):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if spec.type == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = round(float(value), 6) if isinstance(value, float) else value
    return Fact(name, value, spec.unit, source, subject)


def _source(tls: list) -> str:
    readers = sorted({READER.get(t.source, t.source) for t in tls})
    return f"{', '.join(t.path for t in tls)} ({', '.join(readers)})"


@dataclass
class MeasuredTimeline:
    """One timeline reduced to its metrics plus who it is (path, source, rank): what the per-rank
    work hands to the cross-rank analysis (the tables themselves are dropped)."""

    path: str
    source: str
    rank: int | None
    world_size: int | None
    metrics: TimelineMetrics
    process_groups: list = None  # the run's process groups as the trace lists them (Timeline.process_groups)
    identity: dict = None  # timeline_identity(): when (Unix clock), which Python files, which device memory


PYTHON_FILES_KEPT = 500
_PY_FILE = re.compile(r"^([^()]+\.py)\(\d+\)")


def timeline_identity(tl: Timeline) -> dict:
    """What places a timeline among other inputs of the run: its span on the Unix clock (when the source
    records the offset), the Python files its stack ranges name (with_stack), its devices' memory."""
    out: dict = {}
    spans = [(int(t["start_ns"].min()), int(t["end_ns"].max())) for t in (tl.gpu, tl.host, tl.ranges) if len(t)]
    if tl.clock_epoch_ns is not None and spans:
        out["window_epoch_ns"] = (tl.clock_epoch_ns + min(s for s, _ in spans), tl.clock_epoch_ns + max(e for _, e in spans))
    py = tl.ranges["name"][tl.ranges["kind"] == "python"] if len(tl.ranges) else []
    files = sorted({user_python_file(m.group(1)) for n in set(py) for m in [_PY_FILE.search(str(n))] if m} - {None})
    if files:
        out["python_files"] = files[:PYTHON_FILES_KEPT]
    total = max((int(d.get("total_memory") or 0) for d in tl.devices), default=0)
    if total:
        out["device_total_memory"] = total
    return out


def measure_timeline(tl: Timeline) -> MeasuredTimeline:
    """The per-rank part of the analysis: one Timeline -> its compact MeasuredTimeline."""
    return MeasuredTimeline(tl.path, tl.source, tl.rank, tl.world_size, analyze_timeline(tl), tl.process_groups,
                            timeline_identity(tl))


def timeline_analysis(timelines: list[Timeline]) -> AnalysisResult:
    """Facts and chart series for one Timeline, or one per rank of a distributed run."""
    return measured_analysis([measure_timeline(t) for t in timelines])


def _run_identity(parts: list[dict]) -> dict:
    """The ranks' identities as one: the union of their windows and files, the largest device."""
    out: dict = {}
    wins = [p["window_epoch_ns"] for p in parts if p.get("window_epoch_ns")]
    if wins:
        out["window_epoch_ns"] = (min(w[0] for w in wins), max(w[1] for w in wins))
    files = sorted({f for p in parts for f in p.get("python_files", ())})
    if files:
        out["python_files"] = files[:PYTHON_FILES_KEPT]
    mem = max((p.get("device_total_memory", 0) for p in parts), default=0)
    if mem:
        out["device_total_memory"] = mem
    return out


def measured_analysis(measured: list[MeasuredTimeline]) -> AnalysisResult:
    """The cross-rank part: facts and chart series from one MeasuredTimeline, or one per rank."""
    if not measured:
        return AnalysisResult()
    ordered = sorted(measured, key=lambda t: (t.rank if t.rank is not None else 1 << 30, t.path))
    metrics = [t.metrics for t in ordered]
    result = AnalysisResult(inputs=[{"path": t.path, "kind": t.source} for t in ordered])
    result.identity = _run_identity([t.identity or {} for t in ordered])
    src = _source(ordered)
    for t, m in zip(ordered, metrics):
        result.notes.extend(f"{t.path}: {n}" for n in m.notes)

    summaries = [m.rank for m in metrics if m.rank is not None]
    for i, s in enumerate(summaries):
        if s.rank < 0:
            s.rank = i
    shown = metrics[0]  # the timeline the charts draw: the one whose numbers the run-level facts are
    if len(metrics) == 1:
        run_values = metrics[0].values
    else:
        run_values = _merge_ranks([m.values for m in metrics])
        if len(summaries) > 1:
            timed = [m for m in metrics if m.rank is not None]
            unmatched = _split_comm(timed)
            crit = critical_rank(summaries)
            run_values.update(_critical_breakdown(timed, crit))
            shown = timed[crit]
            result.notes.append(
                f"{len(metrics)} ranks: the run-level GPU busy and idle breakdown is rank {summaries[crit].rank}'s, "
                "the rank that arrives last at the collectives (a synchronous step ends when it does; the other "
                "ranks' extra idle is waiting for it); NCCL time is split into transfer (per collective, the "
                "shortest NCCL kernel over the ranks) and waiting for peers; other run-level values are averaged "
                "over ranks; per-rank values are on rank subjects")
            if unmatched:
                result.notes.append(f"{unmatched} NCCL kernels could not be matched across ranks (different counts "
                                    "per step and stream): their whole time counts as transfer")
        else:
            result.notes.append(f"{len(metrics)} ranks: run-level values are averaged over ranks; "
                                "per-rank values are on rank subjects")
    for name, value in sorted(run_values.items()):
        f = _fact(name, value, src)
        if f is not None:
            result.facts.append(f)

    cross = straggler_analysis(summaries) if len(summaries) > 1 else {"per_rank": {}, "run": {}}
    for name, value in sorted(cross["run"].items()):
        f = _fact(name, value, src)
        if f is not None:
            result.facts.append(f)
    for t, s in zip(ordered, summaries):
        subj = Subject("rank", str(s.rank), f"rank {s.rank}")
        for name, value in sorted(cross["per_rank"].get(s.rank, {}).items()):
            f = _fact(name, value, _source([t]), subj)
            if f is not None:
                result.facts.append(f)

    result.charts["steps"] = shown.steps_chart
    result.charts["kernel_categories"] = shown.categories_chart
    result.charts["top_kernels"] = shown.kernels_chart
    result.charts["top_ops"] = shown.ops_chart
    result.charts["source"] = {"path": ordered[metrics.index(shown)].path,
                               "rank": shown.rank.rank if shown.rank is not None and len(metrics) > 1 else None}
    if len(summaries) > 1:
        result.charts["ranks"] = [{"rank": s.rank, "step_ms": s.step_ms, "busy_pct": s.busy_pct,
                                   "comm_wait_ms": s.comm_ms,
                                   "straggler": bool(cross["per_rank"].get(s.rank, {}).get("rank_is_straggler"))}
                                  for s in summaries]
    return result


def _split_comm(timed: list[TimelineMetrics]) -> int:
    """Split each rank's NCCL time into transfer and waiting for peers (into its RankSummary): each
    kernel's transfer (its collective's shortest duration over the ranks) is its last part, the time
    before is waiting for the last rank to arrive. Returns how many kernels could not be matched."""
    transfers, unmatched = transfer_per_kernel([m.comm.kernels for m in timed])
    for m, tr in zip(timed, transfers):
        c, k = m.comm, m.comm.kernels
        wait = IntervalSet.of(k.start, k.end - tr)
        steps = max(c.steps, 1)
        m.rank.transfer_ms = float(tr.sum()) / 1e6 / steps
        m.rank.peer_wait_ms = float((k.dur - tr).sum()) / 1e6 / steps
        comm = c.gap_host_cls == COMM
        m.rank.idle_peer_wait_pct = (100.0 * float(wait.overlap(c.gap_start[comm], c.gap_end[comm]).sum())
                                     / max(c.span_ns, 1))
    return unmatched


def _host_held_pct(m: TimelineMetrics) -> dict:
    """Of a rank's communication-class idle, the share of its step held up by its own host, by class."""
    c = m.comm
    dur = c.gap_end - c.gap_start
    return {IDLE_CLASSES[k]: 100.0 * float(dur[c.gap_host_cls == k].sum()) / max(c.span_ns, 1)
            for k in (LAUNCH, DATA, SYNC, ALLOC)}


def _critical_breakdown(timed: list[TimelineMetrics], crit: int) -> dict:
    """Run-level busy/idle facts of a multi-rank run: the last-arriving rank's breakdown, its
    communication idle cut to the exposed transfer (gaps its own host held up go to that host class,
    waiting for peers apart), and the transfer / peer wait per step averaged over ranks."""
    v, r = timed[crit].values, timed[crit].rank
    out = {k: v[k] for k in ["gpu_busy_pct", "gpu_idle_pct", *IDLE_FACT.values()] if k in v}
    if "idle_comm_pct" in out:
        held = _host_held_pct(timed[crit])
        for cls, pct in held.items():
            out[IDLE_FACT[cls]] += pct
        out["idle_comm_pct"] = max(out["idle_comm_pct"] - sum(held.values()) - r.idle_peer_wait_pct, 0.0)
        out["idle_peer_wait_pct"] = r.idle_peer_wait_pct
        top = max(IDLE_CLASSES, key=lambda c: (out[IDLE_FACT[c]], c))
        out["idle_top_class"] = top if out[IDLE_FACT[top]] > 0 else "none"
    out["idle_breakdown_rank"] = str(r.rank)
    out["comm_transfer_ms_per_step"] = float(np.mean([m.rank.transfer_ms for m in timed]))
    out["comm_peer_wait_ms_per_step"] = float(np.mean([m.rank.peer_wait_ms for m in timed]))
    return out


def _merge_ranks(values: list[dict]) -> dict:
    """Run-level values over several ranks: numbers averaged, strings/bools from the first rank."""
    out: dict = {}
    keys = sorted(set().union(*values))
    for k in keys:
        present = [v[k] for v in values if k in v]
        if all(isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_)) for x in present):
            out[k] = float(np.mean(present))
        else:
            out[k] = present[0]
    if any(v.get("workload_kind") == "training" for v in values):
        out["workload_kind"] = "training"
    return out
