"""Values as the rules see them, thresholds and facts alike: clamped, rounded and cleaned once, so
every evaluator (durable_rules, the reference evaluator in tests) compares the same numbers: NaN/inf
are dropped, magnitudes are clamped to what durable_rules parses, and floats are rounded to the
decimal text the engine will read (diagnoser.engine.records applies it to facts, the loader to params)."""
from __future__ import annotations

import math
import re

from ..facts import Value
from ..text_safety import FACT_TEXT_LIMIT

MAX_ABS = 1e15
MIN_ABS = 1e-9
_SAFE_STR = re.compile(r"[^\x20-\x7e]|[\"\\]")


def format_number(x: float | int) -> str:
    """Decimal text durable_rules parses correctly: never an exponent, always a dot for floats."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    r = repr(x)
    if "e" in r or "E" in r:
        r = f"{x:.17f}".rstrip("0")
    if "." not in r:
        r += ".0"
    if r.endswith("."):
        r += "0"
    return r


def sanitize(value) -> Value | None:
    """The value both evaluators will see, or None when it cannot be represented (NaN, inf, other)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return max(-int(MAX_ABS), min(int(MAX_ABS), value))
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if abs(value) < MIN_ABS:
            return 0.0
        value = max(-MAX_ABS, min(MAX_ABS, value))
        return float(format_number(value))
    if isinstance(value, str):
        return _SAFE_STR.sub("?", value)[:FACT_TEXT_LIMIT]
    return None
