"""A mechanism the training and inference trees share is written once: a `conditions:` entry with
its thresholds, used by rules of both trees as `{condition: NAME}` (synthetic rule packs)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from diagnoser.catalogue import catalogue
from diagnoser.cli import cli
from diagnoser.engine.evaluate import evaluate
from diagnoser.engine.records import Record
from diagnoser.errors import RuleError
from diagnoser.rulespec.compile import compile_rule
from diagnoser.rulespec.loader import build_pack

SHARED = """\
conditions:
  attention-not-fused:
    params: {min_unfused_attention_pct: 15, fused_speedup_share: 0.8}
    when:
      all:
        - {fact: unfused_attention_pct, op: gte, param: min_unfused_attention_pct}
"""
TREE = """\
tree: {tree}
rules:
  - id: {rid}
    name: attention-not-fused
    title: Attention is not fused
    category: unfused_attention
    severity: critical
    when:
      all:
        - {{fact: workload_kind, op: eq, value: {kind}}}
        - {{condition: attention-not-fused}}
    message: "{{unfused_attention_pct:.0f}}% of the step is hand-written attention"
    estimated_gain: unfused_attention_pct / 100 * fused_speedup_share
    fix: "use scaled_dot_product_attention"
    verify: "unfused_attention_pct below {{min_unfused_attention_pct}}%"
"""


def _pack(tmp_path, shared=SHARED, extra_params=""):
    (tmp_path / "shared.yaml").write_text(shared)
    (tmp_path / "train.yaml").write_text(TREE.format(tree="demo-train", rid="DTRAIN001", kind="training"))
    infer = TREE.format(tree="demo-infer", rid="DINFER001", kind="inference")
    (tmp_path / "infer.yaml").write_text(infer.replace("    when:", extra_params + "    when:") if extra_params else infer)
    return tmp_path


def test_both_trees_take_the_threshold_from_the_one_shared_condition(tmp_path):
    pack = build_pack(_pack(tmp_path), known_facts=catalogue())
    train, infer = pack.rules["DTRAIN001"], pack.rules["DINFER001"]
    assert train.params == infer.params == {"min_unfused_attention_pct": 15, "fused_speedup_share": 0.8}
    assert train.extra["conditions"] == ["attention-not-fused"]
    assert "('cmp', 'unfused_attention_pct', 'gte', 15)" in str(compile_rule(infer).predicate)
    record = [Record("run", None, {"workload_kind": "inference", "unfused_attention_pct": 20.0})]
    findings, _ = evaluate(pack.rules, record, catalogue())
    assert [f.rule for f in findings] == ["DINFER001"] and abs(findings[0].estimated_gain - 0.16) < 1e-9
    # tuned in one place: both trees follow
    (tmp_path / "shared.yaml").write_text(SHARED.replace("min_unfused_attention_pct: 15", "min_unfused_attention_pct: 25"))
    again = build_pack(tmp_path, known_facts=catalogue())
    assert again.rules["DTRAIN001"].params["min_unfused_attention_pct"] == 25
    assert again.rules["DINFER001"].params["min_unfused_attention_pct"] == 25
    assert not evaluate(again.rules, record, catalogue())[0]
    # and --param still tunes one rule
    one = build_pack(tmp_path, overrides=["DINFER001.min_unfused_attention_pct=10"], known_facts=catalogue())
    assert one.rules["DINFER001"].params["min_unfused_attention_pct"] == 10
    assert one.rules["DTRAIN001"].params["min_unfused_attention_pct"] == 25


def test_a_rule_may_not_set_a_threshold_its_shared_condition_sets(tmp_path):
    with pytest.raises(RuleError) as e:
        build_pack(_pack(tmp_path, extra_params="    params: {min_unfused_attention_pct: 30}\n"), known_facts=catalogue())
    assert "infer.yaml" in str(e.value) and "is set by condition `attention-not-fused`" in str(e.value)
    assert "tune it there" in str(e.value)


def test_unknown_condition_is_a_one_line_error_naming_the_known_ones(tmp_path):
    (tmp_path / "shared.yaml").write_text(SHARED)
    (tmp_path / "train.yaml").write_text(TREE.format(tree="demo-train", rid="DTRAIN001", kind="training")
                                         .replace("condition: attention-not-fused", "condition: attention-unfused"))
    result = CliRunner().invoke(cli, ["rules", "validate", str(tmp_path)])
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert "`condition: attention-unfused` names no shared condition (known: " in result.output
    assert "attention-not-fused" in result.output


def test_conditions_only_file_validates_and_shows_in_rules_show(tmp_path):
    _pack(tmp_path)
    result = CliRunner().invoke(cli, ["rules", "validate", str(tmp_path / "shared.yaml")])
    assert result.exit_code == 0, result.output
    shown = CliRunner().invoke(cli, ["rules", "show", "DTRAIN001", "--rules", str(tmp_path)]).output
    assert "attention-not-fused" in shown and "min_unfused_attention_pct" in shown


def test_param_on_a_shared_condition_tunes_every_rule_using_it(tmp_path):
    pack = build_pack(_pack(tmp_path), overrides=["attention-not-fused.min_unfused_attention_pct=40"],
                      known_facts=catalogue())
    assert pack.rules["DTRAIN001"].params["min_unfused_attention_pct"] == 40
    assert pack.rules["DINFER001"].params["min_unfused_attention_pct"] == 40
    assert pack.params == [{"condition": "attention-not-fused", "param": "min_unfused_attention_pct", "value": 40,
                            "default": 15, "rules": ["DINFER001", "DTRAIN001"]}]
    from diagnoser.errors import DiagnoserError
    with pytest.raises(DiagnoserError, match="condition attention-not-fused has no param nope"):
        build_pack(tmp_path, overrides=["attention-not-fused.nope=1"], known_facts=catalogue())


def _without_workload_guard(cond):
    from diagnoser.rulespec.model import Condition
    if cond.kind == "all":
        return Condition(kind="all", items=tuple(_without_workload_guard(c) for c in cond.items
                                                 if not (c.kind == "fact" and c.fact == "workload_kind")))
    if cond.items:
        return Condition(kind=cond.kind, items=tuple(_without_workload_guard(c) for c in cond.items))
    return cond


def _flat(cond):
    """`all` inside `all` (a shared condition's own `all`) read as one `all`."""
    from diagnoser.rulespec.model import Condition
    items = []
    for c in cond.items:
        c = _flat(c)
        items += list(c.items) if cond.kind == "all" and c.kind == "all" else [c]
    return Condition(kind=cond.kind, fact=cond.fact, op=cond.op, value=cond.value, param=cond.param,
                     finding=cond.finding, items=tuple(items))


def test_shipped_training_and_inference_rules_write_a_shared_mechanism_once():
    """A training and an inference rule testing the same thing (beyond the workload_kind guard)
    use one shared condition, so their thresholds cannot drift apart."""
    from diagnoser.pipeline import load_pack
    rules = load_pack().rules
    train = [r for r in rules.values() if r.tree == "train-slow"]
    infer = [r for r in rules.values() if r.tree == "inference-slow"]
    shared = {c for r in rules.values() for c in r.extra.get("conditions", ())}
    assert len(shared) >= 5, "the shipped trees share their common mechanisms"
    for t in train:
        for i in infer:
            if (t.path, t.line) == (i.path, i.line):
                continue  # one definition with ids: {training, inference}: written once by construction
            same = _flat(_without_workload_guard(t.when)) == _flat(_without_workload_guard(i.when))
            if same and t.params == i.params:
                assert set(t.extra.get("conditions", ())) & set(i.extra.get("conditions", ())), \
                    f"{t.id} and {i.id} test the same thing: move it to rules/shared.yaml as one condition"
    for name in shared:
        trees = {r.tree for r in rules.values() if name in r.extra.get("conditions", ())}
        assert {"train-slow", "inference-slow"} <= trees, name
