"""Chart geometry for the compare page: the report's charts per side (report/*_charts.py, reused as
they are) plus a Speed-of-Light scatter with an arrow from each kernel's BEFORE to its AFTER."""
from __future__ import annotations

from dataclasses import replace

from ..report.chart_geometry import Chart, _num, _r
from ..report.chart_palette import palette
from ..report.kernel_charts import kernel_categories_chart, kernel_sol_chart
from ..report.memory_charts import memory_composition_chart
from ..report.timeline_charts import steps_chart

# kernel_sol_chart's frame (report/kernel_charts.py): the arrows must land on its axes
SOL_SIZE, SOL_LEFT, SOL_TOP = 340, 56, 20


def _px(mem):
    return _r(SOL_LEFT + SOL_SIZE * min(max(_num(mem), 0), 100) / 100)


def _py(sm):
    return _r(SOL_TOP + SOL_SIZE - SOL_SIZE * min(max(_num(sm), 0), 100) / 100)


def _side(chart: Chart | None, side: str) -> Chart | None:
    if chart is None:
        return None
    return replace(chart, key=f"{chart.key}-{side}", title=f"{side.upper()}: {chart.title}")


def side_by_side(charts: dict) -> list[tuple[Chart | None, Chart | None]]:
    """Pairs (BEFORE, AFTER) of the same chart: per-step busy/idle, kernel categories, memory composition."""
    b, a = charts.get("before") or {}, charts.get("after") or {}
    cats = [str(r.get("category")) for r in (b.get("kernel_categories") or []) + (a.get("kernel_categories") or [])
            if isinstance(r, dict)]
    colours = palette(cats)  # one colour per category on both sides
    pairs = [
        (_side(steps_chart(b.get("steps")), "before"), _side(steps_chart(a.get("steps")), "after")),
        (_side(kernel_categories_chart(b.get("kernel_categories"), colours), "before"),
         _side(kernel_categories_chart(a.get("kernel_categories"), colours), "after")),
        (_side(memory_composition_chart(b.get("memory_composition")), "before"),
         _side(memory_composition_chart(a.get("memory_composition")), "after")),
    ]
    return [p for p in pairs if p[0] or p[1]]


def sol_arrows_chart(charts: dict, kernels: list[dict]) -> Chart | None:
    """AFTER's kernels on the SOL plane (report/kernel_charts.kernel_sol_chart), each matched kernel's BEFORE
    position as a grey dot with a line to where it is now."""
    before = {str(r.get("id")): r for r in (charts.get("before") or {}).get("kernel_sol") or [] if isinstance(r, dict)}
    after_rows = [r for r in (charts.get("after") or {}).get("kernel_sol") or [] if isinstance(r, dict)]
    chart = kernel_sol_chart(after_rows)
    if chart is None or not before:
        return chart
    chart = replace(chart, key="kernel_sol_compare", title="Kernels against the Speed-of-Light, before -> after",
                    caption="Each coloured circle is a kernel of AFTER at its SM and memory throughput (% of peak, "
                            "area by its share of GPU time); a grey dot and line lead from where the same kernel "
                            "(matched by name and launch configuration) was in BEFORE.")
    moves = []
    for k in kernels:
        if not (k.get("before") and k.get("after")):
            continue
        rb = before.get(str(k["before"]["id"]))
        if rb is None:
            continue
        ra = next((r for r in after_rows if str(r.get("id")) == str(k["after"]["id"])), None)
        if ra is None:
            continue
        x1, y1, x2, y2 = _px(rb.get("mem_pct")), _py(rb.get("sm_pct")), _px(ra.get("mem_pct")), _py(ra.get("sm_pct"))
        chart.lines.append({"x1": x1, "y1": y1, "x2": x2, "y2": y2, "cls": "sol-move"})
        moves.append({"cx": x1, "cy": y1, "r": 3, "cls": "sol-before",
                      "tip": f"BEFORE #{k['before']['id']} {rb.get('name')}: SM {_num(rb.get('sm_pct')):.0f}%, "
                             f"memory {_num(rb.get('mem_pct')):.0f}% ({rb.get('category')})"})
    chart.circles = moves + chart.circles
    chart.legend = chart.legend + [{"label": "BEFORE position", "cls": "sol-before"}]
    return chart
