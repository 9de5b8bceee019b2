"""Semantic checks of a rule beyond the JSON Schema: thresholds are named params, referenced params,
facts and template names exist, regexes and gain expressions compile. Errors are
RuleError("file:line: rule ID: what is wrong; what to add")."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from ..errors import RuleError
from .expr import ExprError, parse_expr, template_fields
from .model import Condition, Rule
from .operators import COMPARE_OPS


def line_for(lines: dict[tuple, int], path: Iterable) -> int | None:
    p = tuple(path)
    while p not in lines and p:
        p = p[:-1]
    return lines.get(p)


def _walk(cond: Condition, path: tuple):
    yield cond, path
    for j, c in enumerate(cond.items):
        yield from _walk(c, path + (cond.kind, j))


def check_rule(rule: Rule, path: Path, lines, index: int, known_facts: dict | None) -> None:
    base = ("rules", index)

    def fail(sub: tuple, msg: str):
        raise RuleError(path, line_for(lines, base + sub), f"rule {rule.id}: {msg}")

    for cond, cpath in _walk(rule.when, ("when",)):
        if cond.kind != "fact":
            continue
        if cond.op in COMPARE_OPS and cond.param is None:
            fail(cpath, f"`{cond.fact} {cond.op}` needs a named threshold: write `param: NAME` and add NAME under `params:`")
        if cond.op == "exists" and (cond.param or cond.value is not None):
            fail(cpath, "`exists` takes no value or param")
        if cond.op in ("eq", "neq", "in", "matches") and cond.param is None and cond.value is None:
            fail(cpath, f"`{cond.op}` needs `value:` or `param:`")
        if cond.param is not None and cond.param not in rule.params:
            fail(cpath, f"param `{cond.param}` is not defined; add it under `params:` with its default")
        if cond.op == "in" and not isinstance(cond.value, tuple):
            fail(cpath, "`in` needs a list value, e.g. value: [a, b]")
        if cond.op == "matches":
            try:
                re.compile(str(cond.value))
            except re.error as e:
                fail(cpath, f"bad regex `{cond.value}`: {e}")
        if cond.op in COMPARE_OPS and not isinstance(rule.params.get(cond.param), (int, float)):
            fail(cpath, f"param `{cond.param}` must be a number for `{cond.op}`")
    for j, cond in enumerate(rule.verify_check):
        where = ("verify_check", j)
        if cond.op in ("falls", "rises", "exists") and (cond.param or cond.value is not None):
            fail(where, f"`{cond.op}` takes no value or param")
        if cond.op not in ("falls", "rises", "exists") and cond.param is None and cond.value is None:
            fail(where, f"`{cond.fact} {cond.op}` needs `value:` or `param:`")
        if cond.param is not None and cond.param not in rule.params:
            fail(where, f"param `{cond.param}` is not defined; add it under `params:` with its default")
        if known_facts is not None and cond.fact not in known_facts:
            fail(where, f"unknown fact `{cond.fact}` in verify_check; `diagnose facts --catalogue` lists the facts")
    names = set(rule.params) | {"subject", "gain_of"}  # and, with a catalogue, every fact in it (read in place)
    if known_facts is not None:
        na_facts = rule.not_applicable[0].facts() if rule.not_applicable else set()
        for fact in sorted(rule.when.facts() | set(rule.requires) | set(rule.evidence) | na_facts):
            if fact not in known_facts:
                import difflib
                close = difflib.get_close_matches(fact, list(known_facts), n=1)
                hint = f" (did you mean `{close[0]}`?)" if close else ""
                fail(("when",), f"unknown fact `{fact}`{hint}; `diagnose facts --catalogue` lists the facts")
    else:
        names |= rule.when.facts() | set(rule.requires) | set(rule.evidence)
    texts = [((key,), key, getattr(rule, key)) for key in ("message", "verify", "fix")]
    texts += [(("variants", j, key), f"variant {j + 1} {key}", getattr(v, key))
              for j, v in enumerate(rule.variants) for key in ("title", "message", "verify", "fix") if getattr(v, key) is not None]
    for where, label, text in texts:
        try:
            fields = template_fields(text)
        except ValueError as e:
            fail(where, f"bad {label} template: {e}")
        unknown = sorted(f for f in fields if f not in names and f not in (known_facts or ()))
        if unknown:
            fail(where, f"{label} uses unknown name(s) {', '.join(unknown)}; use facts, params, `subject` or `gain_of`")
    if rule.estimated_gain is not None:
        try:
            used = parse_expr(rule.estimated_gain)
        except ExprError as e:
            fail(("estimated_gain",), f"bad estimated_gain: {e}")
        unknown = sorted(n for n in used if n not in names and n not in (known_facts or ()))
        if unknown:
            fail(("estimated_gain",), f"estimated_gain uses unknown name(s) {', '.join(unknown)}")
