"""One rule per mechanism (docs/rules.md, One rule for training and inference): two shipped rule
definitions whose `when` is the same but for the workload_kind guard are copies; they are written once
with `ids: {training: ..., inference: ...}`. Copies still apart are listed in KNOWN_COPIES; the test
fails on a new one, and on a listed one that was merged (so the list only shrinks)."""
from __future__ import annotations

import json

from diagnoser.cli.rules import pack_of
from diagnoser.rulespec.compile import compile_rule
from diagnoser.rulespec.loader import file_data, rule_files
from diagnoser.resources import rules_dir

_GUARD = {"training", "inference"}

# pairs with one mechanism still written twice (issue 24); remove a pair when it becomes one `ids:` rule
KNOWN_COPIES: set[tuple[str, str]] = set()  # all merged


def _unguarded(pred):
    """The compiled `when` without its workload_kind guard (None for a rule without one)."""
    pred = json.loads(json.dumps(pred))  # tuples -> lists
    if pred[0] != "and":
        return None
    items = [p for p in pred[1] if not (p[:3] == ["cmp", "workload_kind", "eq"] and p[3] in _GUARD)]
    return json.dumps(items) if len(items) < len(pred[1]) else None


def _defined_apart():
    """Groups of ids with one unguarded `when` that come from different rule definitions."""
    together = {}  # id -> its definition (file, index)
    for path in rule_files(rules_dir()):
        for i, (raw, _, line) in enumerate(file_data(path)["rules"]):
            together[raw["id"]] = (path.name, line)
    groups = {}
    for rid, rule in pack_of(()).rules.items():
        key = _unguarded(compile_rule(rule).predicate)
        if key is not None:
            groups.setdefault(key, []).append(rid)
    return {tuple(sorted(ids)) for ids in groups.values() if len({together[r] for r in ids}) > 1}


def test_no_new_copies_and_the_known_list_only_shrinks():
    apart = _defined_apart()
    new = sorted(apart - KNOWN_COPIES)
    assert not new, f"rules with one `when` but the workload guard, defined apart: {new}; write them once with `ids:`"
    merged = sorted(KNOWN_COPIES - apart)
    assert not merged, f"no longer copies (merged?): {merged}; remove them from KNOWN_COPIES"


def test_one_definition_expands_to_both_ids_with_their_trees():
    pack = pack_of(())
    train, infer = pack.rules["TRAIN012"], pack.rules["INFER010"]
    assert (train.tree, infer.tree) == ("train-slow", "inference-slow")
    assert train.path == infer.path and train.line == infer.line  # one definition
    assert list(compile_rule(train).predicate[1][0]) == ["cmp", "workload_kind", "eq", "training"]
    assert list(compile_rule(infer).predicate[1][0]) == ["cmp", "workload_kind", "eq", "inference"]
    assert "input preparation" in infer.message and "data loading" in train.message
    assert pack_of((), ["INFER010.min_idle_unexplained_pct=30"]).rules["INFER010"].params["min_idle_unexplained_pct"] == 30
