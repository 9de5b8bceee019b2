"""A user rule pack never goes quiet through a typo or a missing test: an unknown `scope`, an
unknown key in a test case, a rule file without its test file, and `rules test` given a test file
(which tests the rule file beside it). Synthetic packs and cases (run-level facts only), so fast."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.catalogue import catalogue
from diagnoser.cli import cli
from diagnoser.errors import RuleError
from diagnoser.rulespec.loader import load_rule_file
from diagnoser.rulespec.model import SCOPES

RULE = """\
tree: demo
rules:
  - id: DEMO001
    name: gpu-mostly-idle
    title: The GPU is mostly idle (synthetic demo rule)
    category: input_pipeline
    severity: warning
    params: {max_busy: 50}
    when:
      all:
        - {fact: gpu_busy_pct, op: lt, param: max_busy}
    message: "busy {gpu_busy_pct:.0f}%"
    fix: "more workers"
    verify: "busy above {max_busy}%"
"""
CASES = """\
cases:
  - name: synthetic - GPU busy 10%
    facts: {gpu_busy_pct: 10.0}
    fires: [DEMO001]
  - name: synthetic - GPU busy 90%
    facts: {gpu_busy_pct: 90.0}
    silent: [DEMO001]
"""


def _pack(tmp_path: Path, files: dict[str, str]) -> Path:
    pack = tmp_path / "my_rules"
    pack.mkdir()
    for name, text in files.items():
        (pack / name).write_text(text, encoding="utf-8")
    return pack


def _rules_test(*args: str):
    return CliRunner().invoke(cli, ["rules", "test", *map(str, args)])


# ------------------------------------------------------------------ 1. scope is one of the subject kinds

def test_misspelt_scope_is_rejected_with_its_line_and_the_scopes_there_are(tmp_path):
    path = _pack(tmp_path, {"demo.yaml": RULE.replace("    severity: warning\n",
                                                      "    severity: warning\n    scope: kernels\n")}) / "demo.yaml"
    with pytest.raises(RuleError) as e:
        load_rule_file(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:8: "), msg  # the `scope:` line
    assert "`kernels`" in msg and "did you mean `kernel`" in msg and "run, kernel, rank, site" in msg, msg
    result = CliRunner().invoke(cli, ["rules", "validate", str(path)])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and f"{path}:8:" in result.output, result.output


def test_every_valid_scope_loads_and_the_scopes_are_the_subject_kinds_facts_attach_to():
    """A scope no fact attaches to could never be evaluated: the allowed scopes are the catalogue's."""
    assert set(SCOPES) == {spec.subject for spec in catalogue().values()}


@pytest.mark.parametrize("scope", SCOPES)
def test_each_allowed_scope_validates(tmp_path, scope):
    path = _pack(tmp_path, {"demo.yaml": RULE.replace("    severity: warning\n",
                                                      f"    severity: warning\n    scope: {scope}\n")}) / "demo.yaml"
    (rule,) = load_rule_file(path)
    assert rule.scope == scope


# ------------------------------------------------------------------ 2. test cases: known keys only

@pytest.mark.parametrize("mutation, line, words", [
    (("    silent: [DEMO001]\n", "    silent: [DEMO001]\n    fire: [DEMO001]\n"), 8,
     ["case 2 (synthetic - GPU busy 90%): unknown key `fire` (did you mean `fires`?)",
      "known keys: name, input, facts, subjects, fires, silent, first, subject, per_subject"]),
    (("cases:\n", "case_list: []\ncases:\n"), 1, ["unknown key `case_list`", "known keys: cases"]),
    (("    silent: [DEMO001]\n", "    silent: [DEMO01]\n"), 7, ["`DEMO01` names no rule in force"]),
    (("    fires: [DEMO001]\n", "    fires: DEMO001\n"), 4, ["`fires` is a list of rule ids"]),
    (("    facts: {gpu_busy_pct: 90.0}\n    silent: [DEMO001]\n", "    facts: {gpu_busy_pct: 90.0}\n"), 5,
     ["checks nothing; add fires, silent, first, subject or per_subject"]),
    (("    facts: {gpu_busy_pct: 10.0}\n",
      "    facts: {gpu_busy_pct: 10.0}\n    subjects: [{kind: kernels, id: '1', facts: {}}]\n"), 4,
     ["unknown subject kind `kernels` (did you mean `kernel`?)"]),
    (("    facts: {gpu_busy_pct: 10.0}\n", "    facts: {gpu_busy_pct: 10.0}\n    input: [x.gz]\n"), 4,
     ["`input` (real files) and `facts`/`subjects` (synthetic) exclude each other"]),
])
def test_test_case_typo_fails_with_its_line_and_the_known_keys(tmp_path, mutation, line, words):
    cases = CASES.replace(*mutation)
    assert cases != CASES
    pack = _pack(tmp_path, {"demo.yaml": RULE, "demo.test.yaml": cases})
    result = _rules_test(pack)
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    assert f"{pack / 'demo.test.yaml'}:{line}: " in result.output, result.output
    for w in words:
        assert w in result.output, result.output


def test_well_formed_pack_passes(tmp_path):
    """The control of the typos above: the pack they mutate passes."""
    result = _rules_test(_pack(tmp_path, {"demo.yaml": RULE, "demo.test.yaml": CASES}))
    assert result.exit_code == 0 and "2 passed, 0 failed" in result.output, result.output


# ------------------------------------------------------------------ 3. every rule file has its tests

def test_rule_file_without_a_test_file_fails_the_folder_naming_the_file_and_its_rules(tmp_path):
    extra = RULE.replace("DEMO001", "DEMO002").replace("gpu-mostly-idle", "gpu-idle-again")
    pack = _pack(tmp_path, {"demo.yaml": RULE, "demo.test.yaml": CASES, "extra.yaml": extra})
    result = _rules_test(pack)
    assert result.exit_code == 1, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("COVERAGE")]
    assert str(pack / "extra.yaml") in line and "DEMO002" in line and "extra.test.yaml" in line, result.output
    assert "2 passed, 1 failed" in result.output, result.output


def test_rule_of_a_tested_file_without_a_silent_case_fails(tmp_path):
    pack = _pack(tmp_path, {"demo.yaml": RULE, "demo.test.yaml": CASES.split("  - name: synthetic - GPU busy 90%")[0]})
    result = _rules_test(pack)
    assert result.exit_code == 1 and "COVERAGE  DEMO001" in result.output and "stays silent" in result.output, result.output


SHARED = "conditions:\n  mostly-idle:\n    params: {max_busy: 50}\n    when: {all: [{fact: gpu_busy_pct, op: lt, param: max_busy}]}\n"
RULE_USING_SHARED = RULE.replace("    params: {max_busy: 50}\n", "").replace(
    "        - {fact: gpu_busy_pct, op: lt, param: max_busy}\n", "        - {condition: mostly-idle}\n")


def test_conditions_only_file_needs_no_test_file(tmp_path):
    pack = _pack(tmp_path, {"shared.yaml": SHARED, "demo.yaml": RULE_USING_SHARED, "demo.test.yaml": CASES})
    result = _rules_test(pack)
    assert result.exit_code == 0 and "2 passed, 0 failed" in result.output, result.output


# ------------------------------------------------------------------ 4. a test file tests the rule file beside it

def test_rules_test_on_a_test_file_loads_the_rule_file_beside_it(tmp_path):
    pack = _pack(tmp_path, {"demo.yaml": RULE, "demo.test.yaml": CASES})
    result = _rules_test(pack / "demo.test.yaml")
    assert result.exit_code == 0 and "2 passed, 0 failed" in result.output, result.output


def test_rules_test_on_a_test_file_checks_its_rules_coverage(tmp_path):
    pack = _pack(tmp_path, {"demo.yaml": RULE, "demo.test.yaml": CASES.split("  - name: synthetic - GPU busy 90%")[0]})
    result = _rules_test(pack / "demo.test.yaml")
    assert result.exit_code == 1 and "COVERAGE  DEMO001" in result.output, result.output


def test_rules_test_on_a_test_file_without_its_rule_file_says_so(tmp_path):
    pack = _pack(tmp_path, {"demo.test.yaml": CASES})
    result = _rules_test(pack / "demo.test.yaml")
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "demo.test.yaml" in result.output and "no rule file demo.yaml beside it" in result.output, result.output


def test_a_folder_and_a_test_file_in_it_load_the_rules_once(tmp_path):
    pack = _pack(tmp_path, {"demo.yaml": RULE, "demo.test.yaml": CASES})
    result = _rules_test(pack, pack / "demo.test.yaml")
    assert result.exit_code == 0 and "4 passed, 0 failed" in result.output, result.output


def test_rules_test_on_a_test_file_gives_its_rule_file_the_conditions_of_its_folder(tmp_path):
    """A rule file loaded alone (beside its test file, or with --rules FILE) may use a shared
    condition of another rule file in its folder."""
    pack = _pack(tmp_path, {"shared.yaml": SHARED, "demo.yaml": RULE_USING_SHARED, "demo.test.yaml": CASES})
    result = _rules_test(pack / "demo.test.yaml")
    assert result.exit_code == 0 and "2 passed, 0 failed" in result.output, result.output
    result = CliRunner().invoke(cli, ["rules", "validate", str(pack / "demo.yaml")])
    assert result.exit_code == 0, result.output
