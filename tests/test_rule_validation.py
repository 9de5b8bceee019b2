"""Rule files with mistakes get one line: file, line, and what to add or change."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.engine.durable_backend import lower, ruleset_definition
from diagnoser.errors import RuleError
from diagnoser.rulespec.compile import compile_rule
from diagnoser.rulespec.loader import build_pack, load_rule_file

HERE = Path(__file__).resolve().parent
GOOD = """\
tree: demo
rules:
  - id: DEMO001
    name: low-busy
    title: GPU mostly idle
    category: input_pipeline
    severity: critical
    params: {max_busy: 50}
    when:
      all:
        - {fact: gpu_busy_pct, op: lt, param: max_busy}
    message: "busy {gpu_busy_pct:.0f}%"
    fix: "more workers"
    verify: "busy above {max_busy}%"
"""


def _write(tmp_path, text, name="r.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("mutation, line, words", [
    (("op: lt", "op: lessthan"), 11, "`lessthan` is not allowed"),
    (("  - id: DEMO001\n", "  - nme: x\n"), 3, "missing `id`"),
    (("    title: GPU", "   title: GPU"), 5, "check the indentation"),
    (("param: max_busy}", "value: 50}"), 11, "needs a named threshold"),
    (("severity: critical", "severity: high"), 7, "use one of: critical, warning, info"),
    (("param: max_busy}", "param: max_bsy}"), 11, "param `max_bsy` is not defined"),
    (("{gpu_busy_pct:.0f}", "{gpu_busy:.0f}"), 12, "unknown name(s) gpu_busy"),
])
def test_rule_file_typo_gets_file_line_and_advice(tmp_path, mutation, line, words):
    p = _write(tmp_path, GOOD.replace(*mutation))
    with pytest.raises(RuleError) as e:
        load_rule_file(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: "), msg
    assert words in msg and "\n" not in msg


def test_unknown_fact_suggests_the_catalogue_name(tmp_path):
    p = _write(tmp_path, GOOD.replace("fact: gpu_busy_pct", "fact: gpu_busy_pc"))
    with pytest.raises(RuleError) as e:
        load_rule_file(p, known_facts={"gpu_busy_pct": None})
    assert "unknown fact `gpu_busy_pc`" in str(e.value) and "did you mean `gpu_busy_pct`" in str(e.value)


def test_finding_cycle_is_rejected(tmp_path):
    text = GOOD + GOOD.split("rules:\n", 1)[1].replace("DEMO001", "DEMO002")
    text = text.replace("        - {fact: gpu_busy_pct, op: lt, param: max_busy}\n", "        - {finding: DEMO002}\n", 1)
    text = text.replace("    when:\n      all:\n        - {fact: gpu_busy_pct, op: lt, param: max_busy}\n    message: \"busy {gpu_busy_pct:.0f}%\"\n    fix: \"more workers\"\n    verify: \"busy above {max_busy}%\"\n",
                        "    when:\n      all:\n        - {finding: DEMO001}\n    message: \"x\"\n    fix: \"y\"\n    verify: \"z\"\n")
    p = _write(tmp_path, text)
    with pytest.raises(RuleError, match="cycle"):
        build_pack(None, [p])


def test_validate_command_exits_nonzero_with_one_line(tmp_path):
    p = _write(tmp_path, GOOD.replace("op: lt", "op: lessthan"))
    result = CliRunner().invoke(cli, ["rules", "validate", str(p)])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and f"{p}:11" in result.output
    ok = CliRunner().invoke(cli, ["rules", "validate", str(_write(tmp_path, GOOD, "good.yaml"))])
    assert ok.exit_code == 0, ok.output


def test_param_override_reaches_the_compiled_rule(tmp_path):
    p = _write(tmp_path, GOOD)
    pack = build_pack(None, [p], ["DEMO001.max_busy=65"])
    assert compile_rule(pack.rules["DEMO001"]).predicate == ("and", (("cmp", "gpu_busy_pct", "lt", 65),))


def test_user_rule_with_shipped_id_replaces_it(tmp_path):
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    _write(shipped, GOOD, "a.yaml")
    user = _write(tmp_path, GOOD.replace("GPU mostly idle", "My own version"), "user.yaml")
    pack = build_pack(shipped, [user])
    assert pack.rules["DEMO001"].title == "My own version" and not pack.rules["DEMO001"].shipped


def test_compiled_synthetic_pack_matches_golden():
    """Golden test: the engine-neutral tree and the durable_rules JSON of the synthetic pack are pinned."""
    pack = build_pack(None, [HERE / "data" / "synthetic_rules.yaml"])
    compiled = [compile_rule(r) for r in pack.ordered()]
    got = {
        "predicates": {c.rule_id: json.loads(json.dumps(c.predicate)) for c in compiled},
        "durable": {c.rule_id: lower(c.predicate) for c in compiled},
        "ruleset": json.loads(json.dumps(ruleset_definition(compiled[:1]))),
    }
    golden = HERE / "data" / "synthetic_rules.compiled.json"
    if not golden.exists():  # first run writes it; review it, then it pins the compiler
        golden.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(golden.read_text())


def test_optional_template_segment_drops_when_a_fact_is_absent():
    from diagnoser.rulespec.expr import render_template
    tpl = "busy {b:.0f}%.[[ Nsight Compute: {v} ({s:.0f}% est.).]] done"
    assert render_template(tpl, {"b": 12.3, "v": "X", "s": 40.0}) == "busy 12%. Nsight Compute: X (40% est.). done"
    assert render_template(tpl, {"b": 12.3, "v": "X"}) == "busy 12%. done"
    assert render_template("{missing}", {}) == "n/a"
