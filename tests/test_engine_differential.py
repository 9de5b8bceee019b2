"""The durable_rules backend agrees with the reference evaluator on random fact sets.

This is what makes the engine trustworthy: every shipped rule, and a synthetic pack that
exercises every op, is run over >= 1,000 random fact sets through both evaluators.
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


def _thresholds(pack):
    out = {0.0, 1.0, -1.0, 1e-05, 100.0}
    for r in pack.rules.values():
        out.update(float(v) for v in r.params.values() if isinstance(v, (int, float)) and not isinstance(v, bool))
    return sorted(out)


def _strings(pack):
    out = {"train", "infer", "eval", "gemm_f32", "gemm_bf16", "x"}
    for r in pack.rules.values():
        out.update(v for v in r.params.values() if isinstance(v, str))
    return sorted(out)


def value_strategy(pack):
    near = st.sampled_from(_thresholds(pack)).flatmap(
        lambda t: st.sampled_from([t, t * 0.5, t * 1.5, t + 1e-06, t - 1e-06, -t, t * 1e6]))
    return st.one_of(
        near, near, near,
        st.floats(allow_nan=True, allow_infinity=True, width=64),
        st.integers(-10**18, 10**18),
        st.booleans(),
        st.sampled_from(_strings(pack)),
    )


def fact_sets(pack):
    facts = sorted(set().union(*(r.when.facts() | set(r.requires) for r in pack.rules.values())))
    scopes = sorted({r.scope for r in pack.rules.values()} - {"run"})
    vals = value_strategy(pack)
    run = st.dictionaries(st.sampled_from(facts), vals, max_size=len(facts))
    subject = st.tuples(st.sampled_from(scopes or ["kernel"]), st.dictionaries(st.sampled_from(facts), vals, max_size=6))
    return st.tuples(run, st.lists(subject, max_size=4))


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


def test_differential_test_can_fail():
    """Guard: a matcher that drops one finding is caught (the comparison is not vacuous)."""
    facts = {"a": 50.0, "b": 0.0}

    def broken(rules, records, fired, all_rules):
        return {x for x in durable_matcher(rules, records, fired, all_rules) if x[0] != "SYN001"}

    assert _findings(SYNTHETIC, facts, [], durable_matcher) != _findings(SYNTHETIC, facts, [], broken)
    assert ("SYN001", 0) in _findings(SYNTHETIC, facts, [], reference_matcher)
