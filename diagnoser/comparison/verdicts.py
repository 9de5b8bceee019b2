"""Per finding of BEFORE: fixed, improved, unchanged or regressed on AFTER (its cost against the
noise, its rule's verify_check on AFTER's facts); findings only AFTER has are new."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..kernel_names import short_name
from ..rulespec.operators import holds, target_of
from .likeness import is_per_step
from .matching import _subj_json
from .next_limit import VERDICT as NEXT_LIMIT, fixed_kernels, is_next_limit, why as next_limit_why
from .sides import Side, _num
from ..comparison_settings import MIN_CHANGE, MIN_COST_SHARE

VERDICT_ORDER = ("regressed", "new", NEXT_LIMIT, "unchanged", "improved", "fixed")
GATE_SEVERITIES = ("warning", "critical")


def _base(side: Side, gain_of: str, finding=None):
    """The time (or memory) a finding's gain is a share of, on its side. When the two sides cut steps
    differently a time per step of one is not one of the other: the share itself is compared (base 1)."""
    g = (gain_of or "").lower()
    if "step" in g:
        if not side.steps_comparable:
            return 1.0, "share of the step"
        return _num(side.run.get("step_time_ms_p50")), "ms"
    if "memory" in g:
        return _num(side.run.get("peak_allocated_gib")) or _num(side.run.get("composition_allocated_gib")), "GiB"
    if "gpu" in g or "kernel" in g:
        v = _num(side.run.get("kernel_gpu_time_total_ms"))
        if v is None:
            if not side.steps_comparable:
                return 1.0, "share of GPU time"
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


def check_verify(rule, before_rec: dict, after_rec: dict | None, steps_comparable: bool = True) -> dict:
    """Evaluate a rule's verify_check on AFTER's facts (falls/rises against BEFORE's). A per-step fact is
    not checked when the two sides cut steps differently (its value depends on the cut)."""
    if rule is None or not rule.verify_check:
        return {"holds": None, "checks": [], "reason": "the rule has no verify_check"}
    checks = []
    for c in rule.verify_check:
        threshold = target_of(c, rule.params)
        a = None if after_rec is None else after_rec.get(c.fact)
        b = before_rec.get(c.fact)
        item = {"fact": c.fact, "op": c.op, "threshold": threshold, "before": b, "after": a}
        if c.param:
            item["param"] = c.param
        if after_rec is None:
            item["holds"], item["why"] = None, "subject not in AFTER"
        elif not steps_comparable and is_per_step(c.fact):
            item["holds"], item["why"] = None, f"{c.fact} is per step, and the two sides cut steps differently"
        elif c.op == "exists":
            item["holds"] = a is not None
        elif a is None:
            item["holds"], item["why"] = None, f"{c.fact} not measured in AFTER"
        elif c.op in ("falls", "rises"):
            if _num(b) is None or _num(a) is None:
                item["holds"], item["why"] = None, f"{c.fact} not measured on both sides"
            else:
                item["holds"] = holds(c.op, _num(a), _num(b))
        else:
            item["holds"] = holds(c.op, a, threshold)
        checks.append(item)
    states = [c["holds"] for c in checks]
    return {"holds": False if False in states else (None if None in states else True), "checks": checks}


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


def _ms(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _delivered(entry: dict, f, before: Side, after: Side) -> None:
    """How much of the step time its fix was predicted to save (BEFORE's predicted_step_ms) the
    AFTER run delivered: "delivered 28.1 ms of the predicted 25.0-30.0 ms" (also when it is not fixed:
    then whatever else changed delivered it)."""
    p = getattr(f, "predicted_step_ms", None)
    b, a = _num(before.run.get("step_time_ms_p50")), _num(after.run.get("step_time_ms_p50"))
    if p is None or b is None or a is None or not (before.steps_comparable and after.steps_comparable):
        return
    lo, hi = b - p[1], b - p[0]
    entry["predicted_step_ms"] = [round(p[0], 3), round(p[1], 3)]
    entry["delivered_ms"] = round(b - a, 3)
    entry["predicted_gain_ms"] = [round(lo, 3), round(hi, 3)]
    inside = "inside" if p[0] - 1e-9 <= a <= p[1] + 1e-9 else "outside"
    text = (f"delivered {_ms(b - a)} ms of the predicted {_ms(lo)}-{_ms(hi)} ms (step {_ms(b)} -> {_ms(a)} ms; "
            f"predicted {_ms(p[0])}-{_ms(p[1])} ms: {inside} the range, {100 * (a - (p[0] + p[1]) / 2) / a:+.0f}% of the step)")
    entry["delivered"] = text
    if entry["verdict"] in ("fixed", "improved"):
        entry["why"] = f"{entry['why']}; {text}" if entry.get("why") else text


def _delivered_peak(entry: dict, f, after: Side) -> None:
    """How much of the peak memory its fix was predicted to free (BEFORE's predicted_peak_gib) the AFTER
    snapshot delivered: its own peak (allocated; reserved for fragmentation's prediction, which is of reserved
    memory) against the memory BEFORE needed."""
    p = getattr(f, "prediction", None) or {}
    if p.get("unit") != "GiB" or "low" not in p:
        return
    a = _num(after.run.get("peak_reserved_gib" if "measure" in p else "peak_allocated_gib"))
    if a is None:
        return
    b, lo, hi = p["measured"], p["measured"] - p["high"], p["measured"] - p["low"]
    entry["predicted_peak_gib"] = [round(p["low"], 3), round(p["high"], 3)]
    entry["delivered_gib"] = round(b - a, 3)
    inside = "inside" if p["low"] - 1e-9 <= a <= p["high"] + 1e-9 else "outside"
    text = (f"freed {b - a:.2f} GiB of the predicted {lo:.2f}-{hi:.2f} GiB ({b:.2f} GiB needed -> a peak of {a:.2f} GiB; "
            f"predicted {p['low']:.2f}-{p['high']:.2f} GiB: {inside} the range)")
    entry["delivered"] = text
    if entry["verdict"] in ("fixed", "improved"):
        entry["why"] = f"{entry['why']}; {text}" if entry.get("why") else text


def _kernel_delivered(leaf, after_facts: dict | None) -> dict:
    """A kernel's predicted launch time after its fix (BEFORE's predicted_kernel_us) against the matched AFTER
    kernel's own duration: "6191 -> 3482 us a launch: predicted 2759-5519 us, inside the range"."""
    p = getattr(leaf, "prediction", None) or {}
    a = _num((after_facts or {}).get("kernel_duration_us"))
    if p.get("unit") != "us" or "low" not in p or a is None:
        return {}
    inside = "inside" if p["low"] - 1e-9 <= a <= p["high"] + 1e-9 else "outside"
    return {"predicted_kernel_us": [round(p["low"], 3), round(p["high"], 3)],
            "kernel_us": [round(p["measured"], 3), round(a, 3)],
            "delivered": f"{_ms(p['measured'])} -> {_ms(a)} us a launch: predicted {_ms(p['low'])}-{_ms(p['high'])} us, "
                         f"{inside} the range"}


@dataclass
class _Pair:
    """What every verdict of one BEFORE / AFTER pair reads: the sides, the kernel matching both ways,
    the tolerance a cost change must pass, and the kernels a fix made faster (next limits)."""

    before: Side
    after: Side
    pack: object
    matched: dict
    inverse: dict
    tol: float
    fixed: dict = field(default_factory=dict)

    def verify(self, rule, before_rec: dict, after_rec: dict | None) -> dict:
        return check_verify(rule, before_rec, after_rec, self.before.steps_comparable and self.after.steps_comparable)


def finding_verdicts(before: Side, after: Side, pack, matched: dict, noise_pct: float) -> list[dict]:
    """One entry per finding of BEFORE (its verdict on AFTER), then one per finding only AFTER has."""
    pair = _Pair(before, after, pack, matched, {v: k for k, v in matched.items()}, max(MIN_CHANGE.value, noise_pct))
    pair.fixed = fixed_kernels(before, after, pack, matched, pair.verify, _facts_for)
    after_by_rule = {f.rule: f for f in after.report.findings}
    out = [_before_verdict(pair, f, after_by_rule.get(f.rule)) for f in before.report.findings]
    before_rules = {f.rule for f in before.report.findings}
    return out + [_new_verdict(pair, g) for g in after.report.findings if g.rule not in before_rules]


def _before_verdict(pair: _Pair, f, g) -> dict:
    """A BEFORE finding `f` against AFTER's finding of its rule (`g`, None when it no longer fires)."""
    before, after = pair.before, pair.after
    rule = pair.pack.rules.get(f.rule)
    entry = {"rule": f.rule, "title": f.title, "category": f.category, "tree": f.tree,
             "severity_before": f.severity, "severity_after": g.severity if g else None,
             "gain_of": f.gain_of, "gain_before": round(f.estimated_gain, 4),
             "gain_after": round(g.estimated_gain, 4) if g else None,
             "verify": f.verify}
    scoped = f.subject is not None and f.subject.kind != "run"
    was_on = {_subject_key(x) for x in _leaves(f)}
    # AFTER's kernels where this rule is the next limit of a fixed kernel: not part of its cost
    limits = [x for x in (_leaves(g) if g and scoped else []) if pair.inverse.get(_subject_key(x)) not in was_on
              and is_next_limit(g, x, pair.fixed)]
    cb = cost(before, f)
    ca = cost(after, g) if g else 0.0
    if limits and ca is not None:
        rest = [x for x in _leaves(g) if x not in limits]
        ca = min(1.0, sum(x.estimated_gain for x in rest)) * _base(after, g.gain_of)[0]
    if cb is not None:
        entry["cost_before"] = round(cb, 6)
        entry["cost_after"] = None if ca is None else round(ca, 6)
        entry["cost_unit"] = _base(before, f.gain_of)[1]
    subjects = []
    if scoped:
        subjects = _subject_verdicts(pair, f, g, rule, was_on, limits)
        entry["subjects"] = subjects
    if g is None:
        _gone_verdict(pair, entry, f, rule, scoped, subjects)
    else:
        _still_verdict(pair, entry, f, g, rule, (cb, ca), scoped, subjects)
    _delivered(entry, f, before, after)
    _delivered_peak(entry, f, after)
    said = [x["delivered"] for x in entry.get("subjects", []) if x.get("delivered")]
    if len(said) == 1 and entry.get("verdict") in ("fixed", "improved") and "delivered" not in entry:
        entry["why"] = f"{entry['why']}; {said[0]}" if entry.get("why") else said[0]
    return entry


def _subject_verdicts(pair: _Pair, f, g, rule, was_on: set, limits: list) -> list[dict]:
    """Per kernel (subject) of BEFORE's finding its verdict on its AFTER match; then AFTER's kernels
    the finding newly fires on (new, or the next limit of a kernel a fix made faster)."""
    fired_after = {_subject_key(k) for k in _leaves(g)} if g else set()
    subjects = [_subject_verdict(pair, f, g, rule, leaf, fired_after) for leaf in _leaves(f)]
    for leaf in (_leaves(g) if g else []):
        if pair.inverse.get(_subject_key(leaf)) not in was_on:
            subjects.append(_new_subject(pair.before, pair.after, pair.inverse, leaf, g,
                                         pair.fixed if leaf in limits else {}))
    return subjects


def _subject_verdict(pair: _Pair, f, g, rule, leaf, fired_after: set) -> dict:
    before, after = pair.before, pair.after
    kb = _subject_key(leaf)
    ka = pair.matched.get(kb)
    v = pair.verify(rule, _facts_for(before, kb), _facts_for(after, ka) if ka else None)
    if ka is None:
        verdict = "fixed"
        v["reason"] = "the kernel is no longer launched"
    elif ka in fired_after:
        verdict = "unchanged"
        lg = next(x for x in _leaves(g) if _subject_key(x) == ka)
        lb, la = _gain_abs(before, f, leaf), _gain_abs(after, g, lg)
        d = _rel(lb, la) if _counts(before, f, lb, la) else None
        if d is not None and d < -pair.tol:
            verdict = "improved"
        elif d is not None and d > pair.tol:
            verdict = "regressed"
    else:
        verdict = "fixed" if v["holds"] else "improved"
    return {"before": _subj_json(before, kb), "after": _subj_json(after, ka) if ka else None,
            "verdict": verdict, "verify": v, **_kernel_delivered(leaf, _facts_for(after, ka) if ka else None)}


def _gone_verdict(pair: _Pair, entry: dict, f, rule, scoped: bool, subjects: list) -> None:
    """The rule no longer fires on AFTER: fixed when its Verify step holds there, else improved."""
    key = _subject_key(f)
    v = pair.verify(rule, _facts_for(pair.before, key), _facts_for(pair.after, pair.matched.get(key) if scoped else None))
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


def _still_verdict(pair: _Pair, entry: dict, f, g, rule, costs: tuple, scoped: bool, subjects: list) -> None:
    """The rule fires on both sides: regressed, improved or unchanged by severity and cost against
    the tolerance, then by its kernels."""
    cb, ca = costs
    entry["verify_check"] = pair.verify(rule, _facts_for(pair.before, _subject_key(f)), _facts_for(pair.after, _subject_key(g)))
    tol = pair.tol
    d = _rel(cb, ca)
    small = not _counts(pair.before, f, cb, ca)
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
    _kernel_notes(entry, g, scoped, subjects)


def _kernel_notes(entry: dict, g, scoped: bool, subjects: list) -> None:
    """What the kernels add to a verdict of a rule that fires on both sides: kernels it newly fires on,
    next limits not counted, and an unchanged cost that its kernels' verdicts turn."""
    newly = [s_["after"]["name"] for s_ in subjects if s_["verdict"] == "new" and s_["after"]]
    if newly and entry["verdict"] != "unchanged":
        entry["why"] = entry.get("why", "") + f"; now also on {', '.join(short_name(n or '') for n in newly[:3])}" \
            + (f" and {len(newly) - 3} more" if len(newly) > 3 else "")
    nexts = [s_["after"]["name"] for s_ in subjects if s_["verdict"] == NEXT_LIMIT]
    if nexts:
        entry["why"] = "; ".join(x for x in (entry.get("why"), f"the next limit of {len(nexts)} kernel"
                                 f"{'s' if len(nexts) > 1 else ''} a fix made faster "
                                 f"({', '.join(short_name(n or '') for n in nexts[:3])}): not counted") if x)
    if scoped and entry["verdict"] == "unchanged":
        vs = {s["verdict"] for s in subjects}
        if "regressed" in vs or "new" in vs and g.severity in GATE_SEVERITIES:
            entry["verdict"], entry["why"] = "regressed", "kernels newly or more affected"
        elif vs & {"improved", "fixed"} and not vs & {"regressed", "new"}:
            entry["verdict"], entry["why"] = "improved", "some kernels fixed or improved"


def _new_verdict(pair: _Pair, g) -> dict:
    """A finding only AFTER has: new, or the next limit of the kernels a fix made faster."""
    before, after = pair.before, pair.after
    ca = cost(after, g)
    entry = {"rule": g.rule, "title": g.title, "category": g.category, "tree": g.tree,
             "severity_before": None, "severity_after": g.severity, "gain_of": g.gain_of,
             "gain_before": None, "gain_after": round(g.estimated_gain, 4),
             "cost_after": None if ca is None else round(ca, 6), "cost_unit": _base(after, g.gain_of)[1],
             "verify": g.verify, "verdict": "new", "message": g.message}
    leaves = _leaves(g) if g.subject is not None and g.subject.kind == "kernel" else []
    if leaves and all(is_next_limit(g, x, pair.fixed) for x in leaves):
        entry["subjects"] = [_new_subject(before, after, pair.inverse, x, g, pair.fixed) for x in leaves]
        entry["verdict"] = NEXT_LIMIT
        names = ", ".join(short_name(s["after"]["name"] or "") for s in entry["subjects"][:3])
        entry["why"] = (f"only on kernel{'s' if len(leaves) > 1 else ''} a fix made faster ({names}"
                        f"{' and more' if len(leaves) > 3 else ''}): {entry['subjects'][0]['why']}")
    return entry


def _new_subject(before: Side, after: Side, inverse: dict, leaf, g, fixed: dict) -> dict:
    """A kernel AFTER's finding newly fires on: `new`, or the next limit of a kernel a fix made faster."""
    ka = _subject_key(leaf)
    kb = inverse.get(ka)
    out = {"before": _subj_json(before, kb) if kb else None, "after": _subj_json(after, ka), "verdict": "new"}
    if ka in fixed:
        out["verdict"], out["why"] = NEXT_LIMIT, next_limit_why(fixed[ka], g)
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
