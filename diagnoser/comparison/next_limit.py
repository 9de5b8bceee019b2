"""The expected next limit: a kernel whose finding a fix removed is now bound by something else.

Every kernel is limited by something. When BEFORE's finding on a kernel no longer fires on its AFTER
match, the rule's Verify step holds there and the kernel got faster, the fix worked; a bound finding
that AFTER now reports on that kernel (memory bound once the divisions are gone, as KERN013's Verify
step says it should become) is the kernel's next limit, not a regression: its verdict is `next limit`, it is
left out of the cost of a finding that fired before on other kernels, and the CI gate does not count
it. A defect that the fix brought in (spills, divergence, uncoalesced access...) is not a bound and stays
`new`.
"""
from __future__ import annotations

from .sides import Side, _num

# categories that say what bounds a kernel (one of them always does), as opposed to a defect in it
BOUND_CATEGORIES = ("compute_bound", "memory_bound", "latency_bound", "at_speed_of_light")
STATE_OPS = ("eq", "neq", "in", "matches", "lt", "lte", "gt", "gte")
VERDICT = "next limit"


def _key(f):
    return None if f.subject is None else (f.subject.kind, f.subject.id)


def _leaves(f) -> list:
    return list(f.kernels) if f.kernels else [f]


def fixed_kernels(before: Side, after: Side, pack, matched: dict, check_verify, facts_for) -> dict:
    """AFTER kernel -> {rule, before, predicted, duration_us: [before, after]} for each kernel on which a
    BEFORE finding was fixed: the rule no longer fires on the matched kernel, its verify_check holds
    there, and the kernel's duration fell."""
    fired_after: dict[str, set] = {}
    for g in after.report.findings:
        fired_after.setdefault(g.rule, set()).update(_key(x) for x in _leaves(g))
    out: dict = {}
    for f in before.report.findings:
        if f.subject is None or f.subject.kind != "kernel":
            continue
        rule = pack.rules.get(f.rule)
        for leaf in _leaves(f):
            kb = _key(leaf)
            ka = matched.get(kb)
            if ka is None or ka in fired_after.get(f.rule, set()):
                continue
            fb, fa = facts_for(before, kb), facts_for(after, ka)
            db, da = _num(fb.get("kernel_duration_us")), _num(fa.get("kernel_duration_us"))
            if db is None or da is None or da >= db:
                continue
            v = check_verify(rule, fb, fa)
            if v["holds"] is not True:
                continue
            predicted = [c for c in v["checks"] if c["op"] in STATE_OPS]
            out.setdefault(ka, {"rule": f.rule, "before": kb, "predicted": predicted, "duration_us": [db, da]})
    return out


def is_next_limit(finding, leaf, fixed: dict) -> bool:
    """An AFTER finding's leaf (one kernel) is the next limit of a kernel a fix made faster."""
    return finding.category in BOUND_CATEGORIES and _key(leaf) in fixed


def why(fixed_entry: dict, finding) -> str:
    d = fixed_entry["duration_us"]
    said = "; ".join(f"{c['fact']} {c['op']} {c['threshold']}" for c in fixed_entry["predicted"]
                     if c.get("threshold") is not None)
    return (f"expected next limit: {fixed_entry['rule']}'s fix held on this kernel ({d[0]:.4g} -> {d[1]:.4g} us"
            f"{'; its Verify step: ' + said + ' ok' if said else ''}) and it is now {finding.category.replace('_', ' ')}")
