"""Numbers and text as every report shows them (Markdown, HTML, terminal, charts): one place, so the
renderers agree on "3.14 ms", "<1%" and where a long name is cut."""
from __future__ import annotations

import math


COUNT_UNITS = {"count", "bytes", "block", "blocks", "thread", "threads", "warp", "warps", "register", "registers",
               "launch", "launches", "kernel", "kernels", "cycle", "cycles", "sector", "sectors", "request", "requests",
               "instruction", "instructions", "inst"}


def fmt_value(value, unit: str = "") -> str:
    """A number as people read it: 3 significant digits, thousands separators, unit appended."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"  # not measured on this side (a kernel gone, a phase absent): never "None ms"
    if isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float) and value.is_integer() and abs(value) < 1e15 and unit.lower() in COUNT_UNITS:
        text = f"{int(value):,}"  # a count is a whole number: 64 blocks, never 64.0
    elif isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            text = f"{value:g}"
        elif abs(value) >= 1000:
            text = f"{value:,.0f}"
        elif abs(value) >= 10:
            text = f"{value:.1f}"
        else:
            text = f"{value:.3g}"
    else:
        text = str(value)
    if unit in ("%", "pct"):
        return text + "%"
    return f"{text} {unit}".strip() if unit and unit not in ("count", "bool", "ratio", "") else text


def share_pct(x: float) -> str:
    """A 0..1 share as a whole percent; a real but tiny share reads "<1%", never "0%"."""
    return "<1%" if 0 < x < 0.005 else f"{100 * x:.0f}%"


def shorten(text, limit: int) -> str:
    """`text` cut to `limit` characters, the cut marked with an ellipsis."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def md_cell(text) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
