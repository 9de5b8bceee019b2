"""Timeline analysis: one set of metrics for Nsight Systems exports and PyTorch profiler traces.

`measured_analysis(measured)` takes one measured Timeline (or one per rank of a distributed run) and
returns facts for the train-slow / inference-slow trees plus chart series:
  charts["steps"]: per steady step {step, start_ms, dur_ms, busy_ms, idle_ms_by_class: {class: ms}}
  charts["kernel_categories"]: [{category, time_ms, share_pct}]
  charts["ranks"] (2+ ranks): [{rank, step_ms, busy_pct, comm_wait_ms, straggler}]
  charts["step_strip"]: one steady step per rank (strip.py): streams with kernels, gaps, host explanations
  charts["top_kernels"], charts["top_ops"]: the kernels and ops tables' rows as the report draws them
and the typed tables run grouping and compare read (result_tables.py): result.tables.steps, .kernels, .ops,
.host_gaps, .roofline, .roofline_kernels.
Metrics cover the steady-state steps only (the first step is warm-up). Each timeline is measured on
its own (measure.py, in the per-rank workers); this module is the cross-rank part: the ranks'
measurements -> run-level and per-rank facts. Pure: renders nothing.
"""
from __future__ import annotations

import math

import numpy as np

from ..facts import AnalysisResult, Fact, Subject
from ..result_tables import ResultTables, row_dict
from .catalogue import SPECS
from .gaps import ALLOC, COMM, DATA, IDLE_CLASSES, LAUNCH, SYNC
from .intervals import IntervalSet
from ..identity import PYTHON_FILES_KEPT
from .measure import IDLE_FACT, READER, MeasuredTimeline, TimelineMetrics
from .ranks import critical_rank, straggler_analysis, transfer_per_kernel

STRIP_RANKS = 8  # ranks stacked in the step strip


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


def _run_identity(parts: list[dict]) -> dict:
    """The ranks' identities as one: the union of their windows and files, the largest device."""
    out: dict = {}
    wins = [p["window_epoch_ns"] for p in parts if p.get("window_epoch_ns")]
    if wins:
        out["window_epoch_ns"] = (min(w[0] for w in wins), max(w[1] for w in wins))
    for key in ("python_files", "programs"):
        files = sorted({f for p in parts for f in p.get(key, ())})
        if files:
            out[key] = files[:PYTHON_FILES_KEPT]
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

    result.step_graph = shown.step_graph
    result.tables = ResultTables(steps=shown.steps, kernels=shown.kernels, ops=shown.ops,
                                 host_gaps=shown.host_gaps or None, roofline=shown.roofline,
                                 roofline_kernels=shown.roofline_kernels)
    result.charts["steps"] = shown.steps_chart
    result.charts["kernel_categories"] = shown.categories_chart
    result.charts["top_kernels"] = [row_dict(r) for r in shown.kernels]
    result.charts["top_ops"] = [row_dict(r) for r in shown.ops]
    result.charts["roofline"] = shown.roofline_chart
    result.charts["source"] = {"path": ordered[metrics.index(shown)].path,
                               "rank": shown.rank.rank if shown.rank is not None and len(metrics) > 1 else None}
    strips = [m.strip for m in metrics if m.strip]
    if strips:  # ranks stacked: the drawn rank first, then the others in rank order, a few at most
        first = [shown.strip] if shown.strip else []
        result.charts["step_strip"] = (first + [x for x in strips if x is not shown.strip])[:STRIP_RANKS]
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
