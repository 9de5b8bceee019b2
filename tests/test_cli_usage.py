"""The command line as a newcomer meets it: help, usage errors, output files, report size and
settings, terminal rendering, facts blocks and the playbook command (real fixtures)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli, main

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOST_SYNC_TRACE = FIX / "torch" / "host_sync.pt.trace.json.gz"
HOST_SYNC_NSYS = FIX / "nsys" / "host_sync.sqlite.gz"

# a user rule that replaces the shipped TRAIN001 (input pipeline) with a stricter version
REPLACEMENT = """\
tree: train-slow
rules:
  - id: TRAIN001
    name: gpu-starved-by-input-pipeline
    title: My stricter input-pipeline rule
    category: input_pipeline
    severity: warning
    params: {max_busy: 10}
    when:
      all:
        - {fact: gpu_busy_pct, op: lt, param: max_busy}
    message: "busy {gpu_busy_pct:.0f}%"
    fix: "more workers"
    verify: "busy above {max_busy}%"
"""


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_top_level_help_shows_the_main_usage_and_its_options():
    result = run("--help")
    assert result.exit_code == 0
    text = result.output
    assert text.startswith("Usage: diagnose [OPTIONS] FILE...")
    for option in ("--format", "-o, --output", "--fail-on", "--rules", "--param", "--set", "--top", "--min-severity"):
        assert option in text, option
    for command in ("facts", "playbook", "rules"):
        assert f"\n  {command} " in text, command
    commands = text[text.index("\nCommands:"):].splitlines()
    assert not [ln for ln in commands if ln.startswith("  run ")] and "diagnose run " not in text
    assert run(HOST_SYNC_TRACE, "--help").output == text, "`diagnose FILE --help` is the same help"


def test_usage_error_is_one_line_naming_no_hidden_command(capsys):
    with pytest.raises(SystemExit) as e:
        main([str(HOST_SYNC_TRACE), "--no-such-option"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.count("\n") == 1 and err.startswith("diagnose: error: ") and "--no-such-option" in err
    assert "diagnose run" not in err and "`diagnose --help`" in err


def test_output_format_follows_the_file_extension(tmp_path):
    for name, check in (("r.html", lambda t: t.startswith("<!DOCTYPE html>")),
                        ("r.json", lambda t: json.loads(t)["schema"] == "diagnoser.report/1"),
                        ("r.md", lambda t: t.startswith("# diagnoser report"))):
        result = run(HOST_SYNC_TRACE, "-o", tmp_path / name)
        assert result.exit_code == 0, result.output
        assert check((tmp_path / name).read_text()), name


def test_output_into_a_directory_or_unwritable_place_is_one_line_exit_1(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for target in (tmp_path, blocker / "report.md"):
        result = run(HOST_SYNC_TRACE, "-o", target)
        assert result.exit_code == 1, result.output
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("diagnose: error: -o "), result.output
        assert "Traceback" not in result.output and "Error:" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"], "no temp file left"


def test_piped_report_is_markdown_and_terminal_format_is_drawn_for_a_terminal():
    piped = run(HOST_SYNC_TRACE)  # CliRunner's stdout is not a TTY
    assert piped.output.startswith("# diagnoser report") and "\x1b[" not in piped.output
    term = run(HOST_SYNC_TRACE, "--format", "terminal")
    assert term.exit_code == 0, term.output
    assert "\x1b[" in term.output and "CRITICAL" in term.output and "TRAIN002" in term.output
    assert "|---|" not in term.output and "## " not in term.output


def test_min_severity_and_top_keep_the_report_short():
    full = json.loads(run(HOST_SYNC_TRACE, "--format", "json").output)
    assert len(full["findings"]) >= 2
    only_critical = json.loads(run(HOST_SYNC_TRACE, "--format", "json", "--min-severity", "critical").output)
    assert {f["severity"] for f in only_critical["findings"]} == {"critical"}
    assert only_critical["left_out"]["findings"] == len(full["findings"]) - len(only_critical["findings"])
    md = run(HOST_SYNC_TRACE, "--top", "1").output
    assert md.count("\n## 1. ") == 1 and "\n## 2. " not in md
    assert f"## {len(full['findings']) - 1} more finding" in md and f"`{full['findings'][1]['rule']}`" in md


def test_params_and_rule_packs_are_recorded_in_the_report(tmp_path):
    pack = tmp_path / "my_rules"
    pack.mkdir()
    (pack / "strict.yaml").write_text(REPLACEMENT)
    args = (HOST_SYNC_TRACE, "--rules", pack, "--param", "TRAIN002.min_syncs_per_step=3")
    made = json.loads(run(*args, "--format", "json").output)["settings"]
    assert made["params"] == [{"rule": "TRAIN002", "param": "min_syncs_per_step", "value": 3, "default": 4}]
    assert made["rule_packs"] == [{"path": str(pack), "rules": ["TRAIN001"], "replaces": ["TRAIN001"]}]
    md = run(*args).output
    footer = md[md.rindex("\n---\n"):]
    assert "--param TRAIN002.min_syncs_per_step=3 (default 4)" in footer
    assert f"rule pack `{pack}`: replaces shipped TRAIN001" in footer
    plain = run(HOST_SYNC_TRACE).output
    assert "with the shipped rules, default thresholds and settings" in plain[plain.rindex("\n---\n"):]


def test_set_changes_an_analysis_setting_and_the_report_says_so():
    result = run(HOST_SYNC_TRACE, "--format", "json", "--set", "findings.warning_min_gain_pct=90", "--fail-on", "warning")
    assert result.exit_code == 0, "every finding is under 90% of step time: all info, the gate stays open"
    report = json.loads(result.output)
    assert {f["severity"] for f in report["findings"]} == {"info"}
    assert {f["rule_severity"] for f in report["findings"]} >= {"critical"}
    assert report["settings"]["analysis_settings"] == [
        {"name": "findings.warning_min_gain_pct", "value": 90.0, "default": 1.0, "unit": "%"}]
    bad = run(HOST_SYNC_TRACE, "--set", "findings.warning_min_gain=2")
    assert bad.exit_code == 1 and bad.output.count("\n") == 1 and "did you mean findings.warning_min_gain_pct" in bad.output
    catalogue = run("facts", "--catalogue").output
    assert "findings.warning_min_gain_pct" in catalogue


def test_facts_of_two_inputs_come_in_one_block_per_input():
    result = run("facts", HOST_SYNC_TRACE, HOST_SYNC_NSYS)
    assert result.exit_code == 0, result.output
    headers = [ln for ln in result.output.splitlines() if ln.startswith("== ")]
    assert len(headers) == 2
    assert str(HOST_SYNC_TRACE) in headers[0] and "PyTorch" in headers[0]
    assert str(HOST_SYNC_NSYS) in headers[1] and "Nsight Systems" in headers[1]
    data = json.loads(run("facts", HOST_SYNC_TRACE, HOST_SYNC_NSYS, "--format", "json").output)
    assert {tuple(f["inputs"]) for f in data["facts"]} == {(str(HOST_SYNC_TRACE),), (str(HOST_SYNC_NSYS),)}


def test_playbook_command_prints_one_rules_section_and_reports_point_to_it():
    result = run("playbook", "TRAIN002")
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.startswith("# TRAIN002 host-sync-in-step-loop")
    for part in ("## Meaning", "## Evidence", "## Fix", "## Verify", "## When it fires"):
        assert part in text, part
    assert run("playbook", "NOPE001").exit_code == 1
    md = run(HOST_SYNC_TRACE).output
    assert "Playbook: `diagnose playbook TRAIN002`" in md and "playbooks/" not in md


def test_rule_pack_can_set_an_analysis_setting_and_the_report_records_it(tmp_path):
    pack = tmp_path / "strict.yaml"
    pack.write_text("settings: {findings.warning_min_gain_pct: 90}\n" + REPLACEMENT)
    report = json.loads(run(HOST_SYNC_TRACE, "--rules", pack, "--format", "json").output)
    assert {f["severity"] for f in report["findings"]} == {"info"}
    assert report["settings"]["analysis_settings"][0]["name"] == "findings.warning_min_gain_pct"
    override = json.loads(run(HOST_SYNC_TRACE, "--rules", pack, "--set", "findings.warning_min_gain_pct=1",
                              "--format", "json").output)
    assert "critical" in {f["severity"] for f in override["findings"]}, "--set wins over the pack"
    bad = tmp_path / "bad.yaml"
    bad.write_text("settings: {findings.no_such_setting: 1}\n" + REPLACEMENT)
    result = run(HOST_SYNC_TRACE, "--rules", bad)
    assert result.exit_code == 1 and f"{bad}:1" in result.output and "unknown setting findings.no_such_setting" in result.output


def test_mistyped_command_suggests_the_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["rule", "list"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "did you mean `diagnose rules`?" in err


def test_every_setting_the_code_registers_is_listed_and_settable():
    import re
    from diagnoser import settings
    package = Path(settings.__file__).parent
    declared = {m for p in package.rglob("*.py") if p.name != "settings.py"
                for m in re.findall(r'settings\.register\(\s*"([a-z0-9_.]+)"', p.read_text(encoding="utf-8"))}
    # in a fresh interpreter: catalogue.all_settings must import every module that registers one itself
    listed = subprocess.run([sys.executable, "-c", "from diagnoser.catalogue import all_settings; print(*all_settings())"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert declared and declared <= set(listed), sorted(declared - set(listed))
    catalogue = run("facts", "--catalogue").output
    assert all(name in catalogue for name in declared)
