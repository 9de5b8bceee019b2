"""Two runs, diagnosed with the same rules, matched fact by fact, kernel by kernel, finding by finding.

Each side is one run (any inputs `diagnose FILE...` takes, several ranks included) diagnosed by
pipeline.diagnose. Then:

- facts: every fact both sides measured on the same subject, before / after / change, and whether it
  moved the right way. The right way of a fact comes from the rules: a rule's `verify_check` says
  where the fact must go after a fix (lt/lte/falls: down; gt/gte/rises: up); times and memory go
  down (HEADLINE_DIRECTIONS); otherwise the direction is unknown and not judged.
- subjects: kernels are matched by name and launch configuration (grid x block), the n-th launch of
  a configuration to the n-th; a kernel whose configuration changed is matched by name (a fix may
  change the grid). Ranks, devices and other subjects by id. Steps by role: the steady steps of
  each side are summarized (median) and compared phase by phase (busy, idle by class).
- findings: per finding of BEFORE, `fixed` (the rule no longer fires and every condition of its
  `verify_check` holds on AFTER), `improved` (its cost fell beyond the noise, or it no longer fires
  but the Verify step does not hold yet), `unchanged`, `regressed` (cost rose beyond the noise, or
  its severity rose); findings only AFTER has are `new`. A finding's cost is its estimated gain
  times the time it is a share of (step time, GPU time, peak memory) on its side, so a share that
  grows only because the total shrank is not a regression.
- noise: the variation between the steady steps of one run (p10..p90 of the step times over the
  median, with fewer than 10 steps the full range), the larger of the two sides. A headline change
  or a finding's cost change counts only when it exceeds that noise (and, for findings, the
  `compare.min_change_pct` setting); the CI gate (`--fail-on-regression PCT`) trips only when a
  headline number got worse by more than max(PCT, noise).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .. import settings
from ..facts import short_name

SCHEMA = "diagnoser.compare/1"
MIN_CHANGE = settings.register("compare.min_change_pct", 5.0, "%",
                               "smallest change of a finding's cost (gain x its base time) counted as improved or regressed")
MIN_COST_SHARE = settings.register("compare.min_cost_change_share_pct", 1.0, "%",
                                   "smallest change of a finding's cost counted, % of the time (or memory) it is a share of")
MIN_KERNEL_SHARE = settings.register("compare.min_kernel_share_pct", 1.0, "%",
                                     "kernels below this share of BEFORE's GPU time are not gated on their duration")
SAME_PCT = 0.5  # |relative change| below this reads "unchanged" in the fact table (display only)

# headline numbers: fact, label, better direction, subject kind it is read from
HEADLINES = (
    ("step_time_ms_p50", "step time (median)", "lower"),
    ("gpu_busy_pct", "GPU busy share", "higher"),
    ("kernel_time_ms_per_step", "kernel time per step", "lower"),
    ("kernel_gpu_time_total_ms", "kernel GPU time (all launches)", "lower"),
    ("peak_allocated_gib", "peak memory allocated", "lower"),
    ("peak_reserved_gib", "peak memory reserved", "lower"),
    ("num_ooms", "out-of-memory events", "lower"),
)
SECONDARY = ("gpu_busy_pct", "kernel_time_ms_per_step")  # gated only when the step did not get faster
HEADLINE_DIRECTIONS = {name: d for name, _, d in HEADLINES}
LOWER_UNITS = ("ms", "us", "ns", "s", "GiB", "MiB", "bytes")
VERDICT_ORDER = ("regressed", "new", "unchanged", "improved", "fixed")
GATE_SEVERITIES = ("warning", "critical")


@dataclass
class Side:
    paths: list[str]
    report: object  # pipeline.Report
    run: dict = field(default_factory=dict)  # run-level facts: name -> value
    subjects: dict = field(default_factory=dict)  # (kind, id) -> {"name", "facts": {}}
    units: dict = field(default_factory=dict)
    noise_pct: float = 0.0
    noise_basis: str = ""
    steps: list = field(default_factory=list)


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) else None


def side_of(paths, report) -> Side:
    s = Side(list(paths), report)
    for f in report.facts:
        s.units.setdefault(f.name, f.unit)
        if f.subject is None or f.subject.kind == "run":
            s.run.setdefault(f.name, f.value)
        else:
            entry = s.subjects.setdefault((f.subject.kind, f.subject.id), {"name": f.subject.name, "facts": {}})
            entry["facts"].setdefault(f.name, f.value)
    s.steps = [st for st in (report.charts.get("steps") or []) if isinstance(st, dict) and _num(st.get("dur_ms"))]
    s.noise_pct, s.noise_basis = step_noise(s.steps)
    return s


def step_noise(steps: list[dict]) -> tuple[float, str]:
    """The variation between the steady steps of one run, % of the median step time."""
    durs = sorted(_num(st.get("dur_ms")) for st in steps)
    if len(durs) < 2:
        return 0.0, "one step or none: no step-to-step variation measured"
    med = statistics.median(durs)
    if med <= 0:
        return 0.0, "zero step time"
    if len(durs) >= 10:
        q = statistics.quantiles(durs, n=10, method="inclusive")
        return 100 * (q[-1] - q[0]) / med, f"p10..p90 of {len(durs)} steady steps"
    return 100 * (durs[-1] - durs[0]) / med, f"range of {len(durs)} steady steps"


def fact_directions(pack) -> dict[str, str]:
    """The way each fact should move after a fix, from the rules' verify_check (then headlines)."""
    out = dict(HEADLINE_DIRECTIONS)
    for rule in pack.ordered():
        for c in rule.verify_check:
            d = {"lt": "lower", "lte": "lower", "falls": "lower", "gt": "higher", "gte": "higher",
                 "rises": "higher"}.get(c.op)
            if d:
                out.setdefault(c.fact, d)
    return out


def direction_of(name: str, unit: str, directions: dict) -> str:
    if name in directions:
        return directions[name]
    if unit in LOWER_UNITS and any(name.endswith(s) for s in ("_ms", "_us", "_ms_per_step", "_gib", "_mib")):
        return "lower"
    return ""


def change(before, after, direction: str = "", noise_pct: float = 0.0) -> dict:
    """before -> after of one number: delta, relative change, speed-up (times), and its judgement."""
    b, a = _num(before), _num(after)
    out = {"before": before, "after": after}
    if b is None or a is None:
        out["moved"] = "same" if before == after else "changed"
        return out
    out["delta"] = round(a - b, 6)
    rel = None if b == 0 else 100 * (a - b) / abs(b)
    out["change_pct"] = None if rel is None else round(rel, 3)
    if direction == "lower" and a > 0 and b > 0:
        out["speedup"] = round(b / a, 4)
    if direction:
        out["better"] = direction
    if a == b or (rel is not None and abs(rel) < max(SAME_PCT, noise_pct)):
        out["moved"] = "same"
    elif not direction:
        out["moved"] = "changed"
    else:
        out["moved"] = "right" if (a < b) == (direction == "lower") else "wrong"
    return out


def kernel_keys(side: Side) -> dict[tuple, tuple]:
    """(kind, id) of each kernel subject -> (name, grid, block, n-th launch of that configuration)."""
    seen: dict[tuple, int] = {}
    out = {}
    for key, entry in sorted(side.subjects.items(), key=lambda kv: _launch_order(kv[0])):
        if key[0] != "kernel":
            continue
        f = entry["facts"]
        name = f.get("kernel_name") or entry["name"] or key[1]
        cfg = (name, f.get("grid_blocks_count"), f.get("block_threads_count"))
        n = seen.get(cfg, 0)
        seen[cfg] = n + 1
        out[key] = cfg + (n,)
    return out


def _launch_order(key):
    kind, sid = key
    return (kind, int(sid) if str(sid).isdigit() else math.inf, str(sid))


def match_subjects(before: Side, after: Side) -> dict[tuple, tuple]:
    """BEFORE subject -> AFTER subject. Kernels: by name and launch configuration, else by name."""
    matched: dict[tuple, tuple] = {}
    kb, ka = kernel_keys(before), kernel_keys(after)
    by_cfg = {v: k for k, v in ka.items()}
    used = set()
    for k, v in kb.items():
        if v in by_cfg:
            matched[k] = by_cfg[v]
            used.add(by_cfg[v])
    by_name: dict[str, list] = {}
    for k, v in sorted(ka.items(), key=lambda kv: _launch_order(kv[0])):
        if k not in used:
            by_name.setdefault(v[0], []).append(k)
    for k, v in sorted(kb.items(), key=lambda kv: _launch_order(kv[0])):
        if k not in matched and by_name.get(v[0]):
            matched[k] = by_name[v[0]].pop(0)
    for key in before.subjects:
        if key[0] != "kernel" and key in after.subjects:
            matched[key] = key
    return matched


def _base(side: Side, gain_of: str, finding=None):
    """The time (or memory) a finding's gain is a share of, on its side."""
    g = (gain_of or "").lower()
    if "step" in g:
        return _num(side.run.get("step_time_ms_p50")), "ms"
    if "memory" in g:
        return _num(side.run.get("peak_allocated_gib")) or _num(side.run.get("composition_allocated_gib")), "GiB"
    if "gpu" in g or "kernel" in g:
        v = _num(side.run.get("kernel_gpu_time_total_ms"))
        if v is None:
            v = _num(side.run.get("kernel_time_ms_per_step"))
        return v, "ms"
    return None, ""


def cost(side: Side, f) -> float | None:
    base, _ = _base(side, f.gain_of)
    return None if base is None else f.estimated_gain * base


def _facts_for(side: Side, subject_key) -> dict:
    rec = dict(side.run)
    if subject_key is not None and subject_key in side.subjects:
        rec.update(side.subjects[subject_key]["facts"])
    return rec


def check_verify(rule, before_rec: dict, after_rec: dict | None) -> dict:
    """Evaluate a rule's verify_check on AFTER's facts (falls/rises against BEFORE's)."""
    if rule is None or not rule.verify_check:
        return {"holds": None, "checks": [], "reason": "the rule has no verify_check"}
    checks = []
    for c in rule.verify_check:
        threshold = rule.params.get(c.param) if c.param else c.value
        a = None if after_rec is None else after_rec.get(c.fact)
        b = before_rec.get(c.fact)
        item = {"fact": c.fact, "op": c.op, "threshold": threshold, "before": b, "after": a}
        if c.param:
            item["param"] = c.param
        if after_rec is None:
            item["holds"], item["why"] = None, "subject not in AFTER"
        elif c.op == "exists":
            item["holds"] = a is not None
        elif a is None:
            item["holds"], item["why"] = None, f"{c.fact} not measured in AFTER"
        elif c.op in ("falls", "rises"):
            if _num(b) is None or _num(a) is None:
                item["holds"], item["why"] = None, f"{c.fact} not measured on both sides"
            else:
                item["holds"] = a < b if c.op == "falls" else a > b
        else:
            item["holds"] = _op(c.op, a, threshold)
        checks.append(item)
    states = [c["holds"] for c in checks]
    holds = False if False in states else (None if None in states else True)
    return {"holds": holds, "checks": checks}


def _op(op, a, t):
    try:
        return {"lt": a < t, "lte": a <= t, "gt": a > t, "gte": a >= t, "eq": a == t, "neq": a != t}.get(op)
    except TypeError:
        return None


def _subject_key(f):
    return None if f.subject is None else (f.subject.kind, f.subject.id)


def _leaves(f) -> list:
    return list(f.kernels) if f.kernels else [f]


SEV_RANK = {"info": 0, "warning": 1, "critical": 2}


def _counts(before: Side, f, cb, ca) -> bool:
    """A cost change large enough to count: beyond compare.min_cost_change_share_pct of its base."""
    base, _ = _base(before, f.gain_of)
    if base is None or cb is None or ca is None:
        return True
    return abs(ca - cb) >= MIN_COST_SHARE.value / 100 * base


def finding_verdicts(before: Side, after: Side, pack, matched: dict, noise_pct: float) -> list[dict]:
    tol = max(MIN_CHANGE.value, noise_pct)
    after_by_rule = {f.rule: f for f in after.report.findings}
    before_rules = {f.rule for f in before.report.findings}
    inverse = {v: k for k, v in matched.items()}
    out = []
    for f in before.report.findings:
        rule = pack.rules.get(f.rule)
        g = after_by_rule.get(f.rule)
        entry = {"rule": f.rule, "title": f.title, "category": f.category, "tree": f.tree,
                 "severity_before": f.severity, "severity_after": g.severity if g else None,
                 "gain_of": f.gain_of, "gain_before": round(f.estimated_gain, 4),
                 "gain_after": round(g.estimated_gain, 4) if g else None,
                 "verify": f.verify}
        cb = cost(before, f)
        ca = cost(after, g) if g else 0.0
        base_unit = _base(before, f.gain_of)[1]
        if cb is not None:
            entry["cost_before"] = round(cb, 6)
            entry["cost_after"] = None if ca is None else round(ca, 6)
            entry["cost_unit"] = base_unit
        subjects = []
        scoped = f.subject is not None and f.subject.kind != "run"
        if scoped:
            fired_after = {_subject_key(k) for k in _leaves(g)} if g else set()
            for leaf in _leaves(f):
                kb = _subject_key(leaf)
                ka = matched.get(kb)
                v = check_verify(rule, _facts_for(before, kb), _facts_for(after, ka) if ka else None)
                if ka is None:
                    verdict = "fixed"
                    v["reason"] = "the kernel is no longer launched"
                elif ka in fired_after:
                    verdict = "unchanged"
                    lg = next(x for x in _leaves(g) if _subject_key(x) == ka)
                    lb, la = _gain_abs(before, f, leaf), _gain_abs(after, g, lg)
                    d = _rel(lb, la) if _counts(before, f, lb, la) else None
                    if d is not None and d < -tol:
                        verdict = "improved"
                    elif d is not None and d > tol:
                        verdict = "regressed"
                else:
                    verdict = "fixed" if v["holds"] else "improved"
                subjects.append({"before": _subj_json(before, kb), "after": _subj_json(after, ka) if ka else None,
                                 "verdict": verdict, "verify": v})
            for leaf in (_leaves(g) if g else []):
                ka = _subject_key(leaf)
                if inverse.get(ka) not in {_subject_key(x) for x in _leaves(f)}:
                    subjects.append({"before": _subj_json(before, inverse.get(ka)) if inverse.get(ka) else None,
                                     "after": _subj_json(after, ka), "verdict": "new"})
            entry["subjects"] = subjects
        if g is None:
            key = _subject_key(f)
            v = check_verify(rule, _facts_for(before, key), _facts_for(after, matched.get(key) if scoped else None))
            if scoped:
                states = [s["verify"]["holds"] for s in subjects if s["verdict"] != "new"]
                v = {"holds": all(states) if states and None not in states else (False if False in states else None),
                     "checks": [c for s in subjects if s["verdict"] != "new" for c in s["verify"]["checks"]]}
                if all(s["verdict"] == "fixed" for s in subjects):
                    v["holds"] = True
            entry["verify_check"] = v
            entry["verdict"] = "fixed" if v["holds"] else "improved"
            if not v["holds"]:
                entry["why"] = "the rule no longer fires, but its Verify step does not hold yet" if v["holds"] is False \
                    else "the rule no longer fires; its Verify step could not be checked on AFTER"
        else:
            v = check_verify(rule, _facts_for(before, _subject_key(f)), _facts_for(after, _subject_key(g)))
            entry["verify_check"] = v
            d = _rel(cb, ca)
            small = not _counts(before, f, cb, ca)
            if small:
                d = None
            if SEV_RANK[g.severity] > SEV_RANK[f.severity]:
                entry["verdict"], entry["why"] = "regressed", f"severity rose from {f.severity} to {g.severity}"
            elif d is not None and d > tol:
                entry["verdict"], entry["why"] = "regressed", f"its cost rose {d:+.0f}% (tolerance {tol:.0f}%)"
            elif SEV_RANK[g.severity] < SEV_RANK[f.severity] or (d is not None and d < -tol):
                entry["verdict"] = "improved"
                entry["why"] = (f"its cost fell {d:+.0f}% (tolerance {tol:.0f}%)" if d is not None and d < -tol
                                else f"severity fell from {f.severity} to {g.severity}")
            else:
                entry["verdict"] = "unchanged"
                d = _rel(cb, ca)
                if d is not None:
                    entry["why"] = (f"cost change {d:+.0f}% within the {tol:.0f}% tolerance" if not small else
                                    f"cost change {d:+.0f}%, under {MIN_COST_SHARE.value:g}% of {f.gain_of}")
            newly = [s_["after"]["name"] for s_ in subjects if s_["verdict"] == "new" and s_["after"]]
            if newly and entry["verdict"] != "unchanged":
                entry["why"] = entry.get("why", "") + f"; now also on {', '.join(short_name(n or '') for n in newly[:3])}" \
                    + (f" and {len(newly) - 3} more" if len(newly) > 3 else "")
            if scoped and entry["verdict"] == "unchanged":
                vs = {s["verdict"] for s in subjects}
                if "regressed" in vs or "new" in vs and g.severity in GATE_SEVERITIES:
                    entry["verdict"], entry["why"] = "regressed", "kernels newly or more affected"
                elif vs & {"improved", "fixed"} and not vs & {"regressed", "new"}:
                    entry["verdict"], entry["why"] = "improved", "some kernels fixed or improved"
        out.append(entry)
    for g in after.report.findings:
        if g.rule not in before_rules:
            ca = cost(after, g)
            out.append({"rule": g.rule, "title": g.title, "category": g.category, "tree": g.tree,
                        "severity_before": None, "severity_after": g.severity, "gain_of": g.gain_of,
                        "gain_before": None, "gain_after": round(g.estimated_gain, 4),
                        "cost_after": None if ca is None else round(ca, 6), "cost_unit": _base(after, g.gain_of)[1],
                        "verify": g.verify, "verdict": "new", "message": g.message})
    return out


def _gain_abs(side, f, leaf):
    base, _ = _base(side, f.gain_of)
    return None if base is None else leaf.estimated_gain * base


def _rel(b, a):
    if b is None or a is None:
        return None
    if b <= 0:
        return None if a <= 0 else math.inf
    return 100 * (a - b) / b


def _subj_json(side: Side, key):
    if key is None:
        return None
    entry = side.subjects.get(key, {})
    f = entry.get("facts", {})
    out = {"kind": key[0], "id": key[1], "name": entry.get("name")}
    if key[0] == "kernel":
        out["grid"] = _int(f.get("grid_blocks_count"))
        out["block"] = _int(f.get("block_threads_count"))
    return out


def _int(v):
    return int(v) if _num(v) is not None and float(v).is_integer() else v


def headlines(before: Side, after: Side, matched: dict, noise_pct: float) -> list[dict]:
    out = []
    for name, label, d in HEADLINES:
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


def timeline_kernel_rows(before: Side, after: Side) -> list[dict]:
    """Timeline kernels (charts["top_kernels"]: steady steps, grouped by name, grid and block), BEFORE's
    matched to AFTER's by name and launch configuration, else by name (the costliest unmatched first)."""
    tb = [r for r in before.report.charts.get("top_kernels") or [] if isinstance(r, dict)]
    ta = [r for r in after.report.charts.get("top_kernels") or [] if isinstance(r, dict)]
    if not (tb and ta):
        return []
    key = lambda r: (r.get("name"), r.get("grid"), r.get("block"))  # noqa: E731
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
            j = next((j for j, x in enumerate(ta) if j not in used and x.get("name") == r.get("name")), None)
            if j is not None:
                used.add(j)
                pairs[n] = (r, ta[j], True)
    pairs += [(None, x, False) for j, x in enumerate(ta) if j not in used]
    rows = []
    for b, a, changed in pairs:
        one = b or a
        rows.append({"name": short_name(one.get("name") or ""), "kernel_name": one.get("name"),
                     "before": None if b is None else {"grid": b.get("grid"), "block": b.get("block")},
                     "after": None if a is None else {"grid": a.get("grid"), "block": a.get("block")},
                     "ms_per_step": change(None if b is None else b.get("ms_per_step"),
                                           None if a is None else a.get("ms_per_step"), "lower"),
                     "launches_per_step": [None if b is None else b.get("launches_per_step"),
                                           None if a is None else a.get("launches_per_step")],
                     "step_share_pct": [None if b is None else b.get("step_share_pct"),
                                        None if a is None else a.get("step_share_pct")],
                     "config_changed": changed})
    rows.sort(key=lambda r: -max(_num(r["ms_per_step"].get("before")) or 0, _num(r["ms_per_step"].get("after")) or 0))
    return rows[:TIMELINE_KERNEL_ROWS]


def fact_rows(before: Side, after: Side, matched: dict, directions: dict) -> list[dict]:
    rows = []
    for name in sorted(set(before.run) & set(after.run)):
        unit = before.units.get(name, "")
        rows.append({"subject": None, "fact": name, "unit": unit,
                     **change(before.run[name], after.run[name], direction_of(name, unit, directions))})
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
    rows.append({"phase": "step", **change(med(before.steps, lambda s: _num(s.get("dur_ms"))),
                                           med(after.steps, lambda s: _num(s.get("dur_ms"))), "lower")})
    rows.append({"phase": "busy", **change(med(before.steps, lambda s: _num(s.get("busy_ms"))),
                                           med(after.steps, lambda s: _num(s.get("busy_ms"))))})
    classes = list(dict.fromkeys([c for s in before.steps + after.steps for c in (s.get("idle_ms_by_class") or {})]))
    for c in classes:
        b = med(before.steps, lambda s: _num((s.get("idle_ms_by_class") or {}).get(c, 0.0)))
        a = med(after.steps, lambda s: _num((s.get("idle_ms_by_class") or {}).get(c, 0.0)))
        if b or a:
            rows.append({"phase": f"idle: {c}", **change(b, a, "lower")})
    for r in rows:
        r["unit"] = "ms"
    return rows


def gate(comparison: dict, pct: float) -> list[str]:
    """Why `--fail-on-regression PCT` trips (empty: it does not)."""
    reasons = []
    step = next((h for h in comparison["headlines"] if h["fact"] == "step_time_ms_p50"), None)
    step_better = step is not None and step.get("moved") == "right"
    for h in comparison["headlines"]:
        rel = h.get("change_pct")
        if rel is None or not h.get("better"):
            continue
        if step_better and h["fact"] in SECONDARY:
            continue  # the step got faster beyond noise: a lower busy share or more (overlapped) kernel time is no regression
        worse = rel if h["better"] == "lower" else -rel
        limit = max(pct, h.get("noise_pct") or 0.0)
        if worse > limit:
            reasons.append(f"{h['label']} got {worse:.1f}% worse ({fmt(h['before'])} -> {fmt(h['after'])} {h['unit']}; "
                           f"limit {limit:.1f}%: max(PCT, step noise))")
    for k in comparison.get("kernels", []):
        d = k["duration_us"]
        if (k.get("time_share_pct") or 0) < MIN_KERNEL_SHARE.value:
            continue
        if k["before"] and k["after"] and d.get("change_pct") is not None and d["change_pct"] > max(pct, 0):
            reasons.append(f"kernel {k['name']} (#{k['before']['id']}) got {d['change_pct']:.1f}% slower "
                           f"({fmt(d['before'])} -> {fmt(d['after'])} us)")
    for f in comparison["findings"]:
        if f["verdict"] in ("new", "regressed") and f.get("severity_after") in GATE_SEVERITIES:
            reasons.append(f"{f['rule']} ({f['category']}) {f['verdict']} at {f['severity_after']}")
    return reasons


def fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def restrict(report, ids: list[str]):
    """The report seen through a selection of kernel launches (Nsight Compute ids): facts of other
    kernels dropped, GPU-time totals and gain shares re-based on the kept launches, kernel findings
    keeping only their kept kernels. For twins inside one report (a kernel and its fixed version)."""
    from copy import copy
    from dataclasses import replace as dc_replace
    from ..facts import Fact
    keep = set(ids)
    kernel_ids = {f.subject.id for f in report.facts if f.subject is not None and f.subject.kind == "kernel"}
    missing = [i for i in ids if i not in kernel_ids]
    if missing:
        from ..errors import DiagnoserError
        raise DiagnoserError(f"--kernels: no kernel launch {', '.join(missing)} in "
                             f"{', '.join(i['path'] for i in report.inputs)} (launch ids: diagnose facts FILE)")
    dur = {f.subject.id: f.value for f in report.facts if f.subject is not None and f.subject.kind == "kernel"
           and f.name == "kernel_duration_us" and f.subject.id in keep}
    full = next((f.value for f in report.facts if f.subject is None and f.name == "kernel_gpu_time_total_ms"), None)
    part = sum(v for v in dur.values() if _num(v) is not None) / 1000.0
    scale = (full / part) if full and part else 1.0
    facts = []
    for f in report.facts:
        if f.subject is not None and f.subject.kind == "kernel" and f.subject.id not in keep:
            continue
        if f.subject is None and f.name == "kernel_gpu_time_total_ms":
            f = Fact(f.name, round(part, 6), f.unit, f.source, f.subject)
        elif f.subject is None and f.name in ("kernel_launch_count", "kernel_distinct_count"):
            f = Fact(f.name, float(len(keep)), f.unit, f.source, f.subject)
        elif f.subject is not None and f.name == "kernel_time_share_pct" and _num(f.value) is not None:
            f = Fact(f.name, min(100.0, f.value * scale), f.unit, f.source, f.subject)
        facts.append(f)
    findings = []
    for f in report.findings:
        if f.subject is None or f.subject.kind != "kernel":
            findings.append(f)
            continue
        leaves = [dc_replace(k, estimated_gain=min(1.0, k.estimated_gain * scale)) for k in _leaves(f)
                  if k.subject is not None and k.subject.id in keep]
        if not leaves:
            continue
        leaves.sort(key=lambda k: -k.estimated_gain)
        g = dc_replace(f, subject=leaves[0].subject, estimated_gain=min(1.0, sum(k.estimated_gain for k in leaves)),
                       kernels=leaves if f.kernels else [])
        findings.append(g)
    out = copy(report)
    out.facts, out.findings = facts, findings
    out.charts = dict(report.charts)
    if report.charts.get("kernel_sol"):
        out.charts["kernel_sol"] = [r for r in report.charts["kernel_sol"] if str(r.get("id")) in keep]
    return out


def compare_runs(before_paths, after_paths, pack, progress: bool = False, set_values: dict | None = None,
                 kernels: list[str] | None = None, to_kernels: list[str] | None = None) -> dict:
    """`kernels` / `to_kernels`: compare only these Nsight Compute launches of each side; given both,
    they are paired in the order listed (twins with different names) instead of by name."""
    from ..pipeline import diagnose
    rb = diagnose(before_paths, pack=pack, progress=progress, set_values=set_values)
    ra = diagnose(after_paths, pack=pack, progress=progress, set_values=set_values)
    if kernels:
        rb = restrict(rb, kernels)
    if to_kernels:
        ra = restrict(ra, to_kernels)
    pairs = None
    if kernels and to_kernels:
        if len(kernels) != len(to_kernels):
            from ..errors import DiagnoserError
            raise DiagnoserError(f"--kernels names {len(kernels)} launches, --to-kernels {len(to_kernels)}: "
                                 "give one AFTER launch per BEFORE launch (paired in order)")
        pairs = {("kernel", b): ("kernel", a) for b, a in zip(kernels, to_kernels)}
    with settings.overridden({**pack.settings, **(set_values or {})}):
        out = build(before_paths, rb, after_paths, ra, pack, pairs)
        out["settings"] = dict(rb.settings, settings=settings.changed())  # how both sides were diagnosed
        return out


def build(before_paths, rb, after_paths, ra, pack, pairs: dict | None = None) -> dict:
    before, after = side_of(before_paths, rb), side_of(after_paths, ra)
    matched = dict(pairs) if pairs is not None else match_subjects(before, after)
    noise = max(before.noise_pct, after.noise_pct)
    directions = fact_directions(pack)
    findings = finding_verdicts(before, after, pack, matched, noise)
    findings.sort(key=lambda f: (VERDICT_ORDER.index(f["verdict"]), -SEV_RANK.get(f.get("severity_after") or f.get("severity_before"), 0), f["rule"]))
    counts = {v: sum(1 for f in findings if f["verdict"] == v) for v in VERDICT_ORDER}
    out = {
        "schema": SCHEMA,
        "before": {"inputs": rb.inputs, "findings": len(rb.findings), "noise_pct": round(before.noise_pct, 3),
                   "noise_basis": before.noise_basis, "steps": len(before.steps)},
        "after": {"inputs": ra.inputs, "findings": len(ra.findings), "noise_pct": round(after.noise_pct, 3),
                  "noise_basis": after.noise_basis, "steps": len(after.steps)},
        "noise_pct": round(noise, 3),
        "summary": counts,
        "headlines": headlines(before, after, matched, noise),
        "findings": findings,
        "kernels": kernel_rows(before, after, matched) if any(k[0] == "kernel" for k in before.subjects) else [],
        "timeline_kernels": timeline_kernel_rows(before, after),
        "phases": phase_rows(before, after),
        "facts": fact_rows(before, after, matched, directions),
        "unmatched": {"before": [_subj_json(before, k) for k in before.subjects if k not in matched],
                      "after": [_subj_json(after, k) for k in after.subjects if k not in set(matched.values())]},
        "notes": [f"BEFORE: {n}" for n in rb.notes] + [f"AFTER: {n}" for n in ra.notes],
        "charts": {"before": rb.charts, "after": ra.charts},
    }
    return out
