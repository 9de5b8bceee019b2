"""`requires` lists the facts a rule cannot be stated without beyond those its `when` reads (every fact
`when` reads is needed anyway, docs/rules.md): each one is read by the rule, in its texts, evidence or
gain. A fact listed there that the rule never reads would make it "not evaluated" for nothing."""
from __future__ import annotations

import string

from diagnoser.pipeline import load_pack
from diagnoser.rulespec.expr import parse_expr


def _read_by(rule) -> set[str]:
    names = set(rule.when.facts()) | set(rule.evidence)
    texts = [rule.title, rule.message, rule.verify, rule.fix]
    texts += [getattr(v, k) for v in rule.variants for k in ("title", "message", "verify", "fix") if getattr(v, k)]
    for text in texts:
        names |= {field for _, field, _, _ in string.Formatter().parse(text.replace("[[", "").replace("]]", "")) if field}
    if rule.estimated_gain is not None:
        names |= set(parse_expr(rule.estimated_gain))
    names |= {c.fact for c in rule.verify_check}
    return names


def test_every_fact_a_rule_requires_is_one_it_reads():
    unread = {r.id: sorted(set(r.requires) - _read_by(r)) for r in load_pack().rules.values()}
    unread = {rid: facts for rid, facts in unread.items() if facts}
    assert not unread, f"rules that require facts they never read (drop them from `requires`): {unread}"
