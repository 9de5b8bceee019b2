"""The durable_rules backend agrees with the reference evaluator on random fact sets.

This is what makes the engine trustworthy: every shipped rule, and a synthetic pack that
exercises every op, is run over >= 1,000 random fact sets through both evaluators. Values of
every kind (bool, int, float, string) meet every operator and kind of threshold, and facts go
missing: a synthetic pack of one rule per operator and target kind (and its negation) is run over
every kind of value through the engine, the reference evaluator and rulespec.operators (the
condition semantics every Python-side evaluation uses).
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnoser.catalogue import catalogue
from diagnoser.engine.evaluate import durable_matcher, run_rules
from diagnoser.engine.records import build_records
from diagnoser.facts import Fact, Subject
from diagnoser.resources import rules_dir
from diagnoser.rulespec.loader import build_pack

from reference_evaluator import reference_matcher

HERE = Path(__file__).resolve().parent
SYNTHETIC = build_pack(None, [HERE / "data" / "synthetic_rules.yaml"])
SHIPPED = build_pack(rules_dir(), known_facts=catalogue())
MIXED = build_pack(None, [HERE / "data" / "synthetic_mixed_types_rules.yaml"])
# a value of every kind, and near-misses across kinds: True vs 1 vs 1.0 vs "1" vs "True"
MIXED_VALUES = [True, False, 0, 1, -1, 0.0, 1.0, 0.5, 2.5, 3, 10**15, 1e15, -1e15, "", "0", "1", "1.0", "2.5",
                "True", "true", "False", "x", "X", "x_x", "x\"y"]


def _other_kinds(t) -> list:
    """Values of the other kinds that a loose comparison would take for `t` (True == 1 == 1.0 == "1")."""
    if isinstance(t, bool):
        return [int(t), float(t), str(t), str(t).lower()]
    if isinstance(t, (int, float)):
        return [str(t), bool(t)] + ([int(t), float(t)] if float(t).is_integer() else [])
    if isinstance(t, str):
        return [1, 0.0, True] + ([float(t)] if t.replace(".", "", 1).isdigit() else [])
    return []


class _Values(dict):
    """A set of values that keeps 1, 1.0 and True apart (a Python set holds one of them)."""

    def update(self, values):
        for v in values:
            self[(type(v).__name__, repr(v))] = v


def _interesting_values(pack) -> dict[str, list]:
    """Per fact: the thresholds and literals rules compare it with, and values just either side."""
    from diagnoser.rulespec.model import Condition

    out: dict[str, _Values] = {}

    def walk(c: Condition, rule):
        if c.kind == "fact":
            vals = out.setdefault(c.fact, _Values())
            target = rule.params[c.param] if c.param is not None else c.value
            items = target if isinstance(target, tuple) else (target,)
            for t in items:
                if isinstance(t, bool) or isinstance(t, str):
                    vals.update([t, not t] if isinstance(t, bool) else [t, t + "_x"])
                elif isinstance(t, (int, float)):
                    vals.update([t, t * 0.5, t * 1.5, t + 1e-06, t - 1e-06, -t, 0, t * 1e6])
                vals.update(_other_kinds(t))
            if c.op == "matches":
                vals.update(["gemm_f32", "x"])
        for i in c.items:
            walk(i, rule)

    for rule in pack.rules.values():
        walk(rule.when, rule)
        for f in set(rule.requires) | rule.when.facts():
            out.setdefault(f, _Values()).update([0.0, 1.0, "x", 0, 1, True, False, "1"])
    return {k: [v[key] for key in sorted(v)] for k, v in out.items()}


def _satisfying_values(rule) -> dict[str, list]:
    """Values that make each of the rule's fact conditions true (polarity ignored: a bias, not a solver)."""
    out: dict[str, list] = {}

    def walk(c):
        for i in c.items:
            walk(i)
        if c.kind != "fact":
            return
        t = rule.params[c.param] if c.param is not None else c.value
        if c.op in ("lt", "lte"):
            v = [t - abs(t) * 0.5 - 1, t] if c.op == "lte" else [t - abs(t) * 0.5 - 1]
        elif c.op in ("gt", "gte"):
            v = [t + abs(t) * 0.5 + 1, t] if c.op == "gte" else [t + abs(t) * 0.5 + 1]
        elif c.op == "eq":
            v = [t]
        elif c.op == "in":
            v = list(t)
        elif c.op == "neq":
            v = [t + 1] if isinstance(t, (int, float)) and not isinstance(t, bool) else [not t] if isinstance(t, bool) else [str(t) + "_other"]
        else:
            return
        out.setdefault(c.fact, []).extend(v)

    walk(rule.when)
    return out


def random_fact_set(rng, pack, interesting):
    """Run-level and subject facts drawn mostly near the rules' thresholds, sometimes wild."""
    scopes = sorted({r.scope for r in pack.rules.values()} - {"run"})
    facts_by_scope: dict[str, set] = {}
    for r in pack.rules.values():
        facts_by_scope.setdefault(r.scope, set()).update(r.when.facts() | set(r.requires))
    wild = [float("nan"), float("inf"), -float("inf"), 1e-12, 1e300, 10**18, True, False, "", "x\"y"]

    focus = rng.choice(sorted(pack.rules))  # one rule's facts are nearly all present, others often absent
    focus_facts = set(pack.rules[focus].requires) | pack.rules[focus].when.facts()
    p_absent = rng.choice([0.1, 0.3, 0.6])

    satisfying = _satisfying_values(pack.rules[focus])
    # facts that only the rules the focus rule yields to read: mostly absent, so a rule that yields to
    # many others (KERN007 to ten) still fires somewhere
    blockers = {f for r in pack.rules[focus].when.findings() if r in pack.rules
                for f in pack.rules[r].when.facts()} - focus_facts

    def draw(names):
        vals = {}
        for name in sorted(names):
            if name in satisfying and rng.random() < 0.8:
                vals[name] = rng.choice(satisfying[name])
                continue
            roll = rng.random()
            if roll < (0.03 if name in focus_facts else 0.8 if name in blockers else p_absent):
                continue
            vals[name] = rng.choice(wild) if roll > 0.97 else rng.choice(interesting[name])
        return vals

    run = draw(facts_by_scope.get("run", set()))
    subjects = []
    focus_scope = pack.rules[focus].scope
    for i in range(rng.randint(0, 4)):
        # the first subject is of the focus rule's scope, so a subject rule is drawn where it can fire
        scope = focus_scope if i == 0 and focus_scope in scopes else rng.choice(scopes) if scopes else "kernel"
        subjects.append((scope, draw(facts_by_scope.get(scope, set()))))
    return run, subjects


def fact_sets(pack):
    interesting = _interesting_values(pack)
    return st.randoms(use_true_random=False).map(lambda rng: random_fact_set(rng, pack, interesting))


def _findings(pack, run_facts, subjects, matcher):
    facts = [Fact(n, v, "", "random") for n, v in run_facts.items()]
    for i, (kind, values) in enumerate(subjects):
        s = Subject(kind, str(i), f"s{i}")
        facts += [Fact(n, v, "", "random", s) for n, v in values.items()]
    records, _ = build_records(facts)
    return sorted(run_rules(pack.rules, records, matcher))


def _check(pack, data):
    run_facts, subjects = data
    assert _findings(pack, run_facts, subjects, durable_matcher) == _findings(pack, run_facts, subjects, reference_matcher)


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(fact_sets(SYNTHETIC))
def test_durable_matches_reference_on_synthetic_pack(data):
    _check(SYNTHETIC, data)


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(fact_sets(SHIPPED))
def test_durable_matches_reference_on_every_shipped_rule(data):
    assert len(SHIPPED.rules) >= 20, "the shipped rule packs are missing"
    _check(SHIPPED, data)


def test_random_fact_sets_exercise_every_shipped_rule_both_ways():
    """Guard: over 1,000 generated sets every shipped rule both fires and stays silent somewhere."""
    import random

    rng = random.Random(7)
    interesting = _interesting_values(SHIPPED)
    fired_any: dict[str, int] = {}
    for _ in range(1000):
        run_facts, subjects = random_fact_set(rng, SHIPPED, interesting)
        for rid, _ in set(_findings(SHIPPED, run_facts, subjects, reference_matcher)):
            fired_any[rid] = fired_any.get(rid, 0) + 1
    never = sorted(set(SHIPPED.rules) - set(fired_any))
    always = sorted(r for r, n in fired_any.items() if n >= 1000)
    assert not never, f"rules never fired by the generator: {never}"
    assert not always, f"rules that always fired: {always}"


def test_differential_test_can_fail():
    """Guard: a matcher that drops one finding is caught (the comparison is not vacuous)."""
    facts = {"a": 50.0, "b": 0.0}

    def broken(rules, records, fired, all_rules):
        return {x for x in durable_matcher(rules, records, fired, all_rules) if x[0] != "SYN001"}

    assert _findings(SYNTHETIC, facts, [], durable_matcher) != _findings(SYNTHETIC, facts, [], broken)
    assert ("SYN001", 0) in _findings(SYNTHETIC, facts, [], reference_matcher)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(fact_sets(MIXED))
def test_durable_matches_reference_on_mixed_types_synthetic_pack(data):
    _check(MIXED, data)


def _run_findings(pack, values: dict, matcher) -> set[str]:
    return {rid for rid, _ in _findings(pack, values, [], matcher)}


def test_every_operator_means_one_thing_on_every_kind_of_value_synthetic():
    """Each operator against each kind of threshold (the synthetic mixed pack), over a value of every
    kind and an absent one: durable_rules, the reference evaluator and rulespec.operators agree
    (True is not 1, "1" is not 1, 1 is 1.0; a test of an absent fact is unknown, `exists` false)."""
    from diagnoser.rulespec.operators import truth

    seen: dict[str, set] = {rid: set() for rid in MIXED.rules}
    for value in MIXED_VALUES + [None]:
        values = {} if value is None else {"m": value}
        records, _ = build_records([Fact("m", value, "", "synthetic")] if value is not None else [])
        engine = _run_findings(MIXED, values, durable_matcher)
        assert engine == _run_findings(MIXED, values, reference_matcher), f"m = {value!r}"
        for rid, rule in MIXED.rules.items():
            seen[rid].add(rid in engine)
            said = f"{rid} ({rule.title}) on m = {value!r}"
            assert truth(rule.when, records[0].values, rule.params, unknown=False) is (rid in engine), said
            three = truth(rule.when, records[0].values, rule.params)
            assert three is (None if value is None and "exists" not in rule.title else rid in engine), said
    assert all(s == {True, False} for s in seen.values()), {r: s for r, s in seen.items() if len(s) < 2}
