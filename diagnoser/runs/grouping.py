"""Which inputs are one run: decided from what they measured, never from their file names.

A timeline (Nsight Systems export, PyTorch trace, or the ranks of one distributed run) and a
timeline of the other tool are one run when most of each one's steady kernel time is in kernels
the other runs with the same launch configuration (demangled name, grid, block) for a similar time
per step (an Nsight Systems run and a torch-profiler run of one script are one workload, profiled
twice: their times on the Unix clock may differ); two files of the same tool are two profiling
sessions, never merged; an Nsight Compute report belongs to a
timeline when most of its profiled GPU time is in launches whose (name, grid, block) the timeline
runs. The same file given twice (by another path or as a copy) is read once.

Memory inputs (snapshots, memory_stats) carry no kernels to match on; a memory input joins a
timeline's run on evidence (`memory_evidence`): its allocation history and the timeline overlap on
the Unix clock (snapshot `time_us`; Kineto baseTimeNanoseconds, the Nsight Systems session start),
or both ran the same program (the main script of their outermost Python frames; else the user's own
files both name). Evidence against (another program, another time with no stacks to show the
program, more memory held than the timeline's device has) keeps it apart. With no evidence either way (memory_stats counters carry neither time nor frames) it joins
the run when that is the only timeline run given, and the report says that this is why.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from .. import settings
from ..input_family import RunRole
from ..kernel_names import MATCH_KEY, short_name

SAME_RUN_SHARE = settings.register(
    "runs.same_run_kernel_share", 0.6, "fraction",
    "two timelines are one run when at least this share of each one's steady kernel time is in kernels "
    "(name, grid, block) the other runs; an ncu report joins a timeline when this share of its GPU time is")
SAME_TIME_SLACK = settings.register(
    "runs.memory_time_slack_s", 5.0, "s",
    "two inputs are of one process only when their spans on the Unix clock (where both record it: a snapshot's "
    "allocation history, a trace's events) overlap or lie at most this far apart")
READ_CHUNK = 1 << 20
GIB = float(1 << 30)
# a snapshot holding more than the timeline's device (plus rounding) is of another device
DEVICE_MEMORY_SLACK = 1.01
# A launch matches a kernel only at a similar duration too: persistent GEMM kernels (nvjet, CUTLASS
# stream-K) run with grid = SM count at every problem size. Nsight Compute locks clocks to base, so
# its durations run longer than the timeline's; two timelines of one run agree more closely.
NCU_DURATION_FACTOR = 2.0
TIMELINE_TIME_FACTOR = 1.5


@dataclass
class Run:
    """The analysed groups (pipeline.Group + its AnalysisResult) that describe one run."""

    members: list = field(default_factory=list)  # [(Group, AnalysisResult)]
    evidence: list[str] = field(default_factory=list)  # why they were joined, for the report's notes

    @property
    def paths(self) -> list[str]:
        return [p for g, _ in self.members for p in g.paths]


def _identity(path: str):
    """(size, sha256) of a local file, None for what cannot be hashed here (URLs, unreadable)."""
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(READ_CHUNK):
                h.update(chunk)
        return os.path.getsize(path), h.hexdigest()
    except OSError:
        return None


def unique_inputs(paths: list[str]) -> tuple[list[str], list[str]]:
    """The paths with repeats dropped (the same file by another name, or a byte-identical copy), and a
    note per dropped one."""
    seen: dict = {}
    kept, notes = [], []
    # only files of equal size can be copies: hash those alone (issue 14: no work on an input before
    # its reader has had the chance to refuse it; a 2 GiB hostile file was hashed in full first)
    sizes = Counter(os.path.getsize(p) for p in paths if os.path.isfile(p))
    for p in paths:
        key = None
        if os.path.isfile(p):
            size = os.path.getsize(p)
            key = _identity(p) if sizes[size] > 1 else ("size", size)
        real = os.path.realpath(p) if key is not None else p
        first = seen.get(key) if key is not None else None
        if first is not None:
            how = "is the same file as" if os.path.realpath(first) == real else "has the same bytes as"
            notes.append(f"{p} {how} {first}: read once")
            continue
        if key is not None:
            seen[key] = p
        kept.append(p)
    return kept, notes


def timeline_kernels(result) -> dict[tuple, float]:
    """(name, grid, block) -> ms per steady step, from a timeline result's kernels table."""
    out: dict[tuple, float] = {}
    for r in result.tables.kernels or []:
        key = (short_name(r.name, MATCH_KEY), r.grid, r.block)
        out[key] = out.get(key, 0.0) + r.ms_per_step
    return out


def timeline_durations(result) -> dict[tuple, tuple[float, float]]:
    """(name, grid, block) -> (shortest, longest) launch in us on the timeline."""
    out: dict[tuple, tuple[float, float]] = {}
    for r in result.tables.kernels or []:
        key = (short_name(r.name, MATCH_KEY), r.grid, r.block)
        lo, hi = out.get(key, (float("inf"), 0.0))
        out[key] = (min(lo, r.min_us), max(hi, r.max_us))
    return out


def launch_in(launch: dict, durations: dict) -> bool:
    """An ncu launch matches a timeline kernel: same (name, grid, block), duration in its range (ncu's
    base clocks allowed for)."""
    key = (launch["key_name"], launch.get("grid"), launch.get("block"))
    if key not in durations:
        return False
    lo, hi = durations[key]
    d = launch.get("duration_us")
    return d is None or lo / NCU_DURATION_FACTOR <= d <= hi * NCU_DURATION_FACTOR


def ncu_launches(result) -> list[dict]:
    """[{id, name, grid, block, share}] per launch of a kernel (ncu) result."""
    by: dict[str, dict] = {}
    for f in result.facts:
        if f.subject is None or f.subject.kind != "kernel":
            continue
        d = by.setdefault(f.subject.id, {"id": f.subject.id, "name": f.subject.name, "subject": f.subject,
                                         "key_name": short_name(f.subject.name, MATCH_KEY)})
        if f.name == "grid_blocks_count":
            d["grid"] = int(f.value)
        elif f.name == "block_threads_count":
            d["block"] = int(f.value)
        elif f.name == "kernel_time_share_pct":
            d["share"] = float(f.value)
        elif f.name == "kernel_duration_us":
            d["duration_us"] = float(f.value)
    return list(by.values())


def _covered(weights: dict[tuple, float], other: dict[tuple, float]) -> float:
    """Share of `weights` (ms per step by kernel) in kernels `other` runs for a similar time per step."""
    total = sum(weights.values())
    hit = sum(w for k, w in weights.items()
              if k in other and max(w, other[k]) <= TIMELINE_TIME_FACTOR * max(min(w, other[k]), 1e-9))
    return hit / total if total > 0 else 0.0


def timelines_match(a, b) -> float:
    """The smaller of the two shares of kernel time each timeline spends in the other's kernels."""
    ka, kb = timeline_kernels(a), timeline_kernels(b)
    return min(_covered(ka, kb), _covered(kb, ka))


def ncu_match(timeline, kernels) -> float:
    """The smaller of the shares of the ncu report's launches, and of its profiled GPU time, that the
    timeline runs (launch_in): a few shared persistent GEMMs must not tie two workloads together."""
    durations = timeline_durations(timeline)
    launches = ncu_launches(kernels)
    total = sum(l.get("share", 0.0) for l in launches)
    hits = [l for l in launches if launch_in(l, durations)]
    if not launches or total <= 0:
        return 0.0
    return min(sum(l.get("share", 0.0) for l in hits) / total, len(hits) / len(launches))


def _utc(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns / 1e9)) + " UTC"


def _span(w) -> str:
    return f"{_utc(w[0])} to {time.strftime('%H:%M:%S', time.gmtime(w[1] / 1e9))}"


def _seconds_apart(a, b) -> float | None:
    """Seconds between two inputs' spans on the Unix clock (0 when they overlap); None if either lacks one."""
    wa, wb = a.identity.get("window_epoch_ns"), b.identity.get("window_epoch_ns")
    if not wa or not wb:
        return None
    return max(wa[0] - wb[1], wb[0] - wa[1], 0) / 1e9


def program_evidence(ti: dict, mi: dict, other: str = "the other") -> tuple[bool | None, str]:
    """Did two inputs (their identities) run the same program? (True, why) when their main scripts, else
    the user's Python files of their frames, meet; (False, why) when both record some and none meet;
    (None, "") when either records none."""
    tp, mp = set(ti.get("programs", ())), set(mi.get("programs", ()))
    if tp and mp:  # the main scripts: the program itself, not a helper module two programs share
        common = sorted(tp & mp)
        if common:
            return True, f"both ran the program {', '.join(common[:3])} (the script of their outermost Python frames)"
        return False, (f"it ran {', '.join(sorted(mp)[:3])}, {other} {', '.join(sorted(tp)[:3])}: another program")
    tf, mf = set(ti.get("python_files", ())), set(mi.get("python_files", ()))
    if tf and mf:
        common = sorted(tf & mf)
        if common:  # one program, perhaps another run of it (a snapshot taken apart from the profiled run)
            return True, f"both name the Python file{'s' if len(common) > 1 else ''} {', '.join(common[:3])} of the same program"
        return False, (f"its frames name {', '.join(sorted(mf)[:3])}, {other}'s stacks "
                       f"{', '.join(sorted(tf)[:3])}: no file in common")
    return None, ""


def memory_evidence(timeline, memory) -> tuple[bool | None, str]:
    """Is a memory input (its AnalysisResult) of a timeline's run? (True, why) on evidence that ties
    them, (False, why) on evidence that separates them, (None, "") when neither has any."""
    ti, mi = timeline.identity, memory.identity
    total, held = ti.get("device_total_memory"), mi.get("reserved_bytes")
    if total and held and held > total * DEVICE_MEMORY_SLACK:
        return False, (f"it holds {held / GIB:.1f} GiB, more than the {total / GIB:.1f} GiB of the timeline's device")
    tw, mw = ti.get("window_epoch_ns"), mi.get("window_epoch_ns")
    apart = _seconds_apart(timeline, memory)
    if apart is not None and apart <= SAME_TIME_SLACK.value:
        return True, (f"its allocation history ({_span(mw)}) and the timeline ({_span(tw)}) overlap "
                      "on the Unix clock: one process at one time")
    same, why = program_evidence(ti, mi, "the timeline")
    if same is not None:
        return same, why
    if apart is not None:
        return False, (f"its allocation history ({_span(mw)}) and the timeline ({_span(tw)}) are {apart:,.0f} s "
                       "apart, and no Python stacks in the timeline show whether it is the same program (take the snapshot in "
                       "the profiled process, or profile with with_stack=True)")
    return None, ""


def _join_memory(runs: list, g, r) -> None:
    """Put memory input (g, r) into the run the evidence names, or into a run of its own."""
    timeline_runs = [run for run in runs if run.members[0][0].family.role is RunRole.TIMELINE]
    votes = [(run, *memory_evidence(run.members[0][1], r)) for run in timeline_runs]
    paths, ties = ", ".join(g.paths), [v for v in votes if v[1] is True]
    if ties:
        run, _, why = ties[0]
        run.members.append((g, r))
        run.evidence.append(f"{paths} is of the run of {', '.join(run.members[0][0].paths)}: {why}")
        return
    unknown = [v for v in votes if v[1] is None]
    if len(timeline_runs) == 1 and unknown:
        run = unknown[0][0]
        run.members.append((g, r))
        lacks = "it" if not (r.identity.get("window_epoch_ns") or r.identity.get("python_files")) else "the timeline"
        run.evidence.append(f"nothing places {paths} in time or code against {', '.join(run.members[0][0].paths)} "
                            f"({lacks} records no Unix time and no Python frames): joined to that run as the only timeline "
                            "given (pass it on its own to diagnose it apart)")
        return
    why = "; ".join(f"not the run of {', '.join(run.members[0][0].paths)}: {w}" for run, t, w in votes if t is False)
    if len(unknown) > 1:
        why = "; ".join(x for x in (why, f"nothing in it tells which of the {len(unknown)} timeline runs it is of") if x)
    runs.append(Run([(g, r)], [f"{paths} is diagnosed on its own ({why})"] if why else []))


def _tool(group) -> str:
    return "nsys" if any(k.startswith("nsys") for k in group.kinds) else "torch"


def group_runs(analysed: list) -> list[Run]:
    """[(Group, AnalysisResult)] -> runs, in input order: timelines that match join the first run they
    match; each ncu report joins the best-matching run's timeline; a memory input joins the run its evidence
    names (memory_evidence); unmatched inputs stand alone."""
    runs: list[Run] = []
    share = SAME_RUN_SHARE.value
    for g, r in analysed:
        if g.family.role is not RunRole.TIMELINE:
            continue
        for run in runs:
            if _tool(g) in {_tool(x) for x, _ in run.members}:
                continue  # one profiler session writes one file (per rank): two files of one tool are two sessions
            t = run.members[0][1]
            m = timelines_match(t, r)
            if m >= share:
                run.members.append((g, r))
                apart = _seconds_apart(t, r)
                when = (f"; recorded {apart:,.0f} s apart: two profiling sessions of one workload"
                        if apart is not None and apart > SAME_TIME_SLACK.value else "")
                run.evidence.append(f"{', '.join(g.paths)} runs the same kernels with the same launch configurations "
                                    f"as {', '.join(run.members[0][0].paths)} ({100 * m:.0f}% of the kernel time of each{when})")
                break
        else:
            runs.append(Run([(g, r)]))
    for g, r in analysed:
        if g.family.role is RunRole.MEMORY:
            _join_memory(runs, g, r)
            continue
        if g.family.role is RunRole.TIMELINE:
            continue
        best, best_m = None, 0.0
        if g.family.role is RunRole.KERNEL_PROFILE:
            for run in runs:
                m = ncu_match(run.members[0][1], r)
                if m > best_m and run.members[0][0].family.role is RunRole.TIMELINE:
                    best, best_m = run, m
        if best is not None and best_m >= share:
            best.members.append((g, r))
            best.evidence.append(f"{', '.join(g.paths)}: {100 * best_m:.0f}% of its launches and of its profiled GPU time "
                                 f"are kernels (name, grid, block, duration) that {', '.join(best.members[0][0].paths)} runs")
        else:
            runs.append(Run([(g, r)]))
    return runs
