"""Close calls: rule verdicts that a measurement decided by a hair.

Two sources of one run (an Nsight Systems export and a PyTorch trace) measure the same workload a
little differently (the torch profiler's own overhead stretches steps); a verdict that flips because
one lands at 80.3% busy against an 80% limit and the other at 79.8% must say how close it was. After
the rules ran, each run-level comparison a verdict rested on is checked against its threshold: a
fired rule whose deciding comparison held within the margin, and a rule that did not fire only
because one comparison missed within the margin, are reported as close calls, with the numbers.
Pure Python over the rules' `when` trees (the engine decides; this only explains).
"""
from __future__ import annotations

from ..rulespec.model import Condition, Rule
from ..rulespec.operators import COMPARE_OPS, OPERATORS, target_of, truth
from .. import settings
from .records import Record

CLOSE_CALL_PCT = settings.register(
    "rules.close_call_pct", 2.5, "%",
    "a run-level comparison whose value lies within this share of its threshold (at least 0.5 of the "
    "fact's unit) is a close call: the report names it, so a verdict that another source of the same "
    "run could flip is never silent")


def _threshold(c: Condition, rule: Rule):
    return target_of(c, rule.params)


def _holds(c: Condition, values: dict, rule: Rule, fired: set[str]) -> bool:
    """The engine's two-valued answer: a test of an absent fact is false, as is a finding that did not fire."""
    return truth(c, values, rule.params, dict.fromkeys(fired, True), unknown=False)


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close(c: Condition, values: dict, rule: Rule) -> bool:
    v, t = values.get(c.fact), _threshold(c, rule)
    if c.kind != "fact" or c.op not in COMPARE_OPS or not _number(v) or not _number(t):
        return False
    return abs(v - t) <= max(abs(t) * float(CLOSE_CALL_PCT.value) / 100.0, 0.5 if abs(t) >= 5 else 0.0)


def _leaves(c: Condition):
    if c.kind in ("all", "any", "none"):
        for i in c.items:
            yield from _leaves(i)
    elif c.kind == "fact":
        yield c


def _text(c: Condition, values: dict, rule: Rule) -> str:
    return f"{c.fact} {values[c.fact]:.1f} against {OPERATORS[c.op].symbol} {_threshold(c, rule):g}"


def close_calls(rules: dict[str, Rule], records: list[Record], fired_ids: set[str]) -> list[str]:
    """Notes on the run-level verdicts decided within the margin (see the module doc)."""
    run = next((r for r in records if r.scope == "run"), None)
    if run is None:
        return []
    values = run.values
    notes = []
    for rule in sorted(rules.values(), key=lambda r: r.id):
        if rule.scope != "run" or rule.missing(set(values)):
            continue
        holds = rule.id in fired_ids
        for leaf in _leaves(rule.when):
            if not _close(leaf, values, rule) or _holds(leaf, values, rule, fired_ids) != holds:
                continue
            # a comparison decided the verdict if, turned around alone, the verdict turns too
            if _holds(_negated_leaf(rule.when, leaf, holds), values, rule, fired_ids) == holds:
                continue
            what = "fired" if holds else "did not fire"
            notes.append(f"close call: {rule.id} ({rule.category}) {what} on {_text(leaf, values, rule)}; "
                         "a source of the same run measuring a little differently could decide otherwise")
            break
    return notes


def _negated_leaf(tree: Condition, leaf: Condition, leaf_holds: bool) -> Condition:
    """`tree` with `leaf` replaced by a constant of the opposite truth value."""
    const = Condition("any") if leaf_holds else Condition("all")  # empty any: false; empty all: true
    if tree is leaf:
        return const
    if tree.kind in ("all", "any", "none"):
        return Condition(tree.kind, items=tuple(_negated_leaf(i, leaf, leaf_holds) for i in tree.items))
    return tree
