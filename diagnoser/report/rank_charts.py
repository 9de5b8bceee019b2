"""Rank charts of a distributed run: step time per rank (one labelled bar per rank for a few ranks;
one thin column per rank, sorted, the latest to arrive at the collectives first, for many); the rank
groups and the per-collective breakdown as tables.

Series come from analysis (charts["ranks"], ["rank_groups"], ["collectives"], see
diagnoser.timeline.rank_scale); this module only maps them to pixels and table cells.
"""
from __future__ import annotations

from .chart_geometry import Chart, _hbars, _num, nice_ticks
from .formatting import fmt_value

MANY_RANKS = 16       # above this, one thin sorted column per rank instead of one labelled bar per rank
TABLE_FIRST, TABLE_LAST = 10, 5


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


def many_ranks_chart(rows: list[dict]) -> Chart | None:
    """Each rank's step split into its own work and its wait in collectives, ranks sorted by that wait."""
    rows = sorted((r for r in rows or [] if isinstance(r, dict)),
                  key=lambda r: (_num(r.get("comm_wait_ms")), _num(r.get("rank"))))
    if len(rows) < 2:
        return None
    width, left, right, top, bottom = 720, 56, 12, 24, 40
    plot_w, plot_h = width - left - right, 220
    height = top + plot_h + bottom
    ticks = nice_ticks(max(_num(r.get("step_ms")) for r in rows) or 1.0)
    scale = plot_h / ticks[-1]
    chart = Chart("ranks", f"Step time per rank ({len(rows)} ranks, sorted)",
                  "One column per rank: its own work (bottom) and the time it waits in collectives for the others "
                  "(top), sorted by that wait. The ranks that arrive last wait least: they stand on the left.",
                  width, height)
    for t in ticks:
        y = round(top + plot_h - t * scale, 1)
        chart.lines.append({"x1": left, "y1": y, "x2": width - right, "y2": y, "cls": "grid"})
        chart.texts.append({"x": left - 6, "y": round(y + 4, 1), "text": f"{t:g}", "anchor": "end", "cls": "tick"})
    chart.texts.append({"x": left - 6, "y": top - 12, "text": "ms", "anchor": "end", "cls": "axis-label"})
    slot = plot_w / len(rows)
    bar_w = max(0.6, slot * 0.8)
    for k, r in enumerate(rows):
        step = _num(r.get("step_ms"))
        wait = min(_num(r.get("comm_wait_ms")), step)
        x = round(left + k * slot + (slot - bar_w) / 2, 2)
        label = f"rank {r.get('rank')}" + (" (straggler)" if r.get("straggler") else "")
        own_h, wait_h = (step - wait) * scale, wait * scale
        base = top + plot_h
        chart.rects.append({"x": x, "y": round(base - own_h, 1), "w": round(bar_w, 2), "h": round(max(own_h, 0.5), 1),
                            "cls": "p2" if r.get("straggler") else "s-busy",
                            "tip": f"{label}: {fmt_value(step - wait)} ms of its own work per step"})
        if wait > 0:
            chart.rects.append({"x": x, "y": round(base - own_h - wait_h, 1), "w": round(bar_w, 2),
                                "h": round(max(wait_h, 0.5), 1), "cls": "i-communication",
                                "tip": f"{label}: {fmt_value(wait)} ms per step waiting in collectives"})
        if r.get("straggler"):
            chart.texts.append({"x": round(x + bar_w / 2, 1), "y": round(base - own_h - wait_h - 6, 1),
                                "text": str(r.get("rank")), "anchor": "start" if k < len(rows) / 2 else "end",
                                "cls": "label"})
    chart.lines.append({"x1": left, "y1": top + plot_h, "x2": width - right, "y2": top + plot_h, "cls": "axis"})
    chart.texts.append({"x": round(left + plot_w / 2, 1), "y": height - 8, "text": "ranks, by time waiting in collectives",
                        "anchor": "middle", "cls": "axis-label"})
    chart.legend = [{"label": "own work", "cls": "s-busy"}]
    if any(r.get("straggler") for r in rows):
        chart.legend.append({"label": "own work (straggler)", "cls": "p2"})
    chart.legend.append({"label": "waiting in collectives", "cls": "i-communication"})
    shown = rows if len(rows) <= TABLE_FIRST + TABLE_LAST else rows[:TABLE_FIRST] + rows[-TABLE_LAST:]
    chart.table = {
        "caption": "" if shown is rows else f"the {TABLE_FIRST} ranks that wait least (arrive last) and the "
                                            f"{TABLE_LAST} that wait most, of {len(rows)}",
        "headers": ["rank", "step (ms)", "waiting in collectives (ms)", "GPU busy"],
        "numeric": [False, True, True, True], "mono": [False, False, False, False],
        "rows": [[f"{r.get('rank')}{' (straggler)' if r.get('straggler') else ''}", fmt_value(_num(r.get("step_ms"))),
                  fmt_value(_num(r.get("comm_wait_ms"))), f"{_num(r.get('busy_pct')):.0f}%"] for r in shown]}
    return chart


def rank_groups_table(rows: list[dict]) -> Chart | None:
    """Ranks that behave alike, latest arrivers first (a table; no drawing)."""
    rows = [r for r in rows or [] if isinstance(r, dict)]
    if sum(int(_num(r.get("count"))) for r in rows) <= 2:
        return None
    chart = Chart("rank_groups", "Ranks that behave alike",
                  "Ranks whose time in collectives and own work differ by less than 5% of the step, the latest to "
                  "arrive at the collectives first.", 0, 0)
    chart.table = {"caption": "", "headers": ["ranks", "count", "step (ms)", "in collectives (ms)", "own work",
                                              "GPU busy", "idle mostly"],
                   "numeric": [False, True, True, True, True, True, False], "mono": [False] * 7,
                   "rows": [[r.get("ranks", "") + ((" (stragglers)" if _num(r.get("count")) > 1 else " (straggler)")
                                                    if r.get("straggler") else ""),
                             str(int(_num(r.get("count")))), fmt_value(_num(r.get("step_ms"))),
                             fmt_value(_num(r.get("comm_wait_ms"))), f"{_num(r.get('own_work_pct')):.0f}%",
                             f"{_num(r.get('busy_pct')):.0f}%", str(r.get("idle_top_class", ""))] for r in rows]}
    return chart


def collectives_table(rows: list[dict]) -> Chart | None:
    """NCCL time per collective kind and stream: transfer versus waiting for peers (a table)."""
    rows = [r for r in rows or [] if isinstance(r, dict)]
    if not rows:
        return None
    chart = Chart("collectives", "Time in collectives, by collective",
                  "Per step, mean over ranks: the transfer (what every rank spends once all have arrived) and the "
                  "waiting for peers before it. Each process group runs on NCCL streams of its own.", 0, 0)
    chart.table = {"caption": "", "headers": ["collective", "NCCL stream", "calls / step", "transfer (ms)",
                                              "waiting (ms)", "waits most", "arrives last"],
                   "numeric": [False, True, True, True, True, False, False], "mono": [True] + [False] * 6,
                   "rows": [[str(r.get("collective", "")) + (f" on {r['process_group']}" if r.get("process_group") else ""),
                             f"#{r.get('stream')}", fmt_value(_num(r.get("calls_per_step"))),
                             fmt_value(_num(r.get("transfer_ms"))), fmt_value(_num(r.get("wait_ms"))),
                             f"rank {r.get('max_wait_rank')} ({fmt_value(_num(r.get('max_wait_ms')))} ms)",
                             f"rank {r.get('last_rank')}"] for r in rows]}
    return chart


def rank_charts(data: dict, few_ranks_chart=ranks_chart) -> list:
    """The per-rank charts of a distributed run: `few_ranks_chart` (one labelled bar per rank) up to
    MANY_RANKS ranks, the sorted thin columns beyond; then the groups and collectives tables."""
    ranks = data.get("ranks") or []
    first = few_ranks_chart(ranks) if len(ranks) <= MANY_RANKS else many_ranks_chart(ranks)
    return [first, rank_groups_table(data.get("rank_groups")), collectives_table(data.get("collectives"))]
