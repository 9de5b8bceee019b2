"""What a rule condition means: each operator defined once, and the three-valued truth of a `when` tree.

durable_rules fires the rules (diagnoser.engine.durable_backend translates each operator from the
table below); every evaluation of a condition in Python (the not-evaluated / not-applicable
decisions, close calls, compare's verify checks) calls this module, so all of them mean what the
engine means. The engine's meaning, measured on it (tests/test_engine_differential.py): a value has
one of three kinds, bool, number (int or float alike) or string; `eq` holds only between values of
the same kind (True is not 1, "1" is not 1, 1 is 1.0), `neq` is its negation, `in` is `eq` with one
of the list, and `lt` / `lte` / `gt` / `gte` hold only between values of the same kind, ordered as
Python orders them (False < True; strings by code point). `matches` is Python's `re.search` on the
value's text (`str(value)`: the project's regex dialect; durable's own `$mt` is not used).
A test of an absent fact is unknown, except `exists`, which is false.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from .model import Condition

UNKNOWN = None  # the third truth value: the answer depends on an absent fact or an unknown finding
KINDS = ("b", "n", "s")  # bool, number, string: what `value_kind` returns


def value_kind(value) -> str:
    """A value's kind as the engine sees it: "b" bool, "n" number (int or float), "s" anything else."""
    if isinstance(value, bool):
        return "b"
    if isinstance(value, (int, float)):
        return "n"
    return "s"


def _equal(value, target) -> bool:
    return value_kind(value) == value_kind(target) and value == target


def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """An order test that holds only between values of one kind (a string is never below a number)."""
    return lambda value, target: value_kind(value) == value_kind(target) and compare(value, target)


def _one_of(value, targets) -> bool:
    return any(_equal(value, t) for t in (targets or ()))


def _matches(value, pattern) -> bool:
    return re.search(str(pattern), str(value)) is not None


@dataclass(frozen=True)
class Operator:
    """One condition operator: its name in the rule YAML, its test of a present value against the
    condition's target, its form (how an engine expresses it) and, for an order or equality test,
    the operator that holds exactly where it fails on a value of the target's kind."""

    name: str
    test: Callable[[Any, Any], bool]
    form: str  # "order", "equality", "membership", "regex", "presence"; "trend": verify_check only
    negation: str | None = None
    symbol: str = ""


_TABLE = (
    Operator("lt", _ordered(operator.lt), "order", "gte", "<"),
    Operator("lte", _ordered(operator.le), "order", "gt", "<="),
    Operator("gt", _ordered(operator.gt), "order", "lte", ">"),
    Operator("gte", _ordered(operator.ge), "order", "lt", ">="),
    Operator("eq", _equal, "equality", "neq", "=="),
    Operator("neq", lambda value, target: not _equal(value, target), "equality", "eq", "!="),
    Operator("in", _one_of, "membership"),
    Operator("matches", _matches, "regex"),
    Operator("exists", lambda value, target: True, "presence"),
    # verify_check only (diagnose compare): AFTER's value (`value`) below / above BEFORE's (`target`)
    Operator("falls", _ordered(operator.lt), "trend"),
    Operator("rises", _ordered(operator.gt), "trend"),
)
OPERATORS: dict[str, Operator] = {op.name: op for op in _TABLE}
COMPARE_OPS = tuple(op.name for op in _TABLE if op.form == "order")
OPS = tuple(op.name for op in _TABLE if op.form != "trend")  # what a rule's `when` may use
TREND_OPS = tuple(op.name for op in _TABLE if op.form == "trend")
VERIFY_OPS = OPS + TREND_OPS


def holds(op: str, value, target) -> bool:
    """Does a present `value` pass operator `op` against `target` (a threshold, literal or list)?"""
    return OPERATORS[op].test(value, target)


def fact_truth(op: str, values: Mapping, fact: str, target, unknown=UNKNOWN):
    """One fact test on a record: `exists` of an absent fact is false, any other test of it `unknown`."""
    if fact not in values:
        return False if op == "exists" else unknown
    return holds(op, values[fact], target)


def target_of(c: "Condition", params: Mapping):
    """What a fact condition tests against: its param's value, or its literal."""
    return params.get(c.param) if c.param is not None else c.value


def truth(c: "Condition", values: Mapping, params: Mapping, found: Mapping[str, bool] | None = None,
          unknown=UNKNOWN):
    """True / False / `unknown` for a `when` tree over a record with gaps (Kleene's logic).

    `found`: rule id -> fired or not, for the findings known; a finding not in it, and a test of an
    absent fact (not `exists`), is `unknown`. With unknown=False this is the engine's two-valued answer.
    """
    if c.kind in ("all", "any", "none"):
        vals = [truth(i, values, params, found, unknown) for i in c.items]
        if c.kind == "all":
            return False if False in vals else (UNKNOWN if UNKNOWN in vals else True)
        hit = True if True in vals else (UNKNOWN if UNKNOWN in vals else False)
        return hit if c.kind == "any" else (UNKNOWN if hit is UNKNOWN else not hit)
    if c.kind == "finding":
        return (found or {}).get(c.finding, unknown)
    return fact_truth(c.op, values, c.fact, target_of(c, params), unknown)
