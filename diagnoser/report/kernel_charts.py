"""Kernel charts: GPU time by kernel category (bars) and the kernels against the Speed-of-Light
(SM% vs memory% scatter over shaded bound regions, with its data table)."""
from __future__ import annotations

import math

from .chart_geometry import Chart, _hbars, _num, _overlap, _r
from .chart_palette import palette
from .formatting import fmt_value, shorten

MAX_BARS = 12
MAX_KERNEL_ROWS = 25
MAX_POINT_LABELS = 15
SOL_KNEE_PCT = 60.0  # guide only: below this on both axes a kernel uses neither unit well (latency)


def kernel_categories_chart(rows: list[dict], colours: dict[str, str] | None = None) -> Chart | None:
    """GPU time by kernel category, largest first (the rest folded into `other`)."""
    rows = sorted((r for r in rows or [] if isinstance(r, dict) and _num(r.get("time_ms")) > 0),
                  key=lambda r: -_num(r.get("time_ms")))
    if not rows:
        return None
    if len(rows) > MAX_BARS:
        rest = rows[MAX_BARS - 1:]
        rows = rows[:MAX_BARS - 1] + [{"category": f"other ({len(rest)})",
                                       "time_ms": sum(_num(r.get("time_ms")) for r in rest),
                                       "share_pct": sum(_num(r.get("share_pct")) for r in rest)}]
    colours = colours or palette(str(r.get("category")) for r in rows)
    bars = []
    for r in rows:
        text = f"{fmt_value(_num(r.get('time_ms')))} ms \u00b7 {_num(r.get('share_pct')):.1f}%"
        bars.append((str(r.get("category")), [(_num(r.get("time_ms")), colours.get(str(r.get("category")), "p9"),
                                               f"{r.get('category')}: {text}")], text))
    return _hbars("kernel_categories", "GPU time by kernel category",
                  "Where the kernel time goes; a fix to the largest category wins the most.", bars)


def kernel_sol_chart(rows: list[dict], colours: dict[str, str] | None = None) -> Chart | None:
    """Kernels on SM% (y) vs memory% (x) of peak, sized by time share, over shaded bound regions."""
    rows = [r for r in rows or [] if isinstance(r, dict)]
    if not rows:
        return None
    size, left, top, bottom, right = 340, 56, 20, 44, 26
    width, height = left + size + right, top + size + bottom

    def px(mem):
        return _r(left + size * min(max(_num(mem), 0), 100) / 100)

    def py(sm):
        return _r(top + size - size * min(max(_num(sm), 0), 100) / 100)

    chart = Chart("kernel_sol", "Kernels against the Speed-of-Light",
                  f"Each circle is a kernel (area \u221d its share of GPU time) at its SM and memory throughput, "
                  f"in % of peak. Shaded as a guide: compute-bound (SM dominates), memory-bound (memory dominates), "
                  f"latency-bound (both under {SOL_KNEE_PCT:.0f}%).", width, height, layout="side")
    k = SOL_KNEE_PCT

    def pts(*xy):
        return " ".join(f"{px(x)},{py(y)}" for x, y in xy)

    chart.polygons = [
        {"points": pts((0, k), (k, k), (100, 100), (0, 100)), "cls": "r-compute", "tip": "compute-bound region"},
        {"points": pts((k, 0), (100, 0), (100, 100), (k, k)), "cls": "r-memory", "tip": "memory-bound region"},
        {"points": pts((0, 0), (k, 0), (k, k), (0, k)), "cls": "r-latency", "tip": "latency-bound region"},
    ]
    for t in (0, 20, 40, 60, 80, 100):
        chart.lines.append({"x1": px(t), "y1": top, "x2": px(t), "y2": top + size, "cls": "grid"})
        chart.lines.append({"x1": left, "y1": py(t), "x2": left + size, "y2": py(t), "cls": "grid"})
        chart.texts.append({"x": px(t), "y": top + size + 16, "text": str(t), "anchor": "middle", "cls": "tick"})
        chart.texts.append({"x": left - 6, "y": _r(py(t) + 4), "text": str(t), "anchor": "end", "cls": "tick"})
    chart.texts += [
        {"x": _r(left + size / 2), "y": height - 6, "text": "memory throughput, % of peak", "anchor": "middle",
         "cls": "axis-label"},
        {"x": 14, "y": _r(top + size / 2), "text": "SM %", "anchor": "middle", "cls": "axis-label"},
    ]
    colours = colours or palette(str(r.get("category")) for r in sorted(rows, key=lambda r: -_num(r.get("time_share_pct"))))
    top_share = max((_num(r.get("time_share_pct")) for r in rows), default=0) or 1.0
    placed: list[tuple[float, float, float, float]] = []  # label boxes already drawn
    for rank, r in enumerate(sorted(rows, key=lambda r: -_num(r.get("time_share_pct")))):  # big first: small on top
        share = _num(r.get("time_share_pct"))
        radius = _r(3 + 13 * math.sqrt(max(share, 0) / top_share))
        cx, cy = px(r.get("mem_pct")), py(r.get("sm_pct"))
        tip = (f"#{r.get('id')} {r.get('name')}: SM {fmt_value(_num(r.get('sm_pct')))}%, memory "
               f"{fmt_value(_num(r.get('mem_pct')))}%, {fmt_value(share)}% of GPU time ({r.get('category')})")
        chart.circles.append({"cx": cx, "cy": cy, "r": radius, "cls": colours.get(str(r.get("category")), "p9"), "tip": tip})
        # label the costliest kernels by id (they are the table's first rows), never two labels on top of each other
        text = str(r.get("id"))
        box = (cx + radius + 2, cy - radius - 8, cx + radius + 4 + 7 * len(text), cy - radius + 4)
        if rank < MAX_POINT_LABELS and not any(_overlap(box, b) for b in placed):
            placed.append(box)
            chart.texts.append({"x": _r(box[0]), "y": _r(cy - radius + 2), "text": text, "anchor": "start",
                                "cls": "point-label"})
    seen = []
    for r in sorted(rows, key=lambda r: -_num(r.get("time_share_pct"))):
        if str(r.get("category")) not in seen:
            seen.append(str(r.get("category")))
    chart.legend = [{"label": c, "cls": colours.get(c, "p9")} for c in seen]
    chart.regions = [{"label": "compute-bound: SM throughput dominates", "cls": "r-compute"},
                     {"label": "memory-bound: memory throughput dominates", "cls": "r-memory"},
                     {"label": f"latency-bound: both under {SOL_KNEE_PCT:.0f}% of peak", "cls": "r-latency"}]
    table_rows = sorted(rows, key=lambda r: -_num(r.get("time_share_pct")))
    chart.table = {
        "caption": "Kernels by share of GPU time"
                   + (f" (top {MAX_KERNEL_ROWS} of {len(rows)})" if len(rows) > MAX_KERNEL_ROWS else ""),
        "headers": ["id", "kernel", "SM %", "memory %", "time share", "category"],
        "numeric": [False, False, True, True, True, False],
        "mono": [False, True, False, False, False, False],
        "rows": [[str(r.get("id")), shorten(r.get("name", ""), 110), fmt_value(_num(r.get("sm_pct"))),
                  fmt_value(_num(r.get("mem_pct"))), f"{fmt_value(_num(r.get('time_share_pct')))}%", str(r.get("category"))]
                 for r in table_rows[:MAX_KERNEL_ROWS]],
    }
    return chart
