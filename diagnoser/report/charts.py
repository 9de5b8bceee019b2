"""Chart geometry for the HTML report: `report.charts` data -> SVG primitives with coordinates.

Analysis produces the series (see diagnoser.analysis); this module only maps them to pixels
(scales, ticks, bar and point positions) so the templates place shapes and compute nothing.
Colours are CSS classes (`s-busy`, `i-data`, `p0`..`p9`, `r-compute`...) so dark mode and print
restyle them. Every chart is optional: a key that is absent or empty yields no chart.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .render import fmt_value, shorten
from ..facts import short_name

PALETTE = 10
MAX_STEPS = 60
MAX_BARS = 12
MAX_KERNEL_ROWS = 25
MAX_POINT_LABELS = 15
SOL_KNEE_PCT = 60.0  # guide only: below this on both axes a kernel uses neither unit well (latency)
IDLE_LABELS = {
    "data": "idle: waiting for data", "sync": "idle: host sync", "launch": "idle: launch overhead",
    "communication": "idle: communication", "unexplained": "idle: unexplained",
}
NEUTRAL = ("other", "unknown", "none")  # drawn grey (p9) so real categories keep the colours


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


def palette(names) -> dict[str, str]:
    """Stable colour class per name, in order of first appearance; catch-all names are grey."""
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            used = sum(1 for v in out.values() if v != "p9")
            out[name] = "p9" if str(name).split(" (")[0] in NEUTRAL else f"p{used % (PALETTE - 1)}"
    return out


def _y_axis(chart: Chart, ticks, y_of, left: float, right: float, unit: str) -> None:
    for t in ticks:
        y = _r(y_of(t))
        chart.lines.append({"x1": left, "y1": y, "x2": right, "y2": y, "cls": "grid"})
        chart.texts.append({"x": left - 6, "y": _r(y + 4), "text": _tick_label(t), "anchor": "end", "cls": "tick"})
    chart.texts.append({"x": left - 6, "y": _r(y_of(ticks[-1]) - 12), "text": unit, "anchor": "end", "cls": "axis-label"})


# ------------------------------------------------------------------------------ steps

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


# ------------------------------------------------------------------------------ horizontal bars

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


def ranks_chart(rows: list[dict]) -> Chart | None:
    """Step time per rank of a distributed run, split into waiting in collectives and the rest."""
    rows = sorted((r for r in rows or [] if isinstance(r, dict)), key=lambda r: _num(r.get("rank")))
    if len(rows) < 2:
        return None
    bars = []
    for r in rows:
        step, wait = _num(r.get("step_ms")), min(_num(r.get("comm_wait_ms")), _num(r.get("step_ms")))
        label = f"rank {r.get('rank')}" + (" (straggler)" if r.get("straggler") else "")
        text = f"{fmt_value(step)} ms \u00b7 GPU busy {_num(r.get('busy_pct')):.0f}%"
        bars.append((label, [(step - wait, "p2" if r.get("straggler") else "s-busy",
                              f"{label}: {fmt_value(step - wait)} ms of its own work per step"),
                             (wait, "i-communication", f"{label}: {fmt_value(wait)} ms waiting in collectives per step")],
                     text))
    chart = _hbars("ranks", "Step time per rank",
                   "Each bar is one rank's step: its own work, then the time it waits in collectives for the others. "
                   "The straggler waits least; the others wait for it.", bars)
    chart.legend = [{"label": "own work", "cls": "s-busy"}]
    if any(r.get("straggler") for r in rows):
        chart.legend.append({"label": "own work (straggler)", "cls": "p2"})
    chart.legend.append({"label": "waiting in collectives", "cls": "i-communication"})
    return chart


# ------------------------------------------------------------------------------ kernel SOL scatter

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


# ------------------------------------------------------------------------------ memory over time

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


def top_kernels_table(rows: list[dict], source: dict | None = None) -> Chart | None:
    """The kernels with the most time per steady step (a table; timeline_ops.top_kernels rows)."""
    rows = [r for r in rows or [] if isinstance(r, dict)][:10]
    if not rows:
        return None
    where = f" From {source['path']}." if isinstance(source, dict) and source.get("path") else ""
    chart = Chart("top_kernels", "Top kernels per step",
                  "Kernels by time per steady step, keyed by name and launch configuration (grid x block)." + where, 0, 0)
    chart.table = {"caption": "", "headers": ["kernel", "grid x block", "launches/step", "ms/step", "% of step"],
                   "numeric": [False, False, True, True, True], "mono": [True, True, False, False, False],
                   "rows": [[shorten(short_name(r.get("name", "")), 80), f"{int(_num(r.get('grid')))} x {int(_num(r.get('block')))}",
                             f"{_num(r.get('launches_per_step')):.1f}", f"{_num(r.get('ms_per_step')):.3f}",
                             f"{_num(r.get('step_share_pct')):.1f}%"] for r in rows]}
    return chart


def top_ops_table(rows: list[dict], source: dict | None = None) -> Chart | None:
    """The op distribution (the profiler's key_averages view; timeline_ops.op_distribution rows)."""
    rows = [r for r in rows or [] if isinstance(r, dict)][:10]
    if not rows:
        return None
    where = f" From {source['path']}." if isinstance(source, dict) and source.get("path") else ""
    chart = Chart("top_ops", "Top ops by GPU time",
                  "PyTorch ops by the GPU time of the kernels they launch (self CUDA time, as key_averages), with "
                  "calls and CPU time per steady step." + where, 0, 0)
    chart.table = {"caption": "", "headers": ["op", "calls/step", "GPU ms/step", "% of op GPU time", "CPU ms/step"],
                   "numeric": [False, True, True, True, True], "mono": [True, False, False, False, False],
                   "rows": [[shorten(str(r.get("op", "")), 80), f"{_num(r.get('calls_per_step')):.1f}",
                             f"{_num(r.get('gpu_ms_per_step')):.3f}", f"{_num(r.get('gpu_share_pct')):.1f}%",
                             f"{_num(r.get('cpu_ms_per_step')):.3f}"] for r in rows]}
    return chart


def report_tables(data: dict | None) -> list[dict]:
    """The tables text reports print (Markdown): [{title, caption, headers, numeric, rows}]."""
    data = data or {}
    out = []
    for chart in (top_kernels_table(data.get("top_kernels"), data.get("source")),
                  top_ops_table(data.get("top_ops"), data.get("source"))):
        if chart is not None:
            out.append(dict(chart.table, title=chart.title, caption=chart.caption))
    return out


def build_charts(data: dict | None) -> list[Chart]:
    """Every chart the report's data allows, in reading order (time, kernels, memory)."""
    from .rank_charts import rank_charts
    data = data or {}
    cats = sorted((r for r in data.get("kernel_categories") or [] if isinstance(r, dict)), key=lambda r: -_num(r.get("time_ms")))
    sol = sorted((r for r in data.get("kernel_sol") or [] if isinstance(r, dict)), key=lambda r: -_num(r.get("time_share_pct")))
    colours = palette([str(r.get("category")) for r in cats] + [str(r.get("category")) for r in sol])
    charts = [
        steps_chart(data.get("steps"), data.get("source")),
        *rank_charts(data, ranks_chart),  # many ranks: sorted columns, rank groups, collectives (rank_charts.py)
        kernel_categories_chart(data.get("kernel_categories"), colours),
        kernel_sol_chart(data.get("kernel_sol"), colours),
        top_kernels_table(data.get("top_kernels"), data.get("source")),
        top_ops_table(data.get("top_ops"), data.get("source")),
        memory_composition_chart(data.get("memory_composition")),
        memory_timeline_chart(data.get("memory_timeline")),
        top_sites_table(data.get("top_sites")),
    ]
    return [c for c in charts if c is not None]
