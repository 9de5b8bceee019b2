"""One run, several sources: the analyses of one run's inputs merged into one AnalysisResult.

Timelines of one run (an Nsight Systems export and a PyTorch trace of the same steps): the run-level
facts are the primary timeline's, Nsight Systems where there is one (it traces CUDA with little
overhead; the torch profiler's per-op instrumentation stretches host time and so the steps); facts
only another timeline measures are added with their own source, and a headline number two sources
disagree on by more than DISAGREE_PCT is named in a note with the value used and why.

Nsight Compute launches are matched to the primary timeline's kernels by demangled name and launch
configuration (grid, block): a matched launch's `kernel_time_share_pct` becomes its kernel's share of
step time on the timeline (split evenly over the report's launches of that kernel, so the launches of
one kernel sum to the kernel's share), its ncu-only share is kept as `kernel_ncu_time_share_pct`, and
its findings are stated in step time (AnalysisResult.gain_units: their gain, and `{gain_of}` in their
text) so they rank against the timeline's idle-gap findings. Unmatched launches keep their ncu-only
share, with a note. With a PyTorch trace's per-op roofline in the run, `charts["roofline_ncu"]` sets
each op's numbers from the shapes next to ncu's measured ones (runs/roofline_ncu.py).

A memory snapshot or memory_stats of the run (joined on evidence: diagnoser.runs.grouping) adds its
facts, and where the timeline has no allocator events of its own (a trace without profile_memory, an
Nsight Systems export) it supplies the inference tree's memory numbers: the allocator's peak reserved
against the timeline's device size (memory_headroom_*), and what was allocated when it was taken
(mem_persistent_*: a server's snapshot between steps holds the weights and the KV cache).
"""
from __future__ import annotations

from dataclasses import replace

from .. import settings
from ..facts import AnalysisResult, Fact
from ..kernel_names import MATCH_KEY, short_name
from ..input_family import RunRole
from .grouping import launch_in, ncu_launches, timeline_durations
from .roofline_ncu import side_by_side

DISAGREE_PCT = settings.register(
    "crosssource.disagree_pct", 5.0, "%",
    "two sources of one run disagree on a headline number when they differ by more than this (relative)")
# headline numbers compared across the timelines of one run (and shown in a note when they disagree)
COMPARED = ("step_time_ms_p50", "gpu_busy_pct", "kernel_time_ms_per_step", "kernels_per_step", "syncs_per_step",
            "top_kernel_pct")
WHY_NSYS = "Nsight Systems traces CUDA with little overhead; the PyTorch profiler's per-op instrumentation stretches host time and steps"


def _is_nsys(group) -> bool:
    return any(k.startswith("nsys") for k in group.kinds)


def _run_facts(result) -> dict[str, Fact]:
    return {f.name: f for f in result.facts if f.subject is None}


def _disagreement(name: str, used: Fact, other: Fact) -> str | None:
    a, b = used.value, other.value
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    base = max(abs(a), abs(b))
    if base == 0 or abs(a - b) / base * 100 <= DISAGREE_PCT.value:
        return None
    return f"{name} {a:.4g} {used.unit} ({used.source}) vs {b:.4g} {other.unit} ({other.source})"


def merge_run(run) -> AnalysisResult:
    """The run's merged result (the ncu launches matched to the timeline: in its gain_units)."""
    timelines = [(g, r) for g, r in run.members if g.family.role is RunRole.TIMELINE]
    others = [(g, r) for g, r in run.members if g.family.role is not RunRole.TIMELINE]
    timelines.sort(key=lambda gr: not _is_nsys(gr[0]))  # the primary first
    pg, primary = timelines[0]
    out = AnalysisResult(charts=dict(primary.charts), tables=primary.tables, notes=list(run.evidence),
                         step_graph=primary.step_graph)
    for _, r in run.members:
        out.inputs += r.inputs
        out.notes += r.notes
    facts = list(primary.facts)
    have = _run_facts(primary)
    disagree = []
    for g, r in timelines[1:]:
        for name, f in _run_facts(r).items():
            if name not in have:
                facts.append(f)
                have[name] = f
            elif name in COMPARED:
                d = _disagreement(name, have[name], f)
                if d:
                    disagree.append(d)
        facts += [f for f in r.facts if f.subject is not None]
    if disagree:
        why = WHY_NSYS if _is_nsys(pg) else "the first timeline given is used"
        out.notes.append(f"the sources of this run disagree: {'; '.join(disagree)}. The report uses "
                         f"{', '.join(pg.paths)}'s numbers ({why}).")
    memory = [(g, r) for g, r in others if g.family.role is RunRole.MEMORY]
    kv, note = _memory_headroom(have, memory)
    facts += kv
    if note:
        out.notes.append(note)
    for g, r in others:
        if g.family.role is not RunRole.KERNEL_PROFILE:
            facts += r.facts
            for k, v in r.charts.items():  # the memory timeline and composition
                out.charts.setdefault(k, v)
            out.tables = out.tables.filled_from(r.tables)
            continue
        kf, ids, note = _kernel_facts(r, primary, pg)
        facts += kf
        out.gain_units.update({l["subject"]: {"GPU time": "step time"} for l in ncu_launches(r) if l["id"] in ids})
        if note:
            out.notes.append(note)
        if ids:
            top = (primary.tables.kernels or [None])[0]
            if any(l["id"] in ids and l["key_name"] == short_name(top.name if top else None, MATCH_KEY)
                   for l in ncu_launches(r)):
                facts.append(Fact("ncu_profiled_top_kernel", short_name(top.name), "", f"{', '.join(g.paths)} (ncu)"))
        for k, v in r.charts.items():
            out.charts.setdefault(k, v)
        out.tables = out.tables.filled_from(r.tables)
        shaped = next((t for _, t in timelines if t.tables.roofline), None)
        if shaped is not None and "roofline_ncu" not in out.charts:
            out.charts["roofline_ncu"] = side_by_side(shaped, r)
    out.facts = facts
    return out


def _memory_headroom(have: dict[str, Fact], memory: list) -> tuple[list[Fact], str]:
    """The inference tree's memory facts from the run's memory input, where the timeline lacks them (no
    allocator events; or an Nsight Systems memory-usage export, which knows what is reserved but not
    what is allocated): each fact the timeline measured itself is kept."""
    total = have.get("device_memory_total_gb")
    if total is None or not total.value:
        return [], ""
    for g, r in memory:
        mf = _run_facts(r)
        peak = mf.get("peak_reserved_gib")
        if peak is None:
            continue
        both = f"{peak.source} and {total.source}"
        free = max(float(total.value) - float(peak.value), 0.0)
        out = [Fact("mem_reserved_peak_gb", peak.value, "GiB", peak.source),
               Fact("memory_headroom_gb", free, "GiB", both),
               Fact("memory_headroom_pct", 100.0 * free / float(total.value), "%", both)]
        if "peak_allocated_gib" in mf:
            out.append(replace(mf["peak_allocated_gib"], name="mem_allocated_peak_gb"))
        grow = mf.get("profiler_step_growth_mib")
        if grow is not None:  # the snapshot's own view of the profiled steps
            out.append(Fact("mem_growth_mb_per_step", float(grow.value) * (1 << 20) / 1e6, "MB", grow.source))
        held = mf.get("current_allocated_gib")
        if held is not None:
            out.append(replace(held, name="mem_persistent_gb"))
            out.append(Fact("mem_persistent_pct", 100.0 * float(held.value) / float(total.value), "%",
                            f"{held.source} and {total.source}"))
        out = [f for f in out if f.name not in have]  # what the timeline measured itself stays its own
        if not out:
            return [], ""
        names = ", ".join(f.name for f in out)
        return out, (f"{names} come from {', '.join(g.paths)} (the timeline does not measure them): peak reserved over "
                     "its history against the timeline's device size, what was allocated when it was taken as what "
                     "stays across steps")
    return [], ""


def _kernel_facts(result, timeline, tgroup) -> tuple[list[Fact], set[str], str]:
    """The ncu result's facts with matched launches' shares in step-time units."""
    durations = timeline_durations(timeline)
    rows: dict[tuple, dict] = {}
    for r in timeline.tables.kernels or []:
        key = (short_name(r.name, MATCH_KEY), r.grid, r.block)
        acc = rows.setdefault(key, {"step_share_pct": 0.0, "launches_per_step": 0.0})
        acc["step_share_pct"] += r.step_share_pct
        acc["launches_per_step"] += r.launches_per_step
    launches = ncu_launches(result)
    per_key: dict[tuple, int] = {}
    for l in launches:
        key = (l["key_name"], l.get("grid"), l.get("block"))
        per_key[key] = per_key.get(key, 0) + 1
    share: dict[str, tuple[float, float]] = {}
    for l in launches:
        key = (l["key_name"], l.get("grid"), l.get("block"))
        if launch_in(l, durations):
            row = rows[key]
            share[l["id"]] = (row["step_share_pct"] / per_key[key], row["launches_per_step"])
    tsrc = timeline.facts[0].source if timeline.facts else ", ".join(tgroup.paths)
    out = []
    for f in result.facts:
        if f.subject is not None and f.subject.id in share and f.name == "kernel_time_share_pct":
            step_share, per_step = share[f.subject.id]
            out.append(Fact("kernel_ncu_time_share_pct", f.value, f.unit, f.source, f.subject))
            out.append(replace(f, value=step_share, source=tsrc))
            out.append(Fact("kernel_launches_per_step", per_step, "count", tsrc, f.subject))
        else:
            out.append(f)
    unmatched = [l for l in launches if l["id"] not in share]
    note = ""
    if unmatched:
        names = sorted({short_name(l.get("name") or "") for l in unmatched})
        ncu_share = sum(l.get("share", 0.0) for l in unmatched)
        note = (f"{len(unmatched)} of {len(launches)} Nsight Compute launches ({', '.join(names[:5])}"
                f"{', ...' if len(names) > 5 else ''}) match no kernel of the timeline by name, grid/block and duration: "
                f"their shares are of the ncu report's GPU time only ({ncu_share:.1f}% of it)")
    return out, set(share), note
