"""The CI gate of `diagnose compare --fail-on-regression PCT`: why it trips (empty: it does not)."""
from __future__ import annotations

from .thresholds import MIN_KERNEL_SHARE
from .verdicts import GATE_SEVERITIES

SECONDARY = ("gpu_busy_pct", "kernel_time_ms_per_step")  # gated only when the step did not get faster


def gate(comparison: dict, pct: float) -> list[str]:
    """Why `--fail-on-regression PCT` trips (empty: it does not)."""
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
                           f"limit {limit:.1f}%: max(PCT, step noise))")
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
