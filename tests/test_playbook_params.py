"""Playbook numbers come from the rules' params: where a playbook says "`fact` at least N" of a fact
its rule compares against a param, N is written `{param}` and filled from the params in force (the
default, or --param), so prose and rule cannot drift apart. A literal that restates a param fails."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnoser.pipeline import load_pack
from diagnoser.report.playbook import PARAM_REF, fill_prose, load_playbooks, rule_playbook_markdown

ROOT = Path(__file__).resolve().parents[1]
PHRASE = re.compile(r"`([a-z][a-z0-9_]*)` (?:at least|at most|below|above|under|over|more than|less than|fewer than) "
                    r"(\d[\d_]*(?:\.\d+)?)(?![\d.]*\d)")


def _leaves(c):
    if c.kind in ("all", "any", "none"):
        for i in c.items:
            yield from _leaves(i)
    elif c.kind == "fact":
        yield c


@pytest.fixture(scope="module")
def pack():
    return load_pack()


def test_no_playbook_restates_a_param_as_a_literal(pack):
    literal = []
    for book in load_playbooks(ROOT / "playbooks").values():
        for section in book.sections:
            rule = pack.rules.get(section.rule)
            if rule is None:
                continue
            compared = {(c.fact, c.param) for c in list(_leaves(rule.when)) + list(rule.verify_check) if c.param}
            for text in section.parts.values():
                for fact, number in PHRASE.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
                    value = float(number.replace("_", ""))
                    if any(f == fact and isinstance(rule.params.get(p), (int, float)) and float(rule.params[p]) == value
                           for f, p in compared):
                        literal.append(f"{rule.id}: `{fact}` ... {number}")
    assert not literal, f"playbook numbers that restate a param (write {{param}}): {literal}"


def test_every_param_a_playbook_names_is_its_rules(pack):
    unknown = []
    for book in load_playbooks(ROOT / "playbooks").values():
        for section in book.sections:
            rule = pack.rules.get(section.rule)
            for text in section.parts.values():
                for name, _ in PARAM_REF.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
                    if rule is None or name not in rule.params:
                        unknown.append(f"{section.rule}: {{{name}}}")
    assert not unknown, unknown
    assert sum(len(PARAM_REF.findall(t)) for b in load_playbooks(ROOT / "playbooks").values()
               for s in b.sections for t in s.parts.values()) >= 50


def test_a_param_override_reaches_the_playbook_text(pack):
    default = rule_playbook_markdown(pack, "TRAIN001")
    changed = rule_playbook_markdown(load_pack(params=["TRAIN001.min_idle_data_pct=35"]), "TRAIN001")
    assert "`idle_data_pct` at least 20" in default and "`idle_data_pct` at least 35" in changed
    assert "{" not in fill_prose("`x` at least {min_idle_data_pct}%", {"min_idle_data_pct": 20})
    assert fill_prose("acc[TM][TN] = {};", {"TM": 1}) == "acc[TM][TN] = {};"  # code braces stay


def test_every_verify_check_threshold_is_a_param(pack):
    """`--param` reaches what compare checks a fix against: no shipped verify_check compares a fact
    with a literal number."""
    literal = [f"{r.id}: {c.fact} {c.op} {c.value}" for r in pack.rules.values() for c in r.verify_check
               if isinstance(c.value, (int, float)) and not isinstance(c.value, bool)]
    assert not literal, literal
    assert sum(1 for r in pack.rules.values() for c in r.verify_check if c.param) >= 50
