"""One steady step as a timeline strip (diagnoser.timeline.strip's series -> SVG): per rank, the host
row (the op, API call or annotation under each big gap, coloured by the gap's class), the idle band
(every gap's share of each column of the step, coloured by its main class) and the GPU's streams with
their kernels coloured by category. The x axis is the step itself, so a 100 ms training step and a
2 ms decode step fill the same width."""
from __future__ import annotations

from .chart_geometry import Chart, _num, _r, _tick_label, nice_ticks
from .formatting import fmt_value
from .timeline_charts import IDLE_LABELS

WIDTH, LEFT, RIGHT, TOP = 960, 150, 12, 22
HOST_H, BAND_H, LANE_H, GAP_Y, RANK_GAP = 18, 14, 16, 3, 14
LABEL_MIN_PX = 60  # host labels only where the item is this wide
MAX_RANKS = 8
MAX_LANES = 12  # streams drawn in all, over the stacked ranks
WAIT_CATEGORIES = ("communication",)  # kernel categories drawn as a wait, not as compute
WAIT_CLS = "s-wait"


def _idle_cls(c: str) -> str:
    return f"i-{c}" if c in IDLE_LABELS or c == "alloc" else "i-other"


def _lane_cls(cat) -> str:
    """A stream's kernels are drawn busy, except communication (NCCL) kernels: on a DDP rank they mostly
    wait for the other ranks, so they take the colour of the idle band's communication wait."""
    return WAIT_CLS if str(cat) in WAIT_CATEGORIES else "s-busy"


def _idle_label(c: str) -> str:
    return IDLE_LABELS.get(c, "idle: allocator (malloc/free)" if c == "alloc" else f"idle: {c}")


class _Drawing:
    """The chart being drawn, the classes its legend must name, and the y where the next row goes."""

    def __init__(self, chart: Chart, multi: bool):
        self.chart, self.multi, self.y = chart, multi, TOP
        self.classes_seen: set[str] = set()
        self.lane_classes: set[str] = set()


class _Rank:
    """One rank's strip on its own time axis: the step's length spans the plot's width."""

    def __init__(self, strip: dict, multi: bool):
        self.strip, self.dur = strip, _num(strip.get("dur_us"))
        self.scale = (WIDTH - LEFT - RIGHT) / self.dur
        who = f"rank {strip['rank']}, " if strip.get("rank") is not None and multi else ""
        self.step = f"{who}step {strip.get('step')}"

    def x_of(self, us: float) -> float:
        return LEFT + max(0.0, min(_num(us), self.dur)) * self.scale

    def column(self, j: int, n: int) -> tuple[float, float]:
        """Column j of n's start and end, in us into the step."""
        return self.dur * j / n, self.dur * (j + 1) / n


def _draw_host_row(d: _Drawing, r: _Rank) -> None:
    """The op, API call or annotation under each long gap, coloured by the gap's class."""
    strip, chart, y = r.strip, d.chart, d.y
    chart.texts.append({"x": LEFT - 8, "y": _r(y + HOST_H - 5), "text": f"rank {strip['rank']}: host"
                        if d.multi and strip.get("rank") is not None else "host", "anchor": "end", "cls": "tick"})
    for a, b, label, kind, cls in strip.get("host") or []:
        x0, x1 = r.x_of(a), r.x_of(b)
        d.classes_seen.add(str(cls))
        tip = f"{r.step}: {label} ({kind}) {fmt_value((_num(b) - _num(a)) / 1e3)} ms, under a gap of class {cls}"
        chart.rects.append({"x": _r(x0), "y": _r(y), "w": _r(max(x1 - x0, 1.0)), "h": HOST_H,
                            "cls": _idle_cls(str(cls)), "tip": tip})
        if x1 - x0 >= LABEL_MIN_PX:
            room = int((x1 - x0) / 6.5)
            text = label if len(label) <= room else label[:max(room - 1, 1)] + "\u2026"
            chart.texts.append({"x": _r(x0 + 3), "y": _r(y + HOST_H - 5), "text": text, "anchor": "start", "cls": "tick"})
    d.y += HOST_H + GAP_Y


def _draw_idle_band(d: _Drawing, r: _Rank) -> None:
    """Each column's idle share, coloured by what the GPU waited for most."""
    chart, y = d.chart, d.y
    chart.texts.append({"x": LEFT - 8, "y": _r(y + BAND_H - 3), "text": "GPU idle", "anchor": "end", "cls": "tick"})
    cols = r.strip.get("idle_columns") or []
    for j, (frac, cls) in enumerate(cols):
        if _num(frac) <= 0 or not cls:
            continue
        d.classes_seen.add(str(cls))
        a, b = r.column(j, len(cols))
        h = BAND_H * min(_num(frac), 1.0)
        chart.rects.append({"x": _r(r.x_of(a)), "y": _r(y + BAND_H - h), "w": _r(max(r.x_of(b) - r.x_of(a), 0.6)),
                            "h": _r(max(h, 0.6)), "cls": _idle_cls(str(cls)),
                            "tip": f"{r.step}: {fmt_value(a / 1e3)}-{fmt_value(b / 1e3)} ms idle {100 * _num(frac):.0f}% "
                                   f"({_idle_label(str(cls))})"})
    d.y += BAND_H + GAP_Y


def _draw_lane(d: _Drawing, r: _Rank, lane: dict) -> None:
    """One stream: its kernels (or, where they are too dense, each column's busy share)."""
    chart, y = d.chart, d.y
    chart.texts.append({"x": LEFT - 8, "y": _r(y + LANE_H - 4), "text": f"stream {lane.get('stream')} "
                        f"({_num(lane.get('busy_pct')):.0f}% busy)", "anchor": "end", "cls": "tick"})
    chart.lines.append({"x1": LEFT, "y1": _r(y + LANE_H / 2), "x2": WIDTH - RIGHT, "y2": _r(y + LANE_H / 2), "cls": "grid"})
    for a, b, cat in lane.get("rects") or []:
        x0, x1 = r.x_of(a), r.x_of(b)
        d.lane_classes.add(_lane_cls(cat))
        chart.rects.append({"x": _r(x0), "y": _r(y), "w": _r(max(x1 - x0, 0.6)), "h": LANE_H, "cls": _lane_cls(cat),
                            "tip": f"{r.step}, stream {lane.get('stream')}: {cat} kernels {fmt_value(_num(a) / 1e3)}-"
                                   f"{fmt_value(_num(b) / 1e3)} ms"})
    cols = lane.get("columns") or []
    for j, (frac, cat) in enumerate(cols):
        if _num(frac) <= 0:
            continue
        a, b = r.column(j, len(cols))
        h = LANE_H * min(_num(frac), 1.0)
        d.lane_classes.add(_lane_cls(cat))
        chart.rects.append({"x": _r(r.x_of(a)), "y": _r(y + LANE_H - h), "w": _r(max(r.x_of(b) - r.x_of(a), 0.6)),
                            "h": _r(max(h, 0.6)), "cls": _lane_cls(cat),
                            "tip": f"{r.step}, stream {lane.get('stream')}: {fmt_value(a / 1e3)}-{fmt_value(b / 1e3)} "
                                   f"ms busy {100 * _num(frac):.0f}% (mostly {cat} kernels)"})
    d.y += LANE_H + GAP_Y


def _draw_rank(d: _Drawing, strip: dict) -> None:
    """One rank's block: host row, idle band, its streams (one empty lane's height where it has none)."""
    r = _Rank(strip, d.multi)
    _draw_host_row(d, r)
    _draw_idle_band(d, r)
    for lane in strip.get("lanes") or []:
        _draw_lane(d, r, lane)
    if not strip.get("lanes"):
        d.y += LANE_H + GAP_Y
    d.y += RANK_GAP


def _draw_axis(d: _Drawing, one: dict) -> float:
    """The first rank's time ticks down the whole chart; returns the step's length in ms."""
    chart, y, plot_w = d.chart, d.y, WIDTH - LEFT - RIGHT
    ticks = nice_ticks(_num(one.get("dur_us")) / 1e3)
    dur_ms = _num(one.get("dur_us")) / 1e3
    for t in ticks:
        if t > dur_ms * 1.001:
            break
        x = LEFT + t / dur_ms * plot_w
        chart.lines.append({"x1": _r(x), "y1": TOP - 4, "x2": _r(x), "y2": _r(y), "cls": "grid"})
        chart.texts.append({"x": _r(x), "y": _r(y + 14), "text": _tick_label(t), "anchor": "middle", "cls": "tick"})
    chart.texts.append({"x": _r(LEFT + plot_w / 2), "y": _r(y + 30), "text": "ms into the step", "anchor": "middle",
                        "cls": "axis-label"})
    return dur_ms


def _legend_and_caption(d: _Drawing, one: dict, dur_ms: float, source: dict | None) -> None:
    """The legend names only the classes drawn; the caption says which step and where it came from."""
    chart = d.chart
    chart.legend = [{"label": "GPU busy (kernels, copies; a column's height: its busy share)", "cls": "s-busy"}]
    if WAIT_CLS in d.lane_classes:
        chart.legend.append({"label": "in NCCL (communication kernels: the stream waits for the other ranks)",
                             "cls": WAIT_CLS})
    chart.legend += [{"label": _idle_label(c), "cls": _idle_cls(c)} for c in sorted(d.classes_seen)]
    chart.caption += f" Step {one.get('step')} lasts {fmt_value(dur_ms)} ms"
    if d.multi:
        chart.caption += (f" on rank {one.get('rank')}; the ranks are stacked, each on its own time axis "
                          "(the ticks are the first one's)")
    chart.caption += "."
    if isinstance(source, dict) and source.get("path"):
        chart.caption += f" From {source['path']}."


def step_strip_chart(strips: list[dict] | None, source: dict | None = None) -> Chart | None:
    """The strips of up to MAX_RANKS ranks stacked, their streams capped at MAX_LANES in all."""
    strips = [s for s in strips or [] if isinstance(s, dict) and _num(s.get("dur_us")) > 0][:MAX_RANKS]
    if not strips:
        return None
    per_rank = max(1, MAX_LANES // len(strips))  # the busiest streams of each rank (a bounded drawing)
    strips = [dict(s, lanes=(s.get("lanes") or [])[:per_rank]) for s in strips]
    blocks = [HOST_H + GAP_Y + BAND_H + GAP_Y + max(len(s.get("lanes") or []), 1) * (LANE_H + GAP_Y) for s in strips]
    height = TOP + sum(blocks) + RANK_GAP * (len(strips) - 1) + 34
    chart = Chart("step_strip", "One steady step, as a timeline",
                  "The middle steady step: the GPU's streams with their kernels (hover: the "
                  "kernel category), the idle band below the host row (each column: the share of the time the GPU was idle, "
                  "coloured by what it waited for), and on the host row the op, API call or annotation under each "
                  "long gap. Hover for names and times.", WIDTH, height)
    d = _Drawing(chart, len(strips) > 1)
    for strip in strips:
        _draw_rank(d, strip)
    d.y -= RANK_GAP
    dur_ms = _draw_axis(d, strips[0])
    _legend_and_caption(d, strips[0], dur_ms, source)
    return chart
