"""before -> after of one number, and which way a fact should move after a fix (from the rules'
verify_check, then the headline numbers and units)."""
from __future__ import annotations

from .sides import _num

SAME_PCT = 0.5  # |relative change| below this reads "unchanged" in the fact table (display only)

# headline numbers: fact, label, better direction, subject kind it is read from
HEADLINES = (
    ("step_time_ms_p50", "step time (median)", "lower"),
    ("gpu_busy_pct", "GPU busy share", "higher"),
    ("kernel_time_ms_per_step", "kernel time per step", "lower"),
    ("kernel_gpu_time_total_ms", "kernel GPU time (all launches)", "lower"),
    ("peak_allocated_gib", "peak memory allocated", "lower"),
    ("peak_reserved_gib", "peak memory reserved", "lower"),
    ("num_ooms", "out-of-memory events", "lower"),
)
HEADLINE_DIRECTIONS = {name: d for name, _, d in HEADLINES}
LOWER_UNITS = ("ms", "us", "ns", "s", "GiB", "MiB", "bytes")


def fact_directions(pack) -> dict[str, str]:
    """The way each fact should move after a fix, from the rules' verify_check (then headlines)."""
    out = dict(HEADLINE_DIRECTIONS)
    for rule in pack.ordered():
        for c in rule.verify_check:
            d = {"lt": "lower", "lte": "lower", "falls": "lower", "gt": "higher", "gte": "higher",
                 "rises": "higher"}.get(c.op)
            if d:
                out.setdefault(c.fact, d)
    return out


def direction_of(name: str, unit: str, directions: dict) -> str:
    if name in directions:
        return directions[name]
    if unit in LOWER_UNITS and any(name.endswith(s) for s in ("_ms", "_us", "_ms_per_step", "_gib", "_mib")):
        return "lower"
    return ""


def change(before, after, direction: str = "", noise_pct: float = 0.0) -> dict:
    """before -> after of one number: delta, relative change, speed-up (times), and its judgement."""
    b, a = _num(before), _num(after)
    out = {"before": before, "after": after}
    if b is None or a is None:
        out["moved"] = "same" if before == after else "changed"
        return out
    out["delta"] = round(a - b, 6)
    rel = None if b == 0 else 100 * (a - b) / abs(b)
    out["change_pct"] = None if rel is None else round(rel, 3)
    if direction == "lower" and a > 0 and b > 0:
        out["speedup"] = round(b / a, 4)
    if direction:
        out["better"] = direction
    if a == b or (rel is not None and abs(rel) < max(SAME_PCT, noise_pct)):
        out["moved"] = "same"
    elif not direction:
        out["moved"] = "changed"
    else:
        out["moved"] = "right" if (a < b) == (direction == "lower") else "wrong"
    return out
