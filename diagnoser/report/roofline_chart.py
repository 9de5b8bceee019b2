"""The per-op roofline in the report: a table (Markdown, terminal, HTML, JSON series) and a log-log
roofline chart (HTML): ops as points sized by their GPU time, the bandwidth roof and the compute
roof(s) of the rows' dtypes. Rows are diagnoser.timeline.roofline.op_roofline's; nothing is
computed here but pixel positions."""
from __future__ import annotations

import math

from .chart_geometry import Chart, _num
from .chart_palette import CATEGORY_COLOURS
from .timeline_charts import _table_chart
from ..timeline.roofline import TARGET_EFFICIENCY_PCT

MAX_ROWS = 12
W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 360, 60, 20, 20, 40


def _rows(rows) -> list[dict]:
    return [r for r in rows or [] if isinstance(r, dict)]


def _pct(v) -> str:
    return "-" if v is None else f"{_num(v):.0f}%"


def roofline_table(rows: list[dict], source: dict | None = None) -> Chart | None:
    """The per-op roofline rows, costliest first."""
    rows = _rows(rows)[:MAX_ROWS]
    if not rows:
        return None
    known = any(r.get("roof_pct") is not None for r in rows)
    target = float(TARGET_EFFICIENCY_PCT.value)
    caption = ("Each op (by shapes and dtype) from the FLOPs and bytes its shapes imply and the GPU time of the "
               "kernels it launched, over the steady steps: achieved throughput, arithmetic intensity, the roof "
               "that bounds it and how close it runs"
               + (f"; saved = time per step at {target:g}% of that roof." if known else
                  "; the device is not in the peaks table: no % of roof."))
    return _table_chart(
        "roofline", "Per-op roofline", caption, source,
        [("op", False, True), ("shapes", False, True), ("dtype", False, False), ("GPU ms/step", True, False),
         ("TFLOP/s", True, False), ("TB/s", True, False), ("FLOP/byte", True, False), ("bound", False, False),
         ("% of roof", True, False), ("saved ms/step", True, False)],
        [[str(r.get("op", ""))[:60], str(r.get("shapes", ""))[:60], str(r.get("dtype", "")),
          f"{_num(r.get('gpu_ms_per_step')):.3f}", f"{_num(r.get('tflops')):.1f}", f"{_num(r.get('tbs')):.2f}",
          f"{_num(r.get('intensity')):.1f}", str(r.get("bound") or "-"), _pct(r.get("roof_pct")),
          "-" if r.get("saved_ms_per_step") is None else f"{_num(r.get('saved_ms_per_step')):.3f}"]
         for r in rows])


def _diff(v) -> str:
    return "-" if v is None else f"{round(_num(v)):+d}%"


def _num_or_dash(v, fmt: str) -> str:
    return "-" if v is None else format(_num(v), fmt)


def roofline_ncu_table(rows: list[dict], source: dict | None = None) -> Chart | None:
    """The per-op roofline next to Nsight Compute's measurements of the same kernels
    (diagnoser.runs.roofline_ncu.side_by_side rows)."""
    rows = _rows(rows)[:MAX_ROWS]
    if not rows:
        return None
    caption = ("Each op's achieved throughput from its shapes and traced kernel time (trace) next to what Nsight "
               "Compute measured on the same kernels, matched launch by launch (name, grid/block, launch order): FLOPs "
               "it counted and bytes that crossed DRAM over its kernel time; diff = trace against ncu. The trace counts "
               "compulsory bytes only (a lower bound: GEMM tiles and norm rows are re-read, L2 hits skip DRAM) and "
               "nominal FLOPs for bandwidth-bound ops (one per element), so compare the number of the bound; the bound is ncu's (its measured FLOPs per DRAM byte against the ridge) where it profiled every "
               "kernel of a call, else the trace's.")
    return _table_chart(
        "roofline_ncu", "Per-op roofline against Nsight Compute", caption, source,
        [("op", False, True), ("shapes", False, True), ("dtype", False, False), ("kernels", True, False),
         ("TFLOP/s trace / ncu (diff)", True, False), ("TB/s trace / ncu DRAM (diff)", True, False),
         ("ncu SM / DRAM %", True, False), ("bound (by)", False, False)],
        [[str(r.get("op", ""))[:60], str(r.get("shapes", ""))[:60], str(r.get("dtype", "")),
          f"{int(_num(r.get('kernels_matched')))}/{_num(r.get('kernels_per_call')):.0f}",
          f"{_num(r.get('trace_tflops')):.1f} / {_num_or_dash(r.get('ncu_tflops'), '.1f')} ({_diff(r.get('tflops_diff_pct'))})",
          f"{_num(r.get('trace_tbs')):.2f} / {_num_or_dash(r.get('ncu_dram_tbs'), '.2f')} ({_diff(r.get('tbs_diff_pct'))})",
          f"{_num_or_dash(r.get('ncu_sm_pct'), '.0f')} / {_num_or_dash(r.get('ncu_dram_pct'), '.0f')}",
          f"{r.get('bound') or '-'} ({r.get('bound_from', '')})"]
         for r in rows])


def roofline_chart(rows: list[dict]) -> Chart | None:
    """Log-log roofline: x arithmetic intensity (FLOP/byte), y achieved TFLOP/s; roofs when known."""
    pts = [r for r in _rows(rows) if _num(r.get("intensity")) > 0 and _num(r.get("tflops")) > 0]
    if not pts:
        return None
    bw = next((_num(r["memory_roof_tbs"]) for r in pts if r.get("memory_roof_tbs")), None)
    roofs = sorted({_num(r["compute_roof_tflops"]) for r in pts if r.get("compute_roof_tflops")})[-3:]
    xs = [_num(r["intensity"]) for r in pts]
    ys = [_num(r["tflops"]) for r in pts] + roofs
    x0, x1 = math.floor(math.log10(min(xs))) , math.ceil(math.log10(max(xs) * 1.01))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys) * 1.01))
    x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)

    def px(x):
        return LEFT + (math.log10(x) - x0) / (x1 - x0) * (W - LEFT - RIGHT)

    def py(y):
        return H - BOTTOM - (math.log10(y) - y0) / (y1 - y0) * (H - TOP - BOTTOM)

    chart = Chart("roofline_chart", "Roofline", "Ops by arithmetic intensity and achieved TFLOP/s (log-log), "
                  "each point sized by its GPU time per step; the slanted line is the memory roof, the flat ones "
                  "the compute roofs of the ops' dtypes.", W, H)
    for e in range(x0, x1 + 1):
        chart.lines.append({"x1": px(10 ** e), "y1": TOP, "x2": px(10 ** e), "y2": H - BOTTOM, "cls": "grid"})
        chart.texts.append({"x": px(10 ** e), "y": H - BOTTOM + 16, "text": f"1e{e}", "anchor": "middle", "cls": "tick"})
    for e in range(y0, y1 + 1):
        chart.lines.append({"x1": LEFT, "y1": py(10 ** e), "x2": W - RIGHT, "y2": py(10 ** e), "cls": "grid"})
        chart.texts.append({"x": LEFT - 6, "y": py(10 ** e) + 4, "text": f"1e{e}", "anchor": "end", "cls": "tick"})
    chart.texts.append({"x": (LEFT + W - RIGHT) / 2, "y": H - 6, "text": "FLOP/byte", "anchor": "middle", "cls": "axis-label"})
    chart.texts.append({"x": 8, "y": TOP - 6, "text": "TFLOP/s", "anchor": "start", "cls": "axis-label"})
    lo_x, hi_x = 10.0 ** x0, 10.0 ** x1
    for p in roofs:
        if bw:  # memory roof up to the ridge, then flat
            ridge = p / bw
            xa = min(max(lo_x, (10.0 ** y0) / bw), hi_x)
            xr = min(max(ridge, lo_x), hi_x)
            corners = [(px(xa), py(max(xa * bw, 10.0 ** y0))), (px(xr), py(min(xr * bw, p))), (px(hi_x), py(p))]
            chart.polylines.append({"points": " ".join(f"{x:.1f},{y:.1f}" for x, y in corners), "cls": "line-allocated",
                                    "tip": f"roof: {bw:g} TB/s, {p:g} TFLOP/s"})
        else:
            chart.lines.append({"x1": LEFT, "y1": py(p), "x2": W - RIGHT, "y2": py(p), "cls": "axis"})
    biggest = max(_num(r.get("gpu_ms_per_step")) for r in pts) or 1.0
    for r in pts:
        radius = 3 + 9 * math.sqrt(_num(r.get("gpu_ms_per_step")) / biggest)
        chart.circles.append({"cx": px(_num(r["intensity"])), "cy": py(_num(r["tflops"])), "r": radius,
                              "cls": CATEGORY_COLOURS["memory_bound" if r.get("bound") == "memory" else "compute_bound"],
                              "tip": f"{r.get('op')} {r.get('shapes')} {r.get('dtype')}: {_num(r['tflops']):.1f} TFLOP/s, "
                                     f"{_num(r.get('tbs')):.2f} TB/s, {_num(r.get('gpu_ms_per_step')):.3f} ms/step"
                                     + (f", {_num(r['roof_pct']):.0f}% of roof" if r.get("roof_pct") is not None else "")})
    chart.legend = [{"label": "compute-bound op", "cls": CATEGORY_COLOURS["compute_bound"]},
                    {"label": "memory-bound op", "cls": CATEGORY_COLOURS["memory_bound"]},
                    {"label": "roofs (memory, then compute)", "cls": "line-allocated"}]
    return chart
