"""The report's charts and tables: `report.charts` data -> Chart records, in reading order.

Analysis produces the series (see the timeline, kernels and memory packages); the chart modules
only map them to pixels: strip_chart.py (one steady step as a timeline), timeline_charts.py (steps,
top kernels, op distribution), rank_charts.py
(ranks of a distributed run), kernel_charts.py (categories, Speed-of-Light), memory_charts.py
(composition, over time, sites), on the shared geometry of chart_geometry.py. Every chart is
optional: a key that is absent or empty yields no chart.
"""
from __future__ import annotations

from .chart_geometry import Chart, _num
from .chart_palette import palette
from .kernel_charts import kernel_categories_chart, kernel_sol_chart
from .memory_charts import memory_composition_chart, memory_composition_table, memory_timeline_chart, top_sites_table
from .roofline_chart import roofline_chart, roofline_ncu_table, roofline_table
from .rank_charts import rank_charts
from .strip_chart import step_strip_chart
from .timeline_charts import steps_chart, top_kernels_table, top_ops_table


def report_tables(data: dict | None) -> list[dict]:
    """The tables text reports print (Markdown, terminal): [{title, caption, headers, numeric, rows}]; the
    memory breakdown the HTML draws (composition at the peak, top allocation sites) as tables too."""
    data = data or {}
    out = []
    for chart in (top_kernels_table(data.get("top_kernels"), data.get("source")),
                  top_ops_table(data.get("top_ops"), data.get("source")),
                  roofline_table(data.get("roofline"), data.get("source")),
                  roofline_ncu_table(data.get("roofline_ncu"), data.get("source")),
                  memory_composition_table(data.get("memory_composition")),
                  top_sites_table(data.get("top_sites"))):
        if chart is not None:
            out.append(dict(chart.table, title=chart.title, caption=chart.caption))
    return out


def build_charts(data: dict | None) -> list[Chart]:
    """Every chart the report's data allows, in reading order (time, kernels, memory)."""
    data = data or {}
    cats = sorted((r for r in data.get("kernel_categories") or [] if isinstance(r, dict)), key=lambda r: -_num(r.get("time_ms")))
    sol = sorted((r for r in data.get("kernel_sol") or [] if isinstance(r, dict)), key=lambda r: -_num(r.get("time_share_pct")))
    colours = palette([str(r.get("category")) for r in cats] + [str(r.get("category")) for r in sol])
    charts = [
        step_strip_chart(data.get("step_strip"), data.get("source")),
        steps_chart(data.get("steps"), data.get("source")),
        *rank_charts(data),  # many ranks: sorted columns, rank groups, collectives (rank_charts.py)
        kernel_categories_chart(data.get("kernel_categories"), colours),
        kernel_sol_chart(data.get("kernel_sol"), colours),
        top_kernels_table(data.get("top_kernels"), data.get("source")),
        top_ops_table(data.get("top_ops"), data.get("source")),
        roofline_chart(data.get("roofline")),
        roofline_table(data.get("roofline"), data.get("source")),
        roofline_ncu_table(data.get("roofline_ncu"), data.get("source")),
        memory_composition_chart(data.get("memory_composition")),
        memory_timeline_chart(data.get("memory_timeline")),
        top_sites_table(data.get("top_sites")),
    ]
    return [c for c in charts if c is not None]
