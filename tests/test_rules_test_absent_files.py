"""`diagnose rules test` where a case's files are absent (a fresh clone without ../shared): the case
is skipped, and a rule whose only firing (or silent) case is skipped is neither passed nor failed;
it is named as unchecked here (docs/rules.md, Test cases). Synthetic packs; the absent path names a
corpus file that exists nowhere."""
from __future__ import annotations

from click.testing import CliRunner

from diagnoser.cli import cli
from test_rule_pack_checks import RULE  # the same synthetic demo rule

ABSENT = "../shared/corpus/nsys/absent_for_this_test.sqlite.gz"
FIRES_ON_ABSENT_FILE = f"""\
  - name: real - a corpus file this checkout lacks
    input: {ABSENT}
    fires: [DEMO001]
"""
SILENT_SYNTHETIC = """\
  - name: synthetic - GPU busy 90%
    facts: {gpu_busy_pct: 90.0}
    silent: [DEMO001]
"""


def _rules_test(tmp_path, cases: str):
    pack = tmp_path / "my_rules"
    pack.mkdir()
    (pack / "demo.yaml").write_text(RULE, encoding="utf-8")
    (pack / "demo.test.yaml").write_text("cases:\n" + cases, encoding="utf-8")
    return CliRunner().invoke(cli, ["rules", "test", str(pack)])


def test_rule_whose_only_firing_case_needs_an_absent_corpus_file_is_skipped_not_failed(tmp_path):
    result = _rules_test(tmp_path, FIRES_ON_ABSENT_FILE + SILENT_SYNTHETIC)
    assert result.exit_code == 0, result.output
    assert f"SKIP  demo.test.yaml: real - a corpus file this checkout lacks  (needs {ABSENT})" in result.output
    assert "SKIP  coverage: DEMO001" in result.output and "where it fires was skipped here" in result.output
    assert "COVERAGE" not in result.output
    assert result.output.rstrip().endswith("1 passed, 0 failed, 1 skipped")


def test_a_skipped_case_does_not_cover_what_no_case_checks(tmp_path):
    """Skipped cases excuse only what they would check: no silent case at all still fails."""
    result = _rules_test(tmp_path, FIRES_ON_ABSENT_FILE)
    assert result.exit_code == 1, result.output
    assert "COVERAGE  DEMO001" in result.output and "no passing case where it stays silent" in result.output
    assert "SKIP  coverage: DEMO001" in result.output and "where it fires" in result.output
