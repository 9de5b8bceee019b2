"""Chart geometry shared by every chart of the reports: the Chart record (SVG primitives with
coordinates, legend, data table), scales and ticks, horizontal bars (colours: chart_palette).

Analysis produces the series; the chart modules (timeline_charts, kernel_charts, memory_charts,
rank_charts) only map them to pixels so the templates place shapes and compute nothing.
Colours are CSS classes (`s-busy`, `i-data`, `p0`..`p9`, `r-compute`...) so dark mode and print
restyle them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .formatting import fmt_value, shorten


@dataclass
class Chart:
    """An SVG drawing plus its legend and an optional data table (for print and screen readers)."""

    key: str
    title: str
    caption: str
    width: int
    height: int
    polygons: list[dict] = field(default_factory=list)   # {points, cls, tip}
    lines: list[dict] = field(default_factory=list)      # {x1, y1, x2, y2, cls}
    rects: list[dict] = field(default_factory=list)      # {x, y, w, h, cls, tip}
    polylines: list[dict] = field(default_factory=list)  # {points, cls, tip}
    circles: list[dict] = field(default_factory=list)    # {cx, cy, r, cls, tip}
    texts: list[dict] = field(default_factory=list)      # {x, y, text, anchor, cls}
    legend: list[dict] = field(default_factory=list)     # {label, cls}
    table: dict | None = None                            # {caption, headers, numeric, mono, rows: [[str]]}
    layout: str = ""                                     # "side": legend beside the drawing
    regions: list[dict] = field(default_factory=list)    # shaded-region key {label, cls}
    run: int | None = None                               # several separate runs: the run it belongs to (its ids)

    @property
    def svg(self) -> bool:
        return bool(self.rects or self.polylines or self.circles or self.polygons)


def _r(x: float) -> float:
    return round(float(x), 1)


def _num(x) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def nice_ticks(hi: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `hi` (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    hi = _num(hi)
    if hi <= 0:
        return [0.0, 1.0]
    raw = hi / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(hi / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def fmt_bytes(n) -> str:
    n = _num(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{fmt_value(n / size)} {unit}"
    return f"{n:.0f} B"


def _tick_label(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e5 else f"{v:.2g}"


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _y_axis(chart: Chart, ticks, y_of, left: float, right: float, unit: str) -> None:
    for t in ticks:
        y = _r(y_of(t))
        chart.lines.append({"x1": left, "y1": y, "x2": right, "y2": y, "cls": "grid"})
        chart.texts.append({"x": left - 6, "y": _r(y + 4), "text": _tick_label(t), "anchor": "end", "cls": "tick"})
    chart.texts.append({"x": left - 6, "y": _r(y_of(ticks[-1]) - 12), "text": unit, "anchor": "end", "cls": "axis-label"})


def _hbars(key: str, title: str, caption: str, rows: list[tuple[str, list[tuple[float, str, str]], str]]) -> Chart:
    """rows: (label, [(value, css class, tooltip) segments], value text) -> one stacked horizontal bar per row."""
    label_w, right, top, row_h = 190, 170, 8, 26
    width = 720
    plot_w = width - label_w - right
    height = top + row_h * len(rows) + 8
    hi = max((sum(max(v, 0) for v, _, _ in segs) for _, segs, _ in rows), default=0) or 1.0
    chart = Chart(key, title, caption, width, height)
    for k, (label, segs, text) in enumerate(rows):
        y = top + k * row_h
        x = float(label_w)
        chart.texts.append({"x": label_w - 8, "y": y + 17, "text": shorten(label, 28), "anchor": "end", "cls": "label"})
        for value, cls, tip in segs:
            if value <= 0:
                continue
            w = max(1.0, plot_w * value / hi)
            chart.rects.append({"x": _r(x), "y": y + 4, "w": _r(w), "h": row_h - 8, "cls": cls, "tip": tip})
            x += w
        chart.texts.append({"x": _r(x + 8), "y": y + 17, "text": text, "anchor": "start", "cls": "value"})
    chart.lines.append({"x1": label_w, "y1": top, "x2": label_w, "y2": height - 8, "cls": "axis"})
    return chart
