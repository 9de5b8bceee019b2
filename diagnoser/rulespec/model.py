"""Validated rule objects: what a YAML rule file becomes before it is compiled for the engine."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("critical", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
COMPARE_OPS = ("lt", "lte", "gt", "gte")
OPS = COMPARE_OPS + ("eq", "neq", "in", "matches", "exists")


@dataclass(frozen=True)
class Condition:
    """One node of a rule's `when` tree.

    kind "fact":    fact OP (value | param)         kind "finding": another rule fired
    kind "all" / "any" / "none": items
    """

    kind: str
    fact: str | None = None
    op: str | None = None
    value: Any = None
    param: str | None = None
    finding: str | None = None
    items: tuple["Condition", ...] = ()

    def facts(self) -> set[str]:
        if self.kind == "fact":
            return {self.fact}
        return set().union(*(c.facts() for c in self.items)) if self.items else set()

    def findings(self) -> set[str]:
        if self.kind == "finding":
            return {self.finding}
        return set().union(*(c.findings() for c in self.items)) if self.items else set()

    def params(self) -> set[str]:
        if self.kind == "fact":
            return {self.param} if self.param else set()
        return set().union(*(c.params() for c in self.items)) if self.items else set()


@dataclass
class Rule:
    id: str
    name: str
    title: str
    tree: str
    category: str
    severity: str
    status: str
    scope: str
    requires: tuple[str, ...]
    params: dict[str, Any]
    when: Condition
    message: str
    evidence: tuple[str, ...]
    estimated_gain: str | None
    gain_of: str
    fix: str
    verify: str
    refs: tuple[str, ...] = ()
    path: str = ""
    line: int = 0
    shipped: bool = True
    extra: dict = field(default_factory=dict)

    def with_params(self, overrides: dict[str, Any]) -> "Rule":
        from dataclasses import replace
        merged = dict(self.params)
        merged.update(overrides)
        return replace(self, params=merged)

    @property
    def playbook_anchor(self) -> str:
        return self.id.lower()


@dataclass
class RulePack:
    """All rules in force for a run, keyed by id, in a stable order."""

    rules: dict[str, Rule]
    trees: dict[str, str] = field(default_factory=dict)  # tree name -> source file

    def ordered(self) -> list[Rule]:
        return [self.rules[k] for k in sorted(self.rules)]
