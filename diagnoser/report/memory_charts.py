"""Memory charts: who owns the live memory at the peak (bars), allocated and reserved bytes over
time (area and line), and the top allocation sites (a table)."""
from __future__ import annotations

from .chart_geometry import Chart, _hbars, _num, _r, _tick_label, _y_axis, fmt_bytes, nice_ticks
from .chart_palette import palette
from .formatting import fmt_value, shorten


def memory_composition_chart(rows: list[dict]) -> Chart | None:
    """Who owns the live memory at the peak (or at the OOM)."""
    rows = [r for r in rows or [] if isinstance(r, dict) and _num(r.get("bytes")) > 0]
    if not rows:
        return None
    rows.sort(key=lambda r: -_num(r.get("bytes")))
    colours = palette(str(r.get("owner")) for r in rows)
    bars = []
    for r in rows:
        label = str(r.get("owner")).replace("_", " ")
        text = f"{fmt_bytes(r.get('bytes'))} \u00b7 {_num(r.get('share_pct')):.1f}%"
        bars.append((label, [(_num(r.get("bytes")), colours[str(r.get("owner"))], f"{label}: {text}")], text))
    return _hbars("memory_composition", "Memory composition at the peak",
                  "Live allocations by owner when memory peaked (or when the OOM hit).", bars)


def memory_composition_table(rows: list[dict]) -> Chart | None:
    """The composition chart's numbers as a table, for text reports (the same rows, largest first)."""
    rows = sorted((r for r in rows or [] if isinstance(r, dict) and _num(r.get("bytes")) > 0),
                  key=lambda r: -_num(r.get("bytes")))
    if not rows:
        return None
    chart = Chart("memory_composition", "Memory composition at the peak",
                  "Live allocations by owner when memory peaked (or when the OOM hit).", 0, 0)
    chart.table = {"caption": "", "headers": ["owner", "bytes", "% of live memory"], "numeric": [False, True, True],
                   "mono": [False, False, False],
                   "rows": [[str(r.get("owner")).replace("_", " "), fmt_bytes(r.get("bytes")),
                             f"{_num(r.get('share_pct')):.1f}%"] for r in rows]}
    return chart


def memory_timeline_chart(points: list[dict]) -> Chart | None:
    """Allocated and reserved bytes over the recorded history."""
    points = sorted((p for p in points or [] if isinstance(p, dict)), key=lambda p: _num(p.get("t_ms")))
    if len(points) < 2:
        return None
    t0 = _num(points[0].get("t_ms"))
    span_ms = _num(points[-1].get("t_ms")) - t0
    in_s = span_ms >= 10_000
    t_unit, t_div = ("s", 1000.0) if in_s else ("ms", 1.0)
    span = span_ms / t_div or 1.0
    gib = float(1 << 30)
    hi = max(max(_num(p.get("reserved_bytes")), _num(p.get("allocated_bytes"))) for p in points) / gib
    y_ticks = nice_ticks(hi or 1.0)
    x_ticks = nice_ticks(span, 6)
    width, left, right, top, bottom = 720, 56, 30, 24, 40
    plot_w, plot_h = width - left - right, 200
    height = top + plot_h + bottom

    def px(t_ms):
        return _r(left + plot_w * ((_num(t_ms) - t0) / t_div) / x_ticks[-1])

    def py(b):
        return _r(top + plot_h - plot_h * (_num(b) / gib) / y_ticks[-1])

    chart = Chart("memory_timeline", "Memory over time",
                  "Bytes allocated by tensors and reserved by the caching allocator, over the recorded history; "
                  "the gap between the lines is cached but unused memory.", width, height)
    _y_axis(chart, y_ticks, lambda v: top + plot_h - plot_h * v / y_ticks[-1], left, width - right, "GiB")
    for t in x_ticks:
        x = _r(left + plot_w * t / x_ticks[-1])
        chart.texts.append({"x": x, "y": top + plot_h + 16, "text": _tick_label(t), "anchor": "middle", "cls": "tick"})
    chart.texts.append({"x": _r(left + plot_w / 2), "y": height - 6, "text": f"time since the first recorded event ({t_unit})",
                        "anchor": "middle", "cls": "axis-label"})
    alloc = " ".join(f"{px(p.get('t_ms'))},{py(p.get('allocated_bytes'))}" for p in points)
    base = top + plot_h
    chart.polygons.append({"points": f"{px(points[0].get('t_ms'))},{base} {alloc} {px(points[-1].get('t_ms'))},{base}",
                           "cls": "area-allocated", "tip": ""})
    chart.polylines.append({"points": " ".join(f"{px(p.get('t_ms'))},{py(p.get('reserved_bytes'))}" for p in points),
                            "cls": "line-reserved",
                            "tip": f"reserved, peak {fmt_bytes(max(_num(p.get('reserved_bytes')) for p in points))}"})
    chart.polylines.append({"points": alloc, "cls": "line-allocated",
                            "tip": f"allocated, peak {fmt_bytes(max(_num(p.get('allocated_bytes')) for p in points))}"})
    chart.lines.append({"x1": left, "y1": base, "x2": width - right, "y2": base, "cls": "axis"})
    chart.legend = [{"label": "allocated", "cls": "line-allocated"}, {"label": "reserved", "cls": "line-reserved"}]
    return chart


def top_sites_table(rows: list[dict]) -> Chart | None:
    """The allocation sites holding the most memory (a table, no drawing)."""
    rows = [r for r in rows or [] if isinstance(r, dict)]
    if not rows:
        return None
    chart = Chart("top_sites", "Top allocation sites", "Where the live memory was allocated (from the allocation stacks).", 0, 0)
    chart.table = {"caption": "", "headers": ["site", "bytes", "allocations", "owner"], "numeric": [False, True, True, False],
                   "mono": [True, False, False, False],
                   "rows": [[shorten(r.get("site", ""), 140), fmt_bytes(r.get("bytes")), fmt_value(int(_num(r.get("count")))),
                             str(r.get("owner", "")).replace("_", " ")] for r in rows]}
    return chart
