"""Rule -> engine-neutral predicate tree (params resolved, regexes and findings lowered to flags).

A predicate is a tuple:
  ("cmp", fact, op, literal)   op an order or equality operator (rulespec.operators gives its meaning)
  ("in", fact, (literals...))  fact present and equal to one of them
  ("exists", fact)
  ("flag", field)              a precomputed bool field is true (regex matches, findings)
  ("and", (p...)), ("or", (p...)), ("not", p)
Precomputed flag fields: `mt__<RULE>_<n>` (regex n of that rule matched) and `fd__<RULE>` (that
rule fired, per the finding-reference semantics in docs/rules.md). The engine backends consume
this tree; golden tests pin it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import Condition, Rule
from .operators import OPERATORS


@dataclass(frozen=True)
class RegexFlag:
    """A `matches` test of a rule: the derived boolean fact the engine reads in its place."""

    field: str
    fact: str
    pattern: str


@dataclass(frozen=True)
class CompiledRule:
    """A rule lowered for the engine: its predicate as a tuple tree, its regex tests and the facts it reads."""

    rule_id: str
    scope: str
    predicate: tuple
    regex_flags: tuple[RegexFlag, ...]
    finding_refs: tuple[str, ...]
    facts: tuple[str, ...]  # every fact the predicate reads


def compile_rule(rule: Rule) -> CompiledRule:
    regexes: list[RegexFlag] = []

    def lower(c: Condition) -> tuple:
        if c.kind == "all":
            return ("and", tuple(lower(i) for i in c.items))
        if c.kind == "any":
            return ("or", tuple(lower(i) for i in c.items))
        if c.kind == "none":
            return ("not", ("or", tuple(lower(i) for i in c.items)))
        if c.kind == "finding":
            return ("flag", finding_field(c.finding))
        value = rule.params[c.param] if c.param is not None else c.value
        form = OPERATORS[c.op].form
        if form == "presence":
            return ("exists", c.fact)
        if form == "membership":
            return ("in", c.fact, tuple(value))
        if form == "regex":
            flag = RegexFlag(f"mt__{rule.id}_{len(regexes)}", c.fact, str(value))
            regexes.append(flag)
            return ("flag", flag.field)
        return ("cmp", c.fact, c.op, value)

    pred = lower(rule.when)
    return CompiledRule(rule.id, rule.scope, pred, tuple(regexes), tuple(sorted(rule.when.findings())),
                        tuple(sorted(rule.when.facts())))


def finding_field(rule_id: str) -> str:
    return f"fd__{rule_id}"
