"""The regression gate that knows its noise (`compare --fail-on-regression PCT`), for two timelines.

What the code controls is judged apart from what the machine does, each measure with its own noise
and one stated test:

  GPU work per step    (gpu_work_ms_per_step)  tight from run to run: the kernels of identical code
  host work per step   (host_work_ms_per_step) the host's own work; its speed differs between processes
  wall time per step   (step_time_ms_p50)      both, plus how they overlap
  each kernel          (time per step by name) a kernel that got slower, or a new one
  host time between ops (tables host_gaps)     the gaps between ops that grew beyond the process's pace:
                                               a delay in the code (extra Python, a sleep), not a slower host

The noise of a measure is sqrt(floor^2 + (3 sb)^2 + (3 sa)^2) in % of BEFORE: `floor` the between-run
variation of identical code (a setting, measured on real reruns: docs/compare.md), sb / sa the
standard errors of each side's median over its steady steps (3 sigma). A measure regresses when it
got worse by more than max(PCT, its noise). A finding new or worse in AFTER is a regression of the code
only when the code's work changed: when the kernels per step are the same, the host's work did not rise
beyond its noise, no host time between ops rose beyond its noise, and the finding is about the host's pace (launches, small kernels, idle the host leaves),
it appeared because the host ran slower, and it is said so, not gated. With collectives in the run, more GPU
work or slower kernels in a step that got faster beyond its step-to-step noise are overlap, not regression.
"""
from __future__ import annotations

import math

from ..timeline.names import COMM_KERNEL
from .sides import _num
from ..comparison_settings import GPU_FLOOR, HOST_DELAY_FLOOR, HOST_FLOOR, KERNEL_FLOOR, WALL_FLOOR

SIGMAS = 3.0
KERNEL_REASONS = 5  # kernels named in the verdict; the rest counted
# findings about the host's pace: they appear when the host alone ran slower
HOST_PACE = ("launch_overhead", "small_batch", "unexplained_idle", "host_compute")
MEASURES = (  # (fact, its spread fact, label, floor)
    ("gpu_work_ms_per_step", "gpu_work_spread_pct", "GPU work per step", GPU_FLOOR),
    ("host_work_ms_per_step", "host_work_spread_pct", "host work per step", HOST_FLOOR),
    ("step_time_ms_p50", None, "step time (wall)", WALL_FLOOR),
)


PACE_QUANTILE = 0.9  # the process's pace: this quantile of AFTER / BEFORE over the gaps between the same two ops,
PACE_SKIP = 2  # ... below the PACE_SKIP largest ratios at least (a delay at one or two positions never sets the pace)
MIN_GAP_US = 1.0  # gaps shorter than this in BEFORE do not vote on the pace (timer resolution)


def host_delay(before_gaps: dict, after_gaps: dict) -> dict | None:
    """The host time between ops that AFTER added beyond its process's pace (step_work.host_gaps on each side).

    A slower process stretches every gap between two ops by about the same factor; extra Python work or a
    sleep between two ops (a user's delay) lengthens the gaps where it sits. Per gap (the same position:
    the op that ends it and its occurrence in the step), AFTER's shortest minus BEFORE's shortest times the
    pace, the pace being the 90th percentile of their ratios, below the two largest (a delay at one or two
    positions does not move it); the excess is the sum of the positive ones, in % of AFTER's step without it.
    None without gaps on a side."""
    gb, ga = (before_gaps or {}).get("gaps_us") or {}, (after_gaps or {}).get("gaps_us") or {}
    keys = [k for k in gb if k in ga]
    ratios = sorted(ga[k] / gb[k] for k in keys if gb[k] >= MIN_GAP_US)
    step_ms = _num((after_gaps or {}).get("step_ms"))
    if len(ratios) < 2 * PACE_SKIP + 1 or not step_ms:
        return None
    pace = ratios[min(len(ratios) - 1 - PACE_SKIP, int(PACE_QUANTILE * len(ratios)))]
    excess = {k: ga[k] - pace * gb[k] for k in keys}
    ms = sum(v for v in excess.values() if v > 0) / 1e3
    top = max(excess, key=excess.get)
    return {"pace": pace, "ms": ms, "pct": 100.0 * ms / max(step_ms - ms, 1e-9), "at": top,
            "at_ms": max(excess[top], 0.0) / 1e3, "gaps": len(keys)}


def noise_of(floor: float, sb: float, sa: float) -> float:
    return math.sqrt(floor ** 2 + (SIGMAS * sb) ** 2 + (SIGMAS * sa) ** 2)


def measures(before_run: dict, after_run: dict, step_noise_pct: float = 0.0) -> list[dict]:
    """Each measure both sides have: before, after, change % and its noise %."""
    out = []
    for fact, spread, label, floor in MEASURES:
        b, a = _num(before_run.get(fact)), _num(after_run.get(fact))
        if b is None or a is None or b <= 0:
            continue
        if spread is not None:
            sb, sa = _num(before_run.get(spread)) or 0.0, _num(after_run.get(spread)) or 0.0
            noise = noise_of(float(floor.value), sb, sa)
        else:  # wall time: the step-to-step range of the noisier side stands for both spreads
            noise = math.sqrt(float(floor.value) ** 2 + step_noise_pct ** 2)
        out.append({"fact": fact, "label": label, "before": b, "after": a,
                    "change_pct": 100.0 * (a - b) / b, "noise_pct": noise})
    return out


def _kernel_reasons(comparison: dict, pct: float, gpu_ms: float | None) -> list[str]:
    reasons = []
    limit = max(pct, float(KERNEL_FLOOR.value))
    for k in comparison.get("timeline_kernels", []):
        if COMM_KERNEL.search(k.get("kernel_name") or ""):
            continue  # a collective's time is mostly waiting for peers
        ms = k["ms_per_step"]
        b, a = _num(ms.get("before")), _num(ms.get("after"))
        if a is None or not gpu_ms:
            continue
        share = 100.0 * a / gpu_ms
        if b is None or b <= 0:
            if share > limit:
                reasons.append(f"kernel {k['name']} is new: {a:.3g} ms a step, {share:.1f}% of BEFORE's GPU work "
                               f"(limit {limit:.1f}%)")
            continue
        rise = 100.0 * (a - b) / b
        if rise > limit and 100.0 * (a - b) / gpu_ms > pct / 2:
            reasons.append(f"kernel {k['name']} got {rise:.1f}% slower ({b:.3g} -> {a:.3g} ms a step; "
                           f"limit {limit:.1f}%: max(PCT, kernel noise))")
    return reasons


def noise_gate(comparison: dict, before_run: dict, after_run: dict, pct: float) -> tuple[list[str], list[str]]:
    """(why the gate trips, what it judged and found within noise): the verdict lines."""
    reasons, within = [], []
    rows = measures(before_run, after_run, float(comparison.get("noise_pct") or 0.0))
    by = {r["fact"]: r for r in rows}
    wall = by.get("step_time_ms_p50")
    # collectives overlapped with compute make kernels slower and the step faster: more work in a faster step
    # is no regression there (a single-stream program has no such trade: its faster wall time is host noise)
    comm = any((_num(r.get("kernel_communication_pct")) or 0) > 0 for r in (before_run, after_run))
    faster = comm and wall is not None and -wall["change_pct"] > float(comparison.get("noise_pct") or 0.0)
    for r in rows:
        limit = max(pct, r["noise_pct"])
        line = f"{r['label']} {r['change_pct']:+.1f}% +/- {r['noise_pct']:.1f}% ({r['before']:.4g} -> {r['after']:.4g} ms)"
        if r["change_pct"] > limit and faster:  # more (overlapped) work in a faster step is no regression
            within.append(f"{line}: with collectives overlapped, the step got faster beyond its step-to-step noise "
                          f"({wall['change_pct']:+.1f}%)")
        elif r["change_pct"] > limit:
            reasons.append(f"{line}: worse beyond max(PCT {pct:g}%, its noise)")
        else:
            within.append(f"{line}: within {'run-to-run noise' if limit == r['noise_pct'] else f'PCT {pct:g}%'}")
    tables = comparison.get("tables") or {}
    delay = host_delay(*(getattr(tables.get(side), "host_gaps", None) for side in ("before", "after")))
    delayed = False
    if delay is not None:
        floor = float(HOST_DELAY_FLOOR.value)
        limit = max(pct, floor)
        where = f"; +{delay['at_ms']:.3f} ms before {delay['at'].split('#')[0]}" if delay["at_ms"] >= 0.01 else ""
        line = (f"host time between ops {delay['pct']:+.1f}% +/- {floor:.1f}% of the step (+{delay['ms']:.3f} ms a step "
                f"beyond the process's pace, {delay['pace']:.2f}x over {delay['gaps']} gaps{where})")
        delayed = delay["pct"] > limit
        if delayed:
            reasons.append(f"{line}: worse beyond max(PCT {pct:g}%, its noise)")
        else:
            within.append(f"{line}: within {'run-to-run noise' if limit == floor else f'PCT {pct:g}%'}")
    gpu = by.get("gpu_work_ms_per_step")
    slower = _kernel_reasons(comparison, pct, gpu["before"] if gpu else None)
    slower = [] if faster else slower
    reasons += slower[:KERNEL_REASONS] + ([f"{len(slower) - KERNEL_REASONS} more kernels slower or new (JSON: timeline_kernels)"]
                                          if len(slower) > KERNEL_REASONS else [])
    host = by.get("host_work_ms_per_step")
    host_within = (host is None or host["change_pct"] <= max(pct, host["noise_pct"])) and not delayed
    kb, ka = _num(before_run.get("kernels_per_step")), _num(after_run.get("kernels_per_step"))
    same_kernels = kb is not None and ka is not None and abs(ka - kb) <= max(1.0, 0.01 * kb)
    for f in comparison["findings"]:
        if f["verdict"] not in ("new", "regressed") or f.get("severity_after") not in ("warning", "critical"):
            continue
        if same_kernels and host_within and f["category"] in HOST_PACE:
            host_text = "" if host is None else f"; host work {host['change_pct']:+.1f}%, within its noise"
            within.append(f"{f['rule']} ({f['category']}) {f['verdict']} at {f['severity_after']} only because the host "
                          f"ran slower (the same kernels per step{host_text}): not a regression of the code")
            continue
        reasons.append(f"{f['rule']} ({f['category']}) {f['verdict']} at {f['severity_after']}")
    return reasons, within
