"""The CI gate of `diagnose compare --fail-on-regression PCT`: why it trips (empty: it does not)."""
from __future__ import annotations

from .noise_gate import noise_gate
from ..comparison_settings import MIN_KERNEL_SHARE
from .verdicts import GATE_SEVERITIES

SECONDARY = ("gpu_busy_pct", "kernel_time_ms_per_step")  # gated only when the step did not get faster


def run_facts(comparison: dict) -> tuple[dict, dict]:
    """BEFORE's and AFTER's run-level facts, from the comparison's fact rows."""
    rows = [r for r in comparison.get("facts", []) if r["subject"] is None]
    return {r["fact"]: r.get("before") for r in rows}, {r["fact"]: r.get("after") for r in rows}


def judged(comparison: dict, pct: float) -> tuple[list[str], list[str]] | None:
    """Two timelines whose steps compare: (why the gate trips, the measures within noise) by the gate that
    knows its noise (noise_gate.py); None for other inputs (the headline gate below judges them)."""
    b, a = run_facts(comparison)
    if "gpu_work_ms_per_step" not in b or "gpu_work_ms_per_step" not in a or comparison.get("steps_basis", {}).get(
            "comparable") is False:
        return None
    return noise_gate(comparison, b, a, pct)


def gate(comparison: dict, pct: float) -> list[str]:
    """Why `--fail-on-regression PCT` trips (empty: it does not)."""
    noisy = judged(comparison, pct)
    if noisy is not None:
        return noisy[0]
    reasons = []
    step = next((h for h in comparison["headlines"] if h["fact"] == "step_time_ms_p50"), None)
    step_better = step is not None and step.get("moved") == "right"
    for h in comparison["headlines"]:
        rel = h.get("change_pct")
        if rel is None or not h.get("better"):
            continue
        if step_better and h["fact"] in SECONDARY:
            continue  # the step got faster beyond noise: a lower busy share or more (overlapped) kernel time is no regression
        worse = rel if h["better"] == "lower" else -rel
        limit = max(pct, h.get("noise_pct") or 0.0)
        if worse > limit:
            reasons.append(f"{h['label']} got {worse:.1f}% worse ({fmt(h['before'])} -> {fmt(h['after'])} {h['unit']}; "
                           f"limit {limit:.1f}%" + (": max(PCT, step noise))" if h.get("noise_pct") else ")"))
    for k in comparison.get("kernels", []):
        d = k["duration_us"]
        if (k.get("time_share_pct") or 0) < MIN_KERNEL_SHARE.value:
            continue
        if k["before"] and k["after"] and d.get("change_pct") is not None and d["change_pct"] > max(pct, 0):
            reasons.append(f"kernel {k['name']} (#{k['before']['id']}) got {d['change_pct']:.1f}% slower "
                           f"({fmt(d['before'])} -> {fmt(d['after'])} us)")
    for f in comparison["findings"]:
        if f["verdict"] in ("new", "regressed") and f.get("severity_after") in GATE_SEVERITIES:
            reasons.append(f"{f['rule']} ({f['category']}) {f['verdict']} at {f['severity_after']}")
    return reasons


def fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
