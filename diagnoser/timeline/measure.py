"""Timeline measurement, one timeline (one rank) at a time: its steps, utilization and idle gaps by
class, kernels, syncs, memory and ops, reduced to the compact MeasuredTimeline the cross-rank part
(analysis.py) turns into facts. Runs in the per-rank workers (diagnoser.distributed); pure."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from .. import settings
from ..heap import heap_release_for
from ..identity import program_identity
from ..idle_classes import IDLE_FACT
from ..kernel_names import NCU_FILTER, short_name
from ..kernel_categories import COMMUNICATION
from ..result_tables import KernelRow, OpRow, RooflineRow, StepKernel, StepRow, row_dict
from ..text_safety import regex_any_of
from .tables import Timeline
from .gap_contents import idle_contents
from .host_threads import COLLECT
from .gaps import (_input_copy_at, may_stage, staging_copy, ALLOC, COMM, COMM_KERNEL, DATA, IDLE_CLASSES, LAUNCH, SYNC, queued_mask, classify_gaps,
                            data_gap_evidence, host_gap_evidence,
                            device_busy, host_activity, idle_gaps, merged_around, per_step_breakdown,
                            quiet_after_sync_ns, sync_wait_evidence, MAJORITY)
from .intervals import IntervalSet, subtract
from .debug_apis import anomaly_check_stats
from .decode_prefix import decode_prefix_stats
from .kv_cache import kv_cache_stats
from .program import program_facts
from .recompiles import compile_stats
from .autotune import autotune_stats
from .gil import gil_stats_export, gil_stats_torch
from .roofline import op_roofline
from .ops import ncu_window, op_distribution, op_facts, top_kernels
from .kernels import CATEGORY_PATTERNS
from .kernels import (KERNEL_CATEGORIES, attention_stats, category_times, gemm_alignment_stats, graph_kernel_pct,
                               is_training,
                               kernel_table,
                               launch_stats, memory_bound_stats, optimizer_stats, tensor_core_stats)
from .ranks import CollectiveKernels, RankSummary
from .replay import step_graph
from .step_graph import StepGraph
from .step_work import host_gaps, step_work
from .setup import find_setup, setup_text, with_warmup
from .steps import find_steps, phase_ms
from .sync import alloc_stats, memcpy_stats, sync_calls, sync_stats
from .strip import middle_step, step_strip
from .view import TimelineView, values_at
from .names import lazy_pattern


# the one-time-setup condition (rules/shared.yaml) with enough steady steps: the rule stays silent, a note
# says what was left out (the defaults are the condition's params, read from there)
SETUP_NOTE_MIN_PCT = settings.register(
    "timeline.setup_note_min_pct", settings.from_rule_param("one-time-setup", "min_setup_pct"), "%",
    "start-up work at least this share of the trace, with more steady steps than timeline.setup_note_max_steps, "
    "gets a note that it is left out (rules/shared.yaml one-time-setup: min_setup_pct)")
SETUP_NOTE_MAX_STEPS = settings.register(
    "timeline.setup_note_max_steps", settings.from_rule_param("one-time-setup", "max_steady_steps"), "count",
    "... steady steps above this many show the steady state (one-time-setup: max_steady_steps)")
READER = {"nsys": "nsys_sqlite", "torch": "torch_trace"}


@dataclass
class TimelineMetrics:
    """Everything measured on one Timeline: its run-level facts by catalogue name (`values`: the timeline
    catalogue types each one), the typed tables the layers above read (steps, kernels, ops, roofline:
    result_tables.py), the charts the report draws, notes."""

    values: dict
    steps_chart: list[dict]
    categories_chart: list[dict]
    notes: list[str]
    rank: RankSummary | None
    comm: "RankComm | None" = None
    kernels: list[KernelRow] = field(default_factory=list)  # ops.top_kernels
    ops: list[OpRow] = field(default_factory=list)  # ops.op_distribution
    strip: dict | None = None  # strip.step_strip: one steady step, streams, gaps and host
    roofline: list[RooflineRow] = field(default_factory=list)  # roofline.op_roofline
    roofline_kernels: list[StepKernel] = field(default_factory=list)  # their kernels in one steady step (ncu side-by-side)
    step_graph: StepGraph | None = None  # one steady step to replay with fixes applied (replay.py)
    host_gaps: dict = field(default_factory=dict)  # step_work.host_gaps: the host's time between ops (compare's gate)
    steps: list[StepRow] = field(default_factory=list)  # the first CHART_STEPS steady steps (steps_chart draws them)

    @property
    def roofline_chart(self) -> list[dict]:
        """The per-op roofline as the report draws it (and the JSON report writes it)."""
        return [row_dict(r) for r in self.roofline]


@dataclass
class RankComm:
    """What the cross-rank transfer/wait split needs from one rank (ns)."""

    kernels: CollectiveKernels
    gap_start: np.ndarray   # its communication-class idle gaps
    gap_end: np.ndarray
    gap_host_cls: np.ndarray  # per gap, the host class that holds the GPU up there (launch/data/sync), else COMM
    span_ns: int            # its steady steps' total time
    steps: int


def _collectives(tv: TimelineView, steps, device: int) -> CollectiveKernels:
    """The device's NCCL kernels that start in a steady step, with that step's label."""
    gpu = tv.tl.gpu
    rows = np.flatnonzero(tv.is_kernel & tv.gpu_names.mask(COMM_KERNEL) & (gpu["device"].to_numpy() == device))
    idx = steps.steady
    ss, se = steps.start[idx], steps.end[idx]
    s = tv.gpu_start[rows]
    k = np.searchsorted(ss, s, side="right") - 1
    inside = (k >= 0) & (s < se[np.maximum(k, 0)])
    labels = steps.labels[steps.warmup:]  # the steady steps' (idx is warmup .. count - 1)
    rows, k = rows[inside], k[inside]
    return CollectiveKernels(np.array([labels[j] for j in k.tolist()], dtype=object),
                             gpu["stream"].to_numpy()[rows], tv.gpu_start[rows], tv.gpu_end[rows], labels,
                             values_at(gpu["name"], rows))


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
UNSEEN_FLOOR_PCT = settings.register("timeline.unseen_floor_pct", 1.0, "%", "a mechanism the source cannot see (the GIL without OS calls or stacks, a staging copy without CPU samples) is reported as none when the idle that would hold it is under this share of the step")


def _pct(gaps, sel: np.ndarray, span: float) -> float:
    """The share of the steady steps (%) the selected gaps take."""
    return 100.0 * float(gaps.ns(sel)) / max(span, 1)


def _ending_in_copy(gaps, sel: np.ndarray, act) -> np.ndarray:
    """The selected gaps (a mask) that end in a host-to-device copy, as indices (only those are searched)."""
    rows = np.flatnonzero(sel)
    return rows[_input_copy_at(gaps.end_of(rows), act) >= 0]


def _utilization(tv: TimelineView, steps, act, v: dict, notes: list[str]) -> tuple[list[StepRow], RankComm, tuple] | None:
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
    act = merged_around(dev, steps, act)  # (merged once, for the gaps and the communication gaps' pieces)
    gaps = idle_gaps(dev, steps, act)
    idle_ns = gaps.ns_by_class()
    busy_ns = int(dev.compute.overlap(windows.starts, windows.ends).sum())
    comm_ns = int(dev.comm.overlap(windows.starts, windows.ends).sum())
    step_rows = [StepRow(row["label"], (row["start_ns"] - lo) / 1e6, (row["end_ns"] - row["start_ns"]) / 1e6,
                         row["compute_ns"] / 1e6, {c: ns / 1e6 for c, ns in row["idle_ns_by_class"].items()})
                 for row in per_step_breakdown(dev, steps, gaps, limit=CHART_STEPS)]
    v["gpu_busy_pct"] = 100.0 * busy_ns / span
    v["gpu_idle_pct"] = 100.0 - v["gpu_busy_pct"]
    for c in IDLE_CLASSES:
        v[IDLE_FACT[c]] = 100.0 * idle_ns[c] / span
    # the host class in two: gaps that began as a sync returned (the host computing on what it read back)
    # and the rest (the host inside an optimizer step on CPU tensors)
    host = (gaps.cls == IDLE_CLASSES.index("host")) & (gaps.after_sync if gaps.after_sync is not None else False)
    after_ns = gaps.ns(host)
    v["idle_host_after_sync_pct"] = 100.0 * after_ns / span
    v["idle_host_optimizer_pct"] = 100.0 * (idle_ns["host"] - after_ns) / span
    # sync-class idle the host spent out of the sync and out of CUDA, when it is most of that idle: what the
    # host did there, the trace does not show
    quiet_ns = quiet_after_sync_ns(gaps, act)
    if quiet_ns and quiet_ns >= MAJORITY.value * idle_ns["sync"]:
        v["idle_sync_quiet_pct"] = 100.0 * quiet_ns / span
    # what the launching thread did there, where the export recorded it (or how to record it)
    v.update(sync_wait_evidence(gaps, act, max(steps.steady.size, 1), tv.tl.source, idle_ns["sync"],
                                "idle_sync_quiet_pct" in v))
    top = max(IDLE_CLASSES, key=lambda c: (idle_ns[c], c))
    v["idle_top_class"] = top if idle_ns[top] > 0 else "none"
    v["comm_kernel_ms_per_step"] = comm_ns / 1e6 / max(steps.steady.size, 1)
    v.update(data_gap_evidence(tv, gaps, act, max(steps.steady.size, 1)))
    v.update(host_gap_evidence(tv, gaps, max(steps.steady.size, 1), act))
    _unexplained_evidence(tv, gaps, act, windows, span, max(steps.steady.size, 1), v)
    comm_gaps = gaps.cls == COMM
    gs, ge = gaps.spans(comm_gaps)
    comm = RankComm(_collectives(tv, steps, dev.device), gs, ge, _host_held(dev, gs, ge, act),
                    int(span), int(steps.steady.size))
    i = middle_step(steps)
    strip_gaps = None
    if i is not None:  # the gaps of the step the strip draws (the rest are freed)
        inside = gaps.overlapping(int(steps.start[i]), int(steps.end[i]))
        strip_gaps = (i, dev.device, *gaps.spans(inside), gaps.cls[inside])
    return step_rows, comm, strip_gaps


def _unexplained_evidence(tv: TimelineView, gaps, act, windows, span: float, nsteps: int, v: dict) -> None:
    """Into v: what the trace shows of the mechanisms behind gaps the classes leave unexplained (or data): a
    staging copy, the interpreter lock, torch.compile compiling, what lies inside them; where the source
    cannot see one, none when too little idle could hold it."""
    unexplained = gaps.cls == IDLE_CLASSES.index("unexplained")
    staged = unexplained & (staging_copy(gaps.start, gaps.ends(), act, gaps.threads(slice(None))) if may_stage(act)
                            else False)
    data = gaps.cls == DATA
    if staged.any():  # the host staging data already in host memory for the upload that ends the gap
        v["idle_staging_copy_pct"] = 100.0 * float(gaps.ns(staged)) / span
        at = _input_copy_at(gaps.end_of(staged), act)
        v["staged_copy_mb_per_step"] = float(act.input_copy_bytes[at[at >= 0]].sum()) / 1e6 / nsteps
    elif tv.tl.source != "nsys" or (act.side is not None and act.side.sees_compute and len(act.side.samples)) \
            or _pct(gaps, _ending_in_copy(gaps, data, act), span) < UNSEEN_FLOOR_PCT.value:
        # (without samples a staging gap is a data gap ending in a copy: too little of those holds none worth naming)
        # measured none: an operator tree names the copy, samples show no staging, or no gap could be one
        v["idle_staging_copy_pct"] = 0.0
    if data.any() and tv.tl.source == "nsys" and (act.side is None or not act.side.sees_compute) \
            and "data_gap_ranges" not in v and (act.marked_data is None or not len(act.marked_data)):
        v["data_gap_unseen"] = f"`{COLLECT}`"
    if tv.tl.source == "nsys":  # the launching threads waiting for the interpreter lock, the thread holding it
        v.update(gil_stats_export(tv.tl, windows, gaps, nsteps))
    elif unexplained.any():
        v.update(gil_stats_torch(tv.tl, *gaps.spans(unexplained), windows))
    if "gil_idle_pct" not in v and _pct(gaps, unexplained, span) < UNSEEN_FLOOR_PCT.value:
        # waits for the GIL leave unexplained idle: too little of it holds none worth naming
        v["gil_idle_pct"] = 0.0
    if act.compile is not None and unexplained.any():  # the unexplained idle torch.compile spends compiling
        v["idle_compile_pct"] = 100.0 * float(act.compile.overlap(*gaps.spans(unexplained)).sum()) / span
    if unexplained.any():  # what the trace shows inside the gaps no class explains, with its share
        contents = idle_contents(tv, *gaps.spans(unexplained), act.side,
                                 gaps.threads(unexplained), nsteps)
        if contents:
            v["idle_unexplained_contents"] = contents


def _steps_measured(tl: Timeline, tv: TimelineView) -> tuple:
    """(setup, steps, the step facts, notes): the one-time start-up work, the steps and their times."""
    setup = find_setup(tv)
    steps = find_steps(tv, setup.end_ns)
    setup = with_warmup(setup, steps)
    notes = list(tl.notes) + list(steps.notes)
    v: dict = {"step_detection": steps.method, "setup_pct": setup.pct, "setup_ms": setup.intervals.total / 1e6,
               "trace_span_ms": setup.span_ns / 1e6}
    if setup.top:
        v["setup_calls"] = setup_text(setup)
    if setup.pct >= SETUP_NOTE_MIN_PCT.value and steps.steady.size > SETUP_NOTE_MAX_STEPS.value:
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
    return setup, steps, v, notes


def _kernel_mix(kt, steps, v: dict) -> list[dict]:
    """Into v: each kernel category's share, the top category and kernel, where `ncu` on the top kernels
    lands; returns the categories chart."""
    cats = category_times(kt)
    categories_chart = [{"category": r.category, "time_ms": float(r.time_ms), "share_pct": float(r.share_pct)}
                        for r in cats.itertuples()]
    for r in cats.itertuples():
        v[f"kernel_{r.category}_pct"] = float(r.share_pct)
    if cats["time_ms"].sum() > 0:
        v["top_kernel_category"] = str(cats.sort_values(["time_ms", "category"], ascending=[False, True]).iloc[0].category)
    kernels = kt.is_kernel & (kt.category != KERNEL_CATEGORIES.index(COMMUNICATION))
    if kernels.any():  # NCCL kernels mostly wait for peers: Nsight Compute has nothing to say on them
        kernels = slice(None) if kernels.all() else kernels  # (the columns themselves: no copies)
        by_name = kt.names.subset(kernels).sum_by_name(kt.dur_ns[kernels]).sort_values(ascending=False, kind="stable")
        total = max(float(kt.dur_ns.sum()), 1.0)
        v["top_kernel_name"] = short_name(str(by_name.index[0]), NCU_FILTER)
        v["top_kernel_pct"] = 100.0 * float(by_name.iloc[0]) / total
        shorts = list(dict.fromkeys(short_name(str(n), NCU_FILTER) for n in by_name.index[:5]))[:3]
        v["ncu_kernel_regex"] = regex_any_of(shorts)  # no backslash; the rule text shell-quotes it
        v.update(ncu_window(kt, steps, re.compile(v["ncu_kernel_regex"])))
    return categories_chart


def _work_facts(tl: Timeline, tv: TimelineView, kt, steps, act, setup, v: dict) -> None:
    """Into v: launches, syncs, copies, allocations, tensor cores, attention, optimizer, compile, the
    workload's kind and program: the facts of what the steps do (each analysis's facts in this order: later
    ones read earlier ones, program_facts all of them)."""
    ls = launch_stats(tv, kt)
    ls["graph_kernel_pct"] = graph_kernel_pct(tv, kt)
    v.update(ls)
    v.update(sync_stats(tl, steps, act, ls.get("kernels_per_step")))
    v.update(step_work(tv, steps))
    v.update(memcpy_stats(tv, steps, act))
    v.update(alloc_stats(tv, steps, setup.intervals))
    v.update(sync_calls(tv, steps, act))
    v.update(anomaly_check_stats(tl, steps))
    if "anomaly_nan_checks_per_step" in v and v.get("syncs_per_step"):  # the share of the syncs they make
        v["anomaly_check_sync_pct"] = min(100.0, 100.0 * v["anomaly_nan_checks_per_step"] / v["syncs_per_step"])
    v.update(tensor_core_stats(kt))
    v.update(gemm_alignment_stats(kt))
    att = attention_stats(kt, steps)
    v.update(att)
    v.update(memory_bound_stats(kt))
    v.update(optimizer_stats(tl, kt, steps))
    v.update(compile_stats(tl, steps))
    v.update(autotune_stats(tv, steps))
    v["workload_kind"] = "training" if is_training(tl, kt) else "inference"
    if v["workload_kind"] == "inference":  # one step per generated token: is the prefix re-run every step?
        v.update(decode_prefix_stats(tl, kt, steps))
    v.update(kv_cache_stats(tl, steps))  # device memory over the steps (allocator events), when the trace has them
    v.update(program_facts(tl, v))  # framework, attention_kind, gpu_arch: what the advice is written for
    v["tensor_core_dtypes"] = tensor_core_dtypes(tl.devices, v["gpu_arch"])
    if tl.device_memory and "device_memory_total_gb" not in v:  # headroom can come from a snapshot of the run
        v["device_memory_total_gb"] = tl.device_memory / float(1 << 30)
    if v["workload_kind"] == "inference":  # measured: no optimizer work at all
        v.setdefault("optimizer_kernels_per_step", 0.0)
        v.setdefault("optimizer_step_pct", 0.0)


def timeline_metrics(tl: Timeline) -> TimelineMetrics:
    """All single-timeline metrics (see the catalogue for their meaning)."""
    # a long timeline's analyses each leave their temporaries' pages in the C heap: they go back before the ones
    # whose temporaries set the peak (each trim's pages are faulted in again: one before every stage cost more)
    release = heap_release_for(len(tl.gpu) + len(tl.host) + len(tl.ranges))
    release()  # (and the reader's)
    tv = TimelineView(tl)
    setup, steps, v, notes = _steps_measured(tl, tv)
    tv.forget("launch_ns")  # (the steps' cuts; built again where a later stage needs every row's)
    if len(tv.op_tree):  # (built for host_activity and kept on the view: its build's temporaries go back first)
        release()
    act = host_activity(tv)
    release()
    if len(setup.intervals) and len(act.alloc):  # start-up allocations (context creation) are not churn
        act = replace(act, alloc=subtract(act.alloc, setup.intervals))
    util = _utilization(tv, steps, act, v, notes)
    if util is None:
        notes.append("no GPU activity (kernels, copies, memsets) in the trace: utilization and kernel facts "
                     "are not measured; profile with CUDA activity on (`nsys profile -t cuda` or "
                     "ProfilerActivity.CUDA)")
        return TimelineMetrics(v, [], [], notes, None)
    step_rows, comm, strip_gaps = util
    act = replace(act, launch=IntervalSet.of([], []), cuda=IntervalSet.of([], []))  # only idle gaps need them (large)

    kt = kernel_table(tv, steps)
    categories_chart = _kernel_mix(kt, steps, v)
    strip = step_strip(tv, kt, steps, *strip_gaps, tl.rank) if strip_gaps is not None else None
    kernel_rows = top_kernels(kt, steps, v["step_time_ms_mean"])
    release()
    op_rows = op_distribution(kt, steps)
    att = dict(CATEGORY_PATTERNS)["attention"]  # where `ncu -k regex:` on the attention kernels lands
    v.update({f"ncu_attention_{k[4:]}": x for k, x in ncu_window(kt, steps, att).items()})
    v.update(op_facts(op_rows))
    roofline_rows, roofline_facts, roofline_notes, roofline_kernels, at_roof = op_roofline(tl, kt, steps)
    v.update(roofline_facts)
    notes.extend(roofline_notes)
    release()
    _work_facts(tl, tv, kt, steps, act, setup, v)

    summary = RankSummary(tl.rank if tl.rank is not None else -1, v["step_time_ms_mean"],
                          v["comm_kernel_ms_per_step"], v["gpu_busy_pct"],
                          {c: v[IDLE_FACT[c]] for c in IDLE_CLASSES})
    graph = step_graph(tv, steps, at_roof)
    if graph is not None and v.get("decode_recompute_work_ratio"):  # what a KV cache would spare each pass
        graph.decode_tokens = float(v["decode_recompute_work_ratio"])
    release()
    gaps_between_ops = host_gaps(tv, steps)
    return TimelineMetrics(v, _steps_chart(step_rows, steps), categories_chart, notes, summary, comm, kernel_rows,
                           op_rows, strip, roofline=roofline_rows, steps=step_rows, roofline_kernels=roofline_kernels,
                           step_graph=graph, host_gaps=gaps_between_ops)


def _steps_chart(rows: list[StepRow], steps) -> list[dict]:
    """The steps chart: the steps table's rows, the first saying how many steady steps there are when it holds
    fewer (the first CHART_STEPS only)."""
    chart = [row_dict(r) for r in rows]
    if steps.steady.size > len(chart) > 0:
        chart[0]["of"] = int(steps.steady.size)
    return chart


def tensor_core_dtypes(devices: list[dict], arch: str = "unknown") -> str:
    """What the GPU's tensor cores take, from its compute capability (the trace's device
    properties): Ampere and later (8.0+) TF32, bf16 and fp16; Volta / Turing (7.x) fp16 only.
    Without device properties, from the generation the kernel names are built for (`gpu_arch`)."""
    ccs = [d.get("cc", "") for d in devices if d.get("cc")]
    if not ccs:
        return {"kepler": "none", "maxwell": "none", "pascal": "none", "volta": "fp16", "turing": "fp16", "ampere": "tf32,bf16,fp16", "ada": "tf32,bf16,fp16",
                "hopper": "tf32,bf16,fp16", "blackwell": "tf32,bf16,fp16"}.get(arch, "unknown")
    try:
        major = min(int(str(cc).split(".")[0]) for cc in ccs)
    except ValueError:
        return "unknown"
    return "tf32,bf16,fp16" if major >= 8 else "fp16" if major == 7 else "none"


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


_PY_FILE = lazy_pattern(r"^([^()]+\.py)\(\d+\): (.*)$")


def timeline_identity(tl: Timeline) -> dict:
    """What places a timeline among other inputs of the run: its span on the Unix clock (when the source
    records the offset), the Python files its stack ranges name (with_stack), its devices' memory."""
    out: dict = {}
    spans = [(int(t["start_ns"].min()), int(t["end_ns"].max())) for t in (tl.gpu, tl.host, tl.ranges) if len(t)]
    if tl.clock_epoch_ns is not None and spans:
        out["window_epoch_ns"] = (tl.clock_epoch_ns + min(s for s, _ in spans), tl.clock_epoch_ns + max(e for _, e in spans))
    py = tl.ranges["name"][tl.ranges["kind"] == "python"] if len(tl.ranges) else []
    names = set(py)
    py_file = _PY_FILE().search if names else None
    frames = [m for n in names for m in [py_file(str(n))] if m]
    out.update(program_identity((m.group(1) for m in frames), ((m.group(1), m.group(2)) for m in frames)))
    if tl.device_memory:
        out["device_total_memory"] = tl.device_memory
    return out


def measure_timeline(tl: Timeline) -> MeasuredTimeline:
    """The per-rank part of the analysis: one Timeline -> its compact MeasuredTimeline."""
    return MeasuredTimeline(tl.path, tl.source, tl.rank, tl.world_size, timeline_metrics(tl), tl.process_groups,
                            timeline_identity(tl))
