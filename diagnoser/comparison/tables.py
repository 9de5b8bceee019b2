"""The comparison's tables: headline numbers, kernels (Nsight Compute launches), timeline kernels per
steady step, steps by phase, and every fact both sides measured."""
from __future__ import annotations

import statistics

from ..kernel_names import short_name
from .changes import HEADLINES, change, direction_of
from .likeness import STEP_HEADLINES, is_per_step
from .matching import _launch_order, _subj_json
from .sides import Side, _num


def headlines(before: Side, after: Side, matched: dict, noise_pct: float, same_steps: bool = True) -> list[dict]:
    """The headline numbers both sides measured; the per-step ones only when both cut steps the same way."""
    out = []
    for name, label, d in HEADLINES:
        if not same_steps and name in STEP_HEADLINES:
            continue
        if name in before.run and name in after.run:
            noise = noise_pct if name in ("step_time_ms_p50", "gpu_busy_pct", "kernel_time_ms_per_step") else 0.0
            row = {"fact": name, "label": label, "unit": before.units.get(name, "")}
            row.update(change(before.run[name], after.run[name], d, noise))
            row["noise_pct"] = round(noise, 3)
            out.append(row)
    return out


def kernel_rows(before: Side, after: Side, matched: dict) -> list[dict]:
    """Each kernel's duration before -> after (kernel tree), BEFORE's costliest first."""
    rows = []
    inverse = {v: k for k, v in matched.items()}
    for kb, entry in before.subjects.items():
        if kb[0] != "kernel":
            continue
        ka = matched.get(kb)
        fb = entry["facts"]
        fa = after.subjects[ka]["facts"] if ka else {}
        row = {"before": _subj_json(before, kb), "after": _subj_json(after, ka) if ka else None,
               "name": short_name(fb.get("kernel_name") or entry["name"] or kb[1])}
        row["duration_us"] = change(fb.get("kernel_duration_us"), fa.get("kernel_duration_us"), "lower")
        row["time_share_pct"] = fb.get("kernel_time_share_pct")
        for k in ("sm_throughput_pct", "memory_throughput_pct"):
            row[k] = [fb.get(k), fa.get(k)]
        row["config_changed"] = bool(ka) and (_subj_json(before, kb)["grid"], _subj_json(before, kb)["block"]) != \
            (_subj_json(after, ka)["grid"], _subj_json(after, ka)["block"])
        rows.append(row)
    for ka, entry in after.subjects.items():
        if ka[0] == "kernel" and ka not in inverse:
            fa = entry["facts"]
            rows.append({"before": None, "after": _subj_json(after, ka),
                         "name": short_name(fa.get("kernel_name") or entry["name"] or ka[1]),
                         "duration_us": change(None, fa.get("kernel_duration_us"), "lower"),
                         "sm_throughput_pct": [None, fa.get("sm_throughput_pct")],
                         "memory_throughput_pct": [None, fa.get("memory_throughput_pct")], "config_changed": False})
    rows.sort(key=lambda r: -(_num((r["duration_us"] or {}).get("before")) or _num((r["duration_us"] or {}).get("after")) or 0))
    return rows


TIMELINE_KERNEL_ROWS = 200  # JSON rows of timeline_kernels (the costliest of either side)


def _timeline_kernels(side: Side) -> list:
    """The side's kernels table (result_tables.KernelRow), costliest first."""
    return list(side.report.tables.kernels or [])


def _pairs(tb: list, ta: list) -> list[tuple]:
    """(BEFORE row, AFTER row, configuration changed): by name and launch configuration, else by name."""
    key = lambda r: (r.name, r.grid, r.block)  # noqa: E731
    by_key = {key(r): i for i, r in enumerate(ta)}
    used, pairs = set(), []
    for r in tb:
        j = by_key.get(key(r))
        if j is not None and j not in used:
            used.add(j)
            pairs.append((r, ta[j], False))
        else:
            pairs.append((r, None, False))
    for n, (r, a, _) in enumerate(pairs):
        if a is None:
            j = next((j for j, x in enumerate(ta) if j not in used and x.name == r.name), None)
            if j is not None:
                used.add(j)
                pairs[n] = (r, ta[j], True)
    return pairs + [(None, x, False) for j, x in enumerate(ta) if j not in used]


def timeline_kernel_rows(before: Side, after: Side) -> list[dict]:
    """Timeline kernels (the kernels table: steady steps, grouped by name, grid and block), BEFORE's
    matched to AFTER's by name and launch configuration, else by name (the costliest unmatched first)."""
    tb, ta = _timeline_kernels(before), _timeline_kernels(after)
    if not (tb and ta):
        return []
    rows = []
    for b, a, changed in _pairs(tb, ta):
        one = b or a
        rows.append({"name": short_name(one.name or ""), "kernel_name": one.name,
                     "before": None if b is None else {"grid": b.grid, "block": b.block},
                     "after": None if a is None else {"grid": a.grid, "block": a.block},
                     "ms_per_step": change(None if b is None else b.ms_per_step,
                                           None if a is None else a.ms_per_step, "lower"),
                     "launches_per_step": [None if b is None else b.launches_per_step,
                                           None if a is None else a.launches_per_step],
                     "step_share_pct": [None if b is None else b.step_share_pct,
                                        None if a is None else a.step_share_pct],
                     "config_changed": changed})
    rows.sort(key=lambda r: -max(_num(r["ms_per_step"].get("before")) or 0, _num(r["ms_per_step"].get("after")) or 0))
    return rows[:TIMELINE_KERNEL_ROWS]


def kernel_totals(before: Side, after: Side) -> list[dict]:
    """Each timeline kernel's totals over its side's analysed span (the steady steps end to end): launches,
    GPU time, time per launch; matched like timeline_kernel_rows. What is compared when the two sides cut
    steps differently: a time per launch does not depend on where steps are cut."""
    tb, ta = _timeline_kernels(before), _timeline_kernels(after)
    if not (tb and ta):
        return []
    nb, na = _num(before.run.get("step_count")) or 0, _num(after.run.get("step_count")) or 0

    def total(r, n):
        if r is None:
            return None
        launches = float(r.launches_per_step or 0) * n
        ms = float(r.ms_per_step or 0) * n
        return {"grid": r.grid, "block": r.block, "launches": round(launches),
                "gpu_ms": round(ms, 6), "us_per_launch": round(1000 * ms / launches, 4) if launches else None}
    rows = []
    for b, a, changed in _pairs(tb, ta):
        one = b or a
        tb_, ta_ = total(b, nb), total(a, na)
        rows.append({"name": short_name(one.name or ""), "kernel_name": one.name, "before": tb_, "after": ta_,
                     "launches": [None if tb_ is None else tb_["launches"], None if ta_ is None else ta_["launches"]],
                     "gpu_ms": change(None if tb_ is None else tb_["gpu_ms"], None if ta_ is None else ta_["gpu_ms"]),
                     # not judged: kernels that overlap (async queues, streams) each run longer yet finish sooner
                     "us_per_launch": change(None if tb_ is None else tb_["us_per_launch"],
                                             None if ta_ is None else ta_["us_per_launch"]),
                     "config_changed": changed})
    rows.sort(key=lambda r: -max(_num(r["gpu_ms"].get("before")) or 0, _num(r["gpu_ms"].get("after")) or 0))
    return rows[:TIMELINE_KERNEL_ROWS]


def op_totals(before: Side, after: Side) -> list[dict]:
    """Each op's totals over its side's analysed span (PyTorch traces: the ops table), matched by name:
    calls, GPU time, GPU time per call; what kernel_totals is for kernels."""
    def rows_of(side):
        n = _num(side.run.get("step_count")) or 0
        out = {}
        for r in side.report.tables.ops or []:
            if r.op and r.op not in out:
                calls, ms = float(r.calls_per_step or 0) * n, float(r.gpu_ms_per_step or 0) * n
                out[r.op] = {"calls": round(calls), "gpu_ms": round(ms, 6),
                                "gpu_us_per_call": round(1000 * ms / calls, 4) if calls else None}
        return out
    ob, oa = rows_of(before), rows_of(after)
    if not (ob and oa):
        return []
    rows = []
    for op in list(ob) + [o for o in oa if o not in ob]:
        b, a = ob.get(op), oa.get(op)
        rows.append({"op": op, "before": b, "after": a,
                     "gpu_ms": change(None if b is None else b["gpu_ms"], None if a is None else a["gpu_ms"]),
                     "gpu_us_per_call": change(None if b is None else b["gpu_us_per_call"],
                                               None if a is None else a["gpu_us_per_call"])})
    rows.sort(key=lambda r: -max(_num(r["gpu_ms"].get("before")) or 0, _num(r["gpu_ms"].get("after")) or 0))
    return rows


def fact_rows(before: Side, after: Side, matched: dict, directions: dict, same_steps: bool = True) -> list[dict]:
    """Every fact both sides measured; a per-step fact of two sides that cut steps differently is shown,
    not judged (`moved`: "steps differ")."""
    rows = []
    for name in sorted(set(before.run) & set(after.run)):
        unit = before.units.get(name, "")
        row = {"subject": None, "fact": name, "unit": unit,
               **change(before.run[name], after.run[name], direction_of(name, unit, directions))}
        if not same_steps and is_per_step(name):
            row.pop("better", None)
            row.pop("speedup", None)
            row["moved"] = "steps differ"
        rows.append(row)
    for kb, ka in sorted(matched.items(), key=lambda kv: _launch_order(kv[0])):
        fb, fa = before.subjects[kb]["facts"], after.subjects[ka]["facts"]
        for name in sorted(set(fb) & set(fa)):
            unit = before.units.get(name, "")
            rows.append({"subject": {"before": _subj_json(before, kb), "after": _subj_json(after, ka)}, "fact": name,
                         "unit": unit, **change(fb[name], fa[name], direction_of(name, unit, directions))})
    return rows


def phase_rows(before: Side, after: Side) -> list[dict]:
    """Steps matched by role: the median steady step of each side, busy and each idle class."""
    def med(steps, get):
        vals = [v for v in (get(s) for s in steps) if v is not None]
        return statistics.median(vals) if vals else None
    rows = []
    if not (before.steps and after.steps):
        return rows
    rows.append({"phase": "step", **change(med(before.steps, lambda s: _num(s.dur_ms)),
                                           med(after.steps, lambda s: _num(s.dur_ms)), "lower")})
    rows.append({"phase": "busy", **change(med(before.steps, lambda s: _num(s.busy_ms)),
                                           med(after.steps, lambda s: _num(s.busy_ms)))})
    classes = list(dict.fromkeys([c for s in before.steps + after.steps for c in s.idle_ms_by_class]))
    for c in classes:
        b = med(before.steps, lambda s: _num(s.idle_ms_by_class.get(c, 0.0)))
        a = med(after.steps, lambda s: _num(s.idle_ms_by_class.get(c, 0.0)))
        if b or a:
            rows.append({"phase": f"idle: {c}", **change(b, a, "lower")})
    for r in rows:
        r["unit"] = "ms"
    return rows
