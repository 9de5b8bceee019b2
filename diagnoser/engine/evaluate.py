"""Evaluate a rule pack over records: decide what can be evaluated, run the layers, build findings.

The matching itself is delegated to a matcher: `durable_matcher` (production, durable_rules) or a
reference evaluator (tests/reference_evaluator.py) with the same interface, so the two can be
compared on random fact sets.
"""
from __future__ import annotations

from typing import Callable, Iterable

from ..absence import absent_reason
from ..facts import FactSpec
from ..kernel_names import short_name
from ..program_kinds import PROGRAM_FACTS
from ..findings import Finding, NotApplicable, NotEvaluated
from ..rulespec.compile import compile_rule, finding_field
from ..rulespec.expr import eval_expr, parse_expr, render_template
from ..rulespec.loader import order_layers
from ..rulespec.model import Rule
from ..rulespec.operators import fact_truth, truth
from . import durable_backend
from .records import Record

Fired = set[tuple[str, int]]
Matcher = Callable[[list[Rule], list[Record], Fired, dict[str, Rule]], Fired]


def finding_holds(ref: Rule, scope: str, idx: int, records: list[Record], fired: Fired) -> bool:
    """Did rule `ref` fire, as seen from record `idx` of `scope` (see docs/rules.md)?"""
    if ref.scope == scope:
        return (ref.id, idx) in fired
    if ref.scope == "run":
        return any((ref.id, j) in fired for j, r in enumerate(records) if r.scope == "run")
    return any((ref.id, j) in fired for j, r in enumerate(records) if r.scope == ref.scope)


# durable_rules refuses a fact of more than ~250 properties (error 302); an engine row holds 5 per field
# a layer reads (value, presence and three type flags) plus flags: a layer is matched in chunks of
# rules whose fields stay under this (rules are single-fact, so chunks are independent).
MAX_FIELDS_PER_ROW = 40


def _chunks(rules: list[Rule], compiled: list) -> list[tuple[list[Rule], list]]:
    out: list[tuple[list, list]] = []
    fields: set[str] = set()
    for r, c in zip(rules, compiled):
        if out and len(fields | set(c.facts)) + len(c.regex_flags) + len(c.finding_refs) > MAX_FIELDS_PER_ROW:
            out.append(([], []))
            fields = set()
        if not out:
            out.append(([], []))
        out[-1][0].append(r)
        out[-1][1].append(c)
        fields |= set(c.facts)
    return out


def durable_matcher(rules: list[Rule], records: list[Record], fired: Fired, all_rules: dict[str, Rule]) -> Fired:
    """Match one layer of rules with durable_rules (in chunks small enough for its fact size limit)."""
    compiled = [compile_rule(r) for r in rules]
    if len(_chunks(rules, compiled)) > 1:
        out: Fired = set()
        for part_rules, _ in _chunks(rules, compiled):
            out |= durable_matcher(part_rules, records, fired, all_rules)
        return out
    fields = set().union(*(set(c.facts) for c in compiled)) if compiled else set()
    scopes = {r.scope for r in rules}
    rows, index = [], []
    for idx, rec in enumerate(records):
        if rec.scope not in scopes:
            continue
        flags = {}
        for c in compiled:
            for rx in c.regex_flags:
                flags[rx.field] = fact_truth("matches", rec.values, rx.fact, rx.pattern, unknown=False)
            for ref in c.finding_refs:
                flags[finding_field(ref)] = ref in all_rules and finding_holds(all_rules[ref], rec.scope, idx, records, fired)
        rows.append(durable_backend.engine_row(rec.values, rec.scope, fields, flags))
        index.append(idx)
    matched = durable_backend.match_layer(compiled, rows)
    return {(rid, index[i]) for rid, i in matched}


def applicable(rules: Iterable[Rule], records: list[Record], catalogue: dict[str, FactSpec], kinds: Iterable[str] = ()):
    """Split rules into (to evaluate, not evaluated or not applicable).

    A tree with none of its facts present is skipped (an OOM tree says nothing about a kernel
    report), and so is a rule scoped to a subject kind the input has none of (a straggler rule on
    a one-process trace); a rule whose needed facts are absent is "not evaluated": those it
    declares in `requires` and every fact its `when` reads (Rule.missing), so a rule never goes
    silently false for want of a measurement. A subject-scoped rule that some subjects cannot
    decide (launches profiled without `--set full`) is evaluated on the others and also listed
    as not evaluated on those (NotEvaluated.subjects: "120 of 400 kernels"). A rule whose missing
    facts the inputs (of `kinds`) show are absent, or whose own `not_applicable` condition the present
    facts hold, is not applicable instead, with the reason (diagnoser/absence.py).
    """
    kinds = tuple(kinds)
    run_values = next((rec.values for rec in records if rec.scope == "run"), {})
    present_by_scope: dict[str, set[str]] = {}
    for rec in records:
        present_by_scope.setdefault(rec.scope, set()).update(rec.values)
    all_present = set().union(*present_by_scope.values()) if present_by_scope else set()
    by_tree: dict[str, list[Rule]] = {}
    for r in rules:
        by_tree.setdefault(r.tree, []).append(r)
    todo, skipped = [], []
    for tree in sorted(by_tree):
        tree_rules = by_tree[tree]
        tree_facts = set().union(*(set(r.requires) | r.when.facts() for r in tree_rules)) - set(PROGRAM_FACTS)
        if not (tree_facts & all_present):
            continue
        for r in sorted(tree_rules, key=lambda r: r.id):
            if r.scope not in present_by_scope:
                continue  # no subject of this kind here (no ranks in a one-process run): not applicable
            present = present_by_scope.get(r.scope, set())
            missing = r.missing(present)
            if missing and all(_known_false(r.when, rec.values, r.params) for rec in records if rec.scope == r.scope):
                continue  # facts that are present already rule it out (a training rule on inference)
            if missing:
                reason = _not_applicable(r, missing, records, run_values, kinds, catalogue)
                skipped.append(NotApplicable(r.id, r.title, r.tree, reason, missing) if reason else
                               NotEvaluated(r.id, r.title, r.tree, missing, _hints(missing, catalogue)))
                continue
            todo.append(r)
            if r.scope != "run":
                partial = _undecided_subjects(r, [rec for rec in records if rec.scope == r.scope])
                if partial:
                    lacking, total, needs = partial
                    # no "collect it with": a subject may lack a fact because it is undefined there
                    # (an atomics-only kernel has no load efficiency), not because it went unmeasured
                    skipped.append(NotEvaluated(r.id, r.title, r.tree, needs, "", f"{lacking} of {total} {r.scope}s"))
    return todo, skipped


def _not_applicable(rule: Rule, missing, records: list[Record], run_values: dict, kinds, catalogue) -> str:
    """Why `rule`, lacking `missing`, has nothing to act on here ('' when an input not given would decide it)."""
    if rule.not_applicable is not None:
        cond, reason = rule.not_applicable
        scoped = [rec for rec in records if rec.scope == rule.scope]
        if scoped and all(truth(cond, rec.values, rule.params) is True for rec in scoped):
            return reason
    return absent_reason(missing, kinds, run_values, catalogue)


def decided_by_findings(skipped: list, rules: dict[str, Rule], records: list[Record], evaluated: dict[str, Rule],
                        fired: Fired) -> list:
    """`skipped` without the rules the findings decide after all: a rule that lacks facts but needs a
    finding of a rule that was evaluated and did not fire (INFER016 needs INFER004) cannot fire,
    whatever the missing facts say, so no input would change it. A finding is known as the engine
    sees it from each record (finding_holds); one of a rule not decided on every subject is not."""
    partial = {ne.rule for ne in skipped if isinstance(ne, NotEvaluated) and ne.subjects}
    known = {rid: r for rid, r in evaluated.items() if rid not in partial}
    out = []
    for ne in skipped:
        r = rules.get(ne.rule)
        if r is not None and isinstance(ne, NotEvaluated) and not ne.subjects:
            refs = [rid for rid in r.when.findings() if rid in known]
            decided = [idx for idx, rec in enumerate(records) if rec.scope == r.scope]
            if decided and all(truth(r.when, records[idx].values, r.params,
                                       {rid: finding_holds(known[rid], r.scope, idx, records, fired) for rid in refs})
                               is False for idx in decided):
                continue
        out.append(ne)
    return out


def _hints(missing, catalogue: dict[str, FactSpec]) -> str:
    texts = sorted({catalogue[f].collect for f in missing if f in catalogue and catalogue[f].collect})
    return "; ".join(t for t in texts if not any(t != u and t in u for u in texts))  # one that another says too: once


def _undecided_subjects(rule: Rule, records: list[Record]):
    """(subjects lacking a needed fact, subjects, the facts) for subjects this rule cannot decide
    that present facts do not already rule out; None when every subject can be decided."""
    by_keys: dict[frozenset, tuple[str, ...]] = {}
    lacking, needs = 0, {}
    for rec in records:
        keys = frozenset(rec.values)
        if keys not in by_keys:
            by_keys[keys] = rule.missing(keys)
        missing = by_keys[keys]
        if missing and not _known_false(rule.when, rec.values, rule.params):
            lacking += 1
            needs.update(dict.fromkeys(missing))
    return (lacking, len(records), tuple(needs)) if lacking else None


def _known_false(c, values: dict, params: dict | None = None) -> bool:
    """Kleene logic over a record with gaps: is the condition false whatever the absent facts are?"""
    return truth(c, values, params or {}) is False


def run_rules(rules: dict[str, Rule], records: list[Record], matcher: Matcher = durable_matcher) -> Fired:
    """Evaluate rules layer by layer (a rule after those whose findings it references)."""
    fired: Fired = set()
    for layer in order_layers(rules):
        layer_rules = [rules[rid] for rid in layer]
        fired |= matcher(layer_rules, records, fired, rules)
    return fired


def make_finding(rule: Rule, rec: Record) -> Finding:
    env = dict(rec.values)
    env.update(rule.params)
    subject_name = rec.subject.name if rec.subject and rec.subject.name else None
    # text says a kernel by its short name; the evidence keeps the full demangled one
    env["subject"] = short_name(subject_name) if subject_name else (rec.subject.id if rec.subject else "run")
    gain_of = rec.gain_units.get(rule.gain_of, rule.gain_of)  # what the gain (and a share in the text) is of
    env["gain_of"] = gain_of
    gain = eval_expr(rule.estimated_gain, env) if rule.estimated_gain is not None else None
    out_of_unit = gain if gain is not None and gain > 1.0 + 1e-9 else None  # more than all of gain_of
    known = gain is not None and out_of_unit is None
    gain = 0.0 if gain is None or out_of_unit is not None else max(0.0, min(1.0, gain))
    evidence = {f: {"value": rec.values[f], "unit": rec.units.get(f, "")} for f in rule.evidence if f in rec.values}
    if rec.subject is not None and rec.subject.kind == "kernel" and subject_name and "kernel_name" not in evidence \
            and short_name(subject_name) != subject_name:
        evidence["kernel_name"] = {"value": subject_name, "unit": ""}
    evidence_sources = {f: rec.fact_sources.get(f, "") for f in evidence}
    gain_env = {}
    if rule.estimated_gain is not None:
        gain_env = {n: env[n] for n in parse_expr(rule.estimated_gain) if n in env}
    texts, variant = rule.texts(rec.values)  # the text for this program (framework, GPU...): docs/rules.md
    return Finding(
        rule=rule.id, name=rule.name, category=rule.category, tree=rule.tree, severity=rule.severity,
        title=texts["title"], message=render_template(texts["message"], env), evidence=evidence,
        estimated_gain=gain, gain_of=gain_of, subject=rec.subject, fix=render_template(texts["fix"], env),
        verify=render_template(texts["verify"], env), refs=tuple(texts["refs"]), sources=sorted(rec.sources),
        gain_expr=rule.estimated_gain, gain_env=gain_env, gain_known=known, gain_out_of_unit=out_of_unit,
        evidence_sources=evidence_sources, variant=variant, own_fix=texts["fix"] == rule.fix,
        params=dict(rule.params),
    )


def evaluate(rules: dict[str, Rule], records: list[Record], catalogue: dict[str, FactSpec],
             matcher: Matcher = durable_matcher, kinds: Iterable[str] = ()) -> tuple[list[Finding], list]:
    """(findings, the rules not evaluated or not applicable: NotEvaluated / NotApplicable); `kinds`:
    the input kinds the records were measured from (what they could have recorded)."""
    todo, skipped = applicable(rules.values(), records, catalogue, kinds)
    active = {r.id: r for r in todo}
    # a rule that references a finding of a rule that cannot be evaluated still runs: that finding is absent
    fired = run_rules(active, records, matcher) if active else set()
    findings = [make_finding(active[rid], records[idx]) for rid, idx in sorted(fired)]
    skipped = decided_by_findings(skipped, rules, records, active, fired)
    return findings, skipped
