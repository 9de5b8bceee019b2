"""Validated rule objects: what a YAML rule file becomes before it is compiled for the engine."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("critical", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
# what a rule's `scope` may name: the subject kinds the analyses attach facts to (the catalogue's;
# a test keeps them equal), so a scope no input can produce is an error, not a rule that never runs
SCOPES = ("run", "kernel", "rank", "site")


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
    label: str | None = None  # the shared condition this `all` node was written as ({condition: NAME})

    def facts(self) -> set[str]:
        if self.kind == "fact":
            return {self.fact}
        return set().union(*(c.facts() for c in self.items)) if self.items else set()

    def findings(self) -> set[str]:
        if self.kind == "finding":
            return {self.finding}
        return set().union(*(c.findings() for c in self.items)) if self.items else set()

    def missing(self, present) -> tuple[str, ...]:
        """Facts this condition reads that are absent from `present`, in the order it reads them;
        () when it can be decided. Every fact a condition reads is needed (`exists` tests presence
        itself and needs nothing); an `any` is decided when one of its branches can be."""
        if self.kind == "fact":
            return () if self.op == "exists" or self.fact in present else (self.fact,)
        if self.kind == "finding":
            return ()
        parts = [c.missing(present) for c in self.items]
        if self.kind == "any" and parts and any(not p for p in parts):
            return ()
        return tuple(dict.fromkeys(f for p in parts for f in p))

    def params(self) -> set[str]:
        if self.kind == "fact":
            return {self.param} if self.param else set()
        return set().union(*(c.params() for c in self.items)) if self.items else set()


@dataclass(frozen=True)
class Variant:
    """Text of a rule for some programs: used where every fact in `select` has one of its values
    (`{framework: (cuda, openacc-openmp)}`); None texts fall back to the rule's own."""

    select: tuple[tuple[str, tuple[str, ...]], ...]
    title: str | None = None
    message: str | None = None
    fix: str | None = None
    verify: str | None = None
    refs: tuple[str, ...] | None = None  # links for this program's fix (None: the rule's own)

    def matches(self, values: dict) -> bool:
        return all(values.get(fact) in allowed for fact, allowed in self.select)

    def label(self) -> dict:
        return {fact: list(allowed) for fact, allowed in self.select}


TEXT_FIELDS = ("title", "message", "fix", "verify", "refs")


@dataclass
class Rule:
    """One rule of a decision tree, as its YAML file states it (checked): its condition, texts, params."""

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
    verify_check: tuple[Condition, ...] = ()  # machine-checkable `verify` (all must hold in AFTER)
    # (condition, reason): present facts showing what the rule is about is absent from the inputs
    # (no attention kernels, so no KV cache): a rule that lacks facts is then "not applicable", not "not evaluated"
    not_applicable: tuple | None = None
    variants: tuple[Variant, ...] = ()  # texts for some programs (framework, GPU...), first match per field
    path: str = ""
    line: int = 0
    shipped: bool = True
    extra: dict = field(default_factory=dict)

    def with_params(self, overrides: dict[str, Any]) -> "Rule":
        from dataclasses import replace
        merged = dict(self.params)
        merged.update(overrides)
        return replace(self, params=merged)

    def texts(self, values: dict) -> tuple[dict[str, str], dict]:
        """The title, message, fix, verify and refs for a record's values: per field, the first variant that
        matches and sets it, else the rule's own; and the selectors of the variants used ({} for none)."""
        out = {k: getattr(self, k) for k in TEXT_FIELDS}
        used: dict = {}
        for field_name in TEXT_FIELDS:
            for v in self.variants:
                text = getattr(v, field_name)
                if text is not None and v.matches(values):
                    out[field_name] = text
                    for fact, _ in v.select:
                        used[fact] = values.get(fact)
                    break
        return out, used

    def missing(self, present) -> tuple[str, ...]:
        """What this rule needs and `present` lacks: its declared `requires`, then what `when` reads."""
        declared = tuple(f for f in self.requires if f not in present)
        return tuple(dict.fromkeys(declared + self.when.missing(present)))

    def needs(self) -> tuple[str, ...]:
        """Every fact the rule needs when all are absent (declared and derived from `when`)."""
        return self.missing(())

    @property
    def playbook_anchor(self) -> str:
        return self.id.lower()


@dataclass
class RulePack:
    """All rules in force for a run, keyed by id, in a stable order."""

    rules: dict[str, Rule]
    trees: dict[str, str] = field(default_factory=dict)  # tree name -> source file
    params: list[dict] = field(default_factory=list)  # --param overrides: {rule, param, value, default}
    packs: list[dict] = field(default_factory=list)  # user packs: {path, rules, replaces}
    settings: dict = field(default_factory=dict)  # analysis settings the packs set (`settings:`)

    def provenance(self) -> dict:
        """How this pack differs from the shipped one, for the report's settings record."""
        return {"params": [dict(p) for p in self.params], "rule_packs": [dict(p) for p in self.packs],
                "pack_settings": dict(self.settings)}

    def ordered(self) -> list[Rule]:
        return [self.rules[k] for k in sorted(self.rules)]
