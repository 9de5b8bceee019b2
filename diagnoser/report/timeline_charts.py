"""Timeline charts: GPU busy and idle per step (stacked columns, idle by class), and the tables of
the top kernels per step and the op distribution (from diagnoser.timeline.ops' series)."""
from __future__ import annotations

import math
import re

from ..kernel_names import short_name
from .chart_geometry import Chart, _num, _r, _y_axis, nice_ticks
from .chart_palette import palette
from .formatting import fmt_value, shorten

MAX_STEPS = 60
IDLE_LABELS = {
    "data": "idle: waiting for data", "host": "idle: host computing", "sync": "idle: host sync", "launch": "idle: launch overhead",
    "communication": "idle: communication", "unexplained": "idle: unexplained",
}


def step_label(step, index: int) -> str:
    """A short axis label for a step: its trailing number (`ProfilerStep#4` -> 4), else its position."""
    m = re.search(r"(\d+)\D*$", str(step)) if step is not None else None
    return m.group(1) if m else str(index + 1)


def steps_chart(steps: list[dict], source: dict | None = None) -> Chart | None:
    """GPU busy and idle per step: one stacked column per step, idle split by its class."""
    steps = [s for s in steps or [] if isinstance(s, dict)]
    if not steps:
        return None
    shown = steps[:MAX_STEPS]
    classes: list[str] = [c for c in IDLE_LABELS if any(_num((s.get("idle_ms_by_class") or {}).get(c)) > 0 for s in shown)]
    classes += sorted({c for s in shown for c, v in (s.get("idle_ms_by_class") or {}).items()
                       if c not in IDLE_LABELS and _num(v) > 0})
    extra = palette(c for c in classes if c not in IDLE_LABELS)

    def cls_of(c):
        return f"i-{c}" if c in IDLE_LABELS else extra[c]

    totals = []
    for s in shown:
        parts = _num(s.get("busy_ms")) + sum(_num(v) for v in (s.get("idle_ms_by_class") or {}).values())
        totals.append(max(_num(s.get("dur_ms")), parts))
    ticks = nice_ticks(max(totals) if totals else 1)
    width, left, right, top, bottom = 720, 56, 12, 24, 40
    plot_w, plot_h = width - left - right, 220
    height = top + plot_h + bottom
    scale = plot_h / ticks[-1]

    def y_of(v):
        return top + plot_h - v * scale

    chart = Chart("steps", "GPU busy and idle time per step",
                  "Each column is one training/inference step; the green part is GPU busy time, the rest is idle "
                  "time coloured by what the GPU waited for.", width, height)
    _y_axis(chart, ticks, y_of, left, width - right, "ms")
    slot = plot_w / len(shown)
    bar_w = max(2.0, min(40.0, slot * 0.72))
    label_every = max(1, math.ceil(len(shown) / 20))
    other_seen = False
    for k, (s, total) in enumerate(zip(shown, totals)):
        x = left + k * slot + (slot - bar_w) / 2
        y = top + plot_h
        name = str(s.get("step", k))
        segments = [("busy", "s-busy", _num(s.get("busy_ms")))]
        idle = s.get("idle_ms_by_class") or {}
        segments += [(c, cls_of(c), _num(idle.get(c))) for c in classes]
        rest = total - sum(v for _, _, v in segments)
        if rest > 0.005 * total:
            segments.append(("other", "i-other", rest))
            other_seen = True
        for label, cls, ms in segments:
            if ms <= 0:
                continue
            h = ms * scale
            y -= h
            share = 100.0 * ms / total if total else 0.0
            tip = f"{name}: {IDLE_LABELS.get(label, label if label != 'busy' else 'GPU busy')} {fmt_value(ms)} ms ({share:.0f}%)"
            chart.rects.append({"x": _r(x), "y": _r(y), "w": _r(bar_w), "h": _r(max(h, 0.5)), "cls": cls, "tip": tip})
        if k % label_every == 0:
            chart.texts.append({"x": _r(x + bar_w / 2), "y": top + plot_h + 16, "text": step_label(s.get("step"), k),
                                "anchor": "middle", "cls": "tick"})
    chart.texts.append({"x": _r(left + plot_w / 2), "y": height - 6, "text": "step", "anchor": "middle", "cls": "axis-label"})
    chart.lines.append({"x1": left, "y1": top + plot_h, "x2": width - right, "y2": top + plot_h, "cls": "axis"})
    chart.legend = [{"label": "GPU busy", "cls": "s-busy"}]
    chart.legend += [{"label": IDLE_LABELS.get(c, f"idle: {c}"), "cls": cls_of(c)} for c in classes]
    if other_seen:
        chart.legend.append({"label": "not attributed", "cls": "i-other"})
    total = max(len(steps), int(_num(steps[0].get("of"))))  # analysis lists the first steps only
    if total > len(shown):
        chart.caption += f" Showing the first {len(shown)} of {total} steps."
    if isinstance(source, dict) and source.get("path"):  # the timeline the run-level facts come from
        rank = f", rank {source['rank']}" if source.get("rank") is not None else ""
        chart.caption += f" From {source['path']}{rank}."
    return chart


def _table_chart(key: str, title: str, caption: str, source: dict | None, columns: list[tuple[str, bool, bool]],
                 rows: list[list[str]]) -> Chart:
    """A table-only chart: columns are (header, numeric, monospace); the caption names the source file."""
    where = f" From {source['path']}." if isinstance(source, dict) and source.get("path") else ""
    chart = Chart(key, title, caption + where, 0, 0)
    chart.table = {"caption": "", "headers": [c[0] for c in columns], "numeric": [c[1] for c in columns],
                   "mono": [c[2] for c in columns], "rows": rows}
    return chart


def _rows(rows) -> list[dict]:
    return [r for r in rows or [] if isinstance(r, dict)][:10]


def top_kernels_table(rows: list[dict], source: dict | None = None) -> Chart | None:
    """The kernels with the most time per steady step (a table; diagnoser.timeline.ops.top_kernels rows)."""
    rows = _rows(rows)
    if not rows:
        return None
    return _table_chart(
        "top_kernels", "Top kernels per step",
        "Kernels by time per steady step, keyed by name and launch configuration (grid x block).", source,
        [("kernel", False, True), ("grid x block", False, True), ("launches/step", True, False),
         ("ms/step", True, False), ("% of step", True, False)],
        [[shorten(short_name(r.get("name", "")), 80), f"{int(_num(r.get('grid')))} x {int(_num(r.get('block')))}",
          f"{_num(r.get('launches_per_step')):.1f}", f"{_num(r.get('ms_per_step')):.3f}",
          f"{_num(r.get('step_share_pct')):.1f}%"] for r in rows])


def top_ops_table(rows: list[dict], source: dict | None = None) -> Chart | None:
    """The op distribution (the profiler's key_averages view; diagnoser.timeline.ops.op_distribution rows)."""
    rows = _rows(rows)
    if not rows:
        return None
    return _table_chart(
        "top_ops", "Top ops by GPU time",
        "PyTorch ops by the GPU time of the kernels they launch (self CUDA time, as key_averages), with "
        "calls and CPU time per steady step.", source,
        [("op", False, True), ("calls/step", True, False), ("GPU ms/step", True, False),
         ("% of op GPU time", True, False), ("CPU ms/step", True, False)],
        [[shorten(str(r.get("op", "")), 80), f"{_num(r.get('calls_per_step')):.1f}",
          f"{_num(r.get('gpu_ms_per_step')):.3f}", f"{_num(r.get('gpu_share_pct')):.1f}%",
          f"{_num(r.get('cpu_ms_per_step')):.3f}"] for r in rows])
