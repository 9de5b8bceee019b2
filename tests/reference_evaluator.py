"""A tiny reference evaluator of the rule semantics in docs/rules.md, used only by tests.

It reads each rule's `when` tree (the YAML-level Condition, not the compiled predicate) and
evaluates it directly in Python, with the same layer order and finding semantics. The
differential test runs it and the durable_rules backend over random fact sets and demands
identical findings.
"""
from __future__ import annotations

import re

from diagnoser.engine.records import Record
from diagnoser.rulespec.model import Condition, Rule


def _same_type(a, b) -> bool:
    kind = lambda v: "b" if isinstance(v, bool) else ("n" if isinstance(v, (int, float)) else "s")  # noqa: E731
    return kind(a) == kind(b)


def holds(c: Condition, rule: Rule, rec: Record, idx: int, records: list[Record], fired, rules) -> bool:
    if c.kind == "all":
        return all(holds(i, rule, rec, idx, records, fired, rules) for i in c.items)
    if c.kind == "any":
        return any(holds(i, rule, rec, idx, records, fired, rules) for i in c.items)
    if c.kind == "none":
        return not any(holds(i, rule, rec, idx, records, fired, rules) for i in c.items)
    if c.kind == "finding":
        ref = rules.get(c.finding)
        if ref is None:
            return False
        if ref.scope == rec.scope:
            return (ref.id, idx) in fired
        return any((ref.id, j) in fired for j, r in enumerate(records) if r.scope == ref.scope)
    if c.fact not in rec.values:
        return False
    v = rec.values[c.fact]
    if c.op == "exists":
        return True
    target = rule.params[c.param] if c.param is not None else c.value
    if c.op == "matches":
        return re.search(str(target), str(v)) is not None
    if c.op == "in":
        return any(_same_type(v, t) and v == t for t in target)
    if c.op == "eq":
        return _same_type(v, target) and v == target
    if c.op == "neq":
        return not (_same_type(v, target) and v == target)
    if not _same_type(v, target):  # an order between values of one kind only: False < True, "a" < "b"
        return False
    return {"lt": v < target, "lte": v <= target, "gt": v > target, "gte": v >= target}[c.op]


def reference_matcher(layer_rules: list[Rule], records: list[Record], fired, all_rules) -> set:
    out = set()
    for rule in layer_rules:
        for idx, rec in enumerate(records):
            if rec.scope == rule.scope and holds(rule.when, rule, rec, idx, records, fired, all_rules):
                out.add((rule.id, idx))
    return out
