"""Many ranks at a glance: ranks grouped when they behave alike, and each collective's time split
into transfer and waiting for peers.

`ranks_analysis(measured)` is the cross-rank analysis (timeline.measured_analysis: facts, straggler,
run-level breakdown) plus, for 2+ ranks:
  charts["rank_groups"]: [{ranks, count, step_ms, comm_wait_ms, own_work_pct, busy_pct, idle_top_class,
                           straggler}] ranks that behave alike (NCCL wait and own work within a few % of
                           the step of each other), latest arrivers first;
  charts["collectives"]: [{collective, stream, process_group, calls_per_step, transfer_ms, wait_ms,
                           max_wait_ms, max_wait_rank, last_rank}] per collective kind and NCCL stream (each
                           process group has its own NCCL streams; process_group is named when the trace
                           lists only one), per step, mean over ranks; most waited first;
and a note for each, so 512 ranks read as a few lines, not 512. Pure: renders nothing.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..facts import AnalysisResult
from .analysis import measured_analysis
from .ranks import transfer_per_kernel
from .names import lazy_pattern

# ranks are alike when their NCCL wait and their own work differ by less than this share of the step
ALIKE_PCT_OF_STEP = 5.0
GROUPS_IN_NOTE = 4
MIN_RANKS_TO_GROUP = 3  # two ranks are their own groups: the straggler finding already compares them
COLLECTIVES_IN_NOTE = 3


def ranks_analysis(measured: list) -> AnalysisResult:
    """measured_analysis, plus rank groups and the per-collective breakdown of a many-rank run."""
    result = measured_analysis(measured)
    timed = [m for m in sorted(measured, key=lambda t: (t.rank if t.rank is not None else 1 << 30, t.path))
             if m.metrics.rank is not None]
    if len(timed) < 2:
        return result
    straggler = {int(f.subject.id) for f in result.facts  # the ranks' own facts, not the chart drawn from them
                 if f.name == "rank_is_straggler" and f.value is True and f.subject is not None}
    groups = rank_groups([m.metrics.rank for m in timed], straggler)
    result.charts["rank_groups"] = groups
    if len(timed) >= MIN_RANKS_TO_GROUP:
        result.notes.append(_groups_note(groups, len(timed)))
    if all(m.metrics.comm is not None and m.metrics.comm.kernels.name is not None for m in timed):
        rows = collective_breakdown(timed)
        pgs = timed[0].process_groups or []
        for r in rows:  # with one process group, every collective is on it
            r["process_group"] = _pg_name(pgs[0]) if len(pgs) == 1 else ""
        if rows:
            result.charts["collectives"] = rows
            result.notes.append(_collectives_note(rows, pgs))
    return result


def rank_ranges(ranks) -> str:
    """`0-40, 42-63` for a set of rank numbers."""
    rs = sorted(set(int(r) for r in ranks))
    parts, start = [], None
    for i, r in enumerate(rs):
        if start is None:
            start = r
        if i + 1 == len(rs) or rs[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(parts)


def _split(order: list[int], value, tol: float) -> list[list[int]]:
    """Cut `order` (indices sorted by value) where consecutive values differ by more than tol."""
    out, cur = [], [order[0]]
    for a, b in zip(order, order[1:]):
        if value(b) - value(a) > tol:
            out.append(cur)
            cur = []
        cur.append(b)
    out.append(cur)
    return out


def rank_groups(summaries: list, straggler: set) -> list[dict]:
    """Ranks that behave alike: sorted by NCCL time and cut where it jumps by more than
    ALIKE_PCT_OF_STEP of the step, then each part cut the same way on own work (% of step)."""
    step = float(np.mean([s.step_ms for s in summaries])) or 1.0
    tol_ms = ALIKE_PCT_OF_STEP / 100.0 * step
    by_wait = sorted(range(len(summaries)), key=lambda i: (summaries[i].comm_ms, summaries[i].rank))
    groups = []
    for part in _split(by_wait, lambda i: summaries[i].comm_ms, tol_ms):
        by_own = sorted(part, key=lambda i: (summaries[i].own_work_pct, summaries[i].rank))
        groups += _split(by_own, lambda i: summaries[i].own_work_pct, ALIKE_PCT_OF_STEP)
    rows = []
    for g in groups:
        ss = [summaries[i] for i in g]
        top = Counter(max(s.idle_by_class_pct.items(), key=lambda kv: (kv[1], kv[0]))[0]
                      for s in ss if s.idle_by_class_pct)
        rows.append({
            "ranks": rank_ranges(s.rank for s in ss), "count": len(ss),
            "first_rank": min(s.rank for s in ss),
            "step_ms": float(np.mean([s.step_ms for s in ss])),
            "comm_wait_ms": float(np.mean([s.comm_ms for s in ss])),
            "comm_wait_ms_min": float(min(s.comm_ms for s in ss)),
            "comm_wait_ms_max": float(max(s.comm_ms for s in ss)),
            "own_work_pct": float(np.mean([s.own_work_pct for s in ss])),
            "busy_pct": float(np.mean([s.busy_pct for s in ss])),
            "idle_top_class": min(top, key=lambda c: (-top[c], c)) if top else "",
            "straggler": any(s.rank in straggler for s in ss),
        })
    rows.sort(key=lambda r: (r["comm_wait_ms"], r["first_rank"]))
    return rows


def _groups_note(groups: list[dict], n: int) -> str:
    if len(groups) == 1:
        g = groups[0]
        return (f"{n} ranks behave alike (NCCL wait and own work within {ALIKE_PCT_OF_STEP:.0f}% of the step): "
                f"step {g['step_ms']:.1f} ms, {g['comm_wait_ms']:.1f} ms per step in NCCL, own work {g['own_work_pct']:.0f}%")
    parts = []
    for g in groups[:GROUPS_IN_NOTE]:
        who = f"rank {g['ranks']}" if g["count"] == 1 else f"ranks {g['ranks']} ({g['count']})"
        parts.append(f"{who}{' [straggler]' if g['straggler'] else ''}: {g['comm_wait_ms']:.1f} ms per step in NCCL, "
                     f"own work {g['own_work_pct']:.0f}% of the {g['step_ms']:.1f} ms step (idle mostly {g['idle_top_class']})")
    more = f"; {len(groups) - GROUPS_IN_NOTE} more groups in the HTML report" if len(groups) > GROUPS_IN_NOTE else ""
    late, rest = groups[0], groups[1:]
    others = sum(g["count"] for g in rest)
    cost = ""
    if late["count"] < others:  # a minority arrives last: what it costs everyone else
        extra = sum(g["count"] * g["comm_wait_ms"] for g in rest) / others - late["comm_wait_ms"]
        cost = (f". The other {others} ranks wait {extra:.1f} ms per step ({100.0 * extra / max(late['step_ms'], 1e-9):.0f}% "
                f"of the step) longer in NCCL than rank{'s' if late['count'] > 1 else ''} {late['ranks']}")
    return (f"{n} ranks in {len(groups)} groups that behave alike, the latest to arrive at the collectives first: "
            + "; ".join(parts) + more + cost)


KERNEL_PREFIX = lazy_pattern(r"^(?:void\s+)?nccl(?:Dev)?Kernel_")


def collective_name(kernel: str) -> str:
    """`ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)` -> `AllReduce_Sum_f32_RING_LL`."""
    name = str(kernel).split("(", 1)[0].strip()
    return KERNEL_PREFIX().sub("", name) or name


def collective_breakdown(timed: list) -> list[dict]:
    """Per collective kind and NCCL stream: calls, transfer and waiting for peers per step (mean over
    ranks), the rank that waits most and the one that waits least (arrives last) there."""
    kernels = [m.metrics.comm.kernels for m in timed]
    transfers, _ = transfer_per_kernel(kernels)
    per: dict = {}
    for m, k, tr in zip(timed, kernels, transfers):
        steps = max(m.metrics.comm.steps, 1)
        ordinal = {s: i for i, s in enumerate(np.unique(k.stream).tolist())}
        wait = (k.dur - tr).astype(np.float64)
        for j in range(len(k.start)):
            key = (collective_name(k.name[j]), ordinal[int(k.stream[j])])
            acc = per.setdefault(key, {})
            a = acc.setdefault(m.metrics.rank.rank, [0, 0.0, 0.0, steps])
            a[0] += 1
            a[1] += float(tr[j])
            a[2] += float(wait[j])
    rows = []
    for (name, stream), acc in per.items():
        ranks = sorted(acc)
        calls = [acc[r][0] / acc[r][3] for r in ranks]
        transfer = [acc[r][1] / 1e6 / acc[r][3] for r in ranks]
        wait = [acc[r][2] / 1e6 / acc[r][3] for r in ranks]
        hi, lo = int(np.argmax(wait)), int(np.argmin(wait))
        rows.append({"collective": name, "stream": stream, "ranks": len(ranks),
                     "calls_per_step": float(np.mean(calls)), "transfer_ms": float(np.mean(transfer)),
                     "wait_ms": float(np.mean(wait)), "max_wait_ms": float(wait[hi]), "max_wait_rank": ranks[hi],
                     "last_rank": ranks[lo]})
    rows.sort(key=lambda r: (-r["wait_ms"], r["collective"], r["stream"]))
    return rows


def _pg_name(pg: dict) -> str:
    size = f", {pg['size']} ranks" if pg.get("size") else ""
    return f"{pg.get('desc') or pg.get('name')} (process group {pg.get('name')}{size})"


def _collectives_note(rows: list[dict], pgs: list[dict]) -> str:
    if len(pgs) == 1:
        where = f"all on {_pg_name(pgs[0])}"
    elif pgs:
        where = (f"{len(pgs)} process groups ({', '.join(_pg_name(pg) for pg in pgs[:6])}"
                 f"{', ...' if len(pgs) > 6 else ''}), each on NCCL streams of its own; the trace does not say which "
                 "stream serves which group")
    else:
        where = "each process group runs on NCCL streams of its own"
    parts = [f"{r['collective']} on NCCL stream #{r['stream']}: {r['calls_per_step']:.0f} per step, transfer "
             f"{r['transfer_ms']:.2f} ms, waiting for peers {r['wait_ms']:.2f} ms per step (mean over {r['ranks']} ranks; "
             f"rank {r['max_wait_rank']} waits most, {r['max_wait_ms']:.2f} ms; rank {r['last_rank']} arrives last)"
             for r in rows[:COLLECTIVES_IN_NOTE]]
    more = f"; {len(rows) - COLLECTIVES_IN_NOTE} more in the HTML report" if len(rows) > COLLECTIVES_IN_NOTE else ""
    return (f"NCCL time by collective ({where}; stream #k is a rank's k-th NCCL stream), most waited first: "
            + "; ".join(parts) + more)


__all__ = ["ranks_analysis", "rank_groups", "collective_breakdown", "collective_name", "rank_ranges"]
