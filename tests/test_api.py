"""`import diagnoser` as a notebook uses it: diagnose a real fixture, get DataFrames and HTML, compare
two runs; the same reports the command writes, byte for byte, and the same errors."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import diagnoser
from diagnoser.cli import cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOST_SYNC_TRACE = FIX / "torch" / "host_sync.pt.trace.json.gz"
BEFORE = FIX / "torch" / "m_train_convnet_fp32.pt.trace.json.gz"
AFTER = FIX / "torch" / "m_train_convnet_bf16.pt.trace.json.gz"


@pytest.fixture(scope="module")
def host_sync():
    return diagnoser.diagnose(HOST_SYNC_TRACE)


def _cli(*args) -> str:
    result = CliRunner().invoke(cli, [*map(str, args)])
    assert result.exit_code in (0, 3), result.output
    return result.output


def test_notebook_cells_in_a_fresh_interpreter(tmp_path):
    """The cells of docs/api.md's example, run from another directory by a fresh Python."""
    cells = textwrap.dedent(f"""
        import diagnoser
        report = diagnoser.diagnose({str(HOST_SYNC_TRACE)!r})
        findings = report.to_frame()
        facts = report.to_frame("facts")
        page = report._repr_html_()
        assert type(findings).__name__ == "DataFrame" and type(facts).__name__ == "DataFrame"
        print(findings.loc[0, "rule"], findings.loc[0, "severity"], len(facts) > 50, page.startswith("<iframe"))
    """)
    out = subprocess.run([sys.executable, "-c", cells], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["TRAIN002", "critical", "True", "True"], out.stderr


def test_findings_and_facts_frames(host_sync):
    findings = host_sync.to_frame()
    assert isinstance(findings, pd.DataFrame)
    assert list(findings["rule"][:2]) == ["TRAIN002", "TRAIN004"]
    assert findings.loc[0, "evidence"]["syncs_per_step"] == pytest.approx(18.0)
    assert set(findings["severity"]) <= {"critical", "warning", "info"}
    facts = host_sync.to_frame("facts")
    row = facts[(facts["name"] == "syncs_per_step") & facts["subject_kind"].isna()]
    assert len(row) == 1 and row["value"].iloc[0] == pytest.approx(18.0)
    assert len(facts) == len(host_sync.facts) and "source" in facts.columns
    with pytest.raises(diagnoser.DiagnoserError, match="choose 'findings' or 'facts'"):
        host_sync.to_frame("kernels")


def test_reports_are_the_commands_byte_for_byte(host_sync):
    assert host_sync.to_json() == _cli(HOST_SYNC_TRACE, "--format", "json")
    assert host_sync.to_markdown() == _cli(HOST_SYNC_TRACE, "--format", "md")
    assert host_sync.to_html() == _cli(HOST_SYNC_TRACE, "--format", "html")
    assert host_sync.to_junit() == _cli(HOST_SYNC_TRACE, "--format", "junit")
    assert json.loads(host_sync.to_json())["schema"] == "diagnoser.report/1"


def test_repr_html_shows_the_html_report_in_a_frame(host_sync):
    page = host_sync._repr_html_()
    assert page.startswith("<iframe srcdoc=\"&lt;!DOCTYPE html&gt;") and page.endswith("</iframe>")
    assert "TRAIN002" in page and "<script" not in page.split("srcdoc=")[1].split('"')[1]  # all of it escaped
    assert "TRAIN002" in repr(host_sync) and "1 critical" in repr(host_sync)


def test_report_holds_findings_facts_notes_and_runs(host_sync):
    assert host_sync.findings[0].rule == "TRAIN002"
    assert host_sync.runs == [{"run": 1, "inputs": [str(HOST_SYNC_TRACE)]}]
    assert isinstance(host_sync.notes, list) and host_sync.facts
    assert host_sync.failed("critical") and host_sync.failed("warning")


def test_params_and_settings_as_mappings_or_command_line_strings():
    as_map = diagnoser.diagnose(HOST_SYNC_TRACE, params={"TRAIN002.min_syncs_per_step": 100})
    as_cli = diagnoser.diagnose(HOST_SYNC_TRACE, params=["TRAIN002.min_syncs_per_step=100"])
    assert "TRAIN002" not in {f.rule for f in as_map.findings}
    assert as_map.to_json() == as_cli.to_json() == _cli(HOST_SYNC_TRACE, "--format", "json",
                                                        "--param", "TRAIN002.min_syncs_per_step=100")
    raised = diagnoser.diagnose(HOST_SYNC_TRACE, settings={"findings.warning_min_gain_pct": 80})
    assert raised.settings["settings"] and {f.severity for f in raised.findings} == {"info"}


def test_errors_are_the_commands_errors(tmp_path):
    missing = tmp_path / "absent.pt.trace.json.gz"
    with pytest.raises(diagnoser.InputError) as e:
        diagnoser.diagnose(missing)
    line = CliRunner().invoke(cli, [str(missing)]).output.strip()
    assert line == f"diagnose: error: {e.value}"
    with pytest.raises(diagnoser.DiagnoserError, match="rule TRAIN002 has no param nope"):
        diagnoser.diagnose(HOST_SYNC_TRACE, params={"TRAIN002.nope": 1})
    with pytest.raises(diagnoser.DiagnoserError, match="unknown setting"):
        diagnoser.diagnose(HOST_SYNC_TRACE, settings={"findings.no_such_setting": 1})


def test_compare_two_real_runs():
    c = diagnoser.compare(BEFORE, AFTER)
    frame = c.to_frame()
    assert list(frame.columns[:2]) == ["verdict", "rule"]
    assert dict(zip(frame["rule"], frame["verdict"]))["TRAIN008"] == "fixed"
    assert c.summary["fixed"] >= 1 and c.runs["before"]["inputs"][0]["path"] == str(BEFORE)
    heads = c.to_frame("headlines")
    assert not heads.empty and not c.to_frame("facts").empty
    assert c.to_json(5) == _cli("compare", BEFORE, "--to", AFTER, "--format", "json", "--fail-on-regression", "5")
    assert c.to_markdown() == _cli("compare", BEFORE, "--to", AFTER)
    assert c.to_html().startswith("<!DOCTYPE html>") and c._repr_html_().startswith("<iframe")
    assert c.gate(5) == [] and "1 fixed" in repr(c)


def test_diagnoser_compare_is_the_library_call_whatever_was_imported_first():
    """The comparison's package is diagnoser.comparison, so importing it leaves `diagnoser.compare` the
    library call (no package standing in for the function)."""
    import diagnoser.comparison.core  # noqa: F401
    assert diagnoser.compare is diagnoser.api.compare and diagnoser.diagnose is diagnoser.api.diagnose


def test_the_python_blocks_of_docs_api_run_and_print_what_the_page_shows(capsys, monkeypatch):
    """docs/api.md: every ```python block runs, in order, from the repository root; the error example
    prints the line the page shows."""
    import re
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(root)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), scope)  # noqa: S102 - the documented example
    assert "rule TRAIN002 has no param nope" in capsys.readouterr().out
    assert scope["findings"].loc[0, "rule"] == "TRAIN002"
    assert "TRAIN002" not in {f.rule for f in scope["strict"].findings}
    assert dict(zip(scope["c"].to_frame()["rule"], scope["c"].to_frame()["verdict"]))["TRAIN008"] == "fixed"


def test_docs_api_page_shows_what_its_code_prints(capsys, monkeypatch):
    """docs/api.md is a tested page: each ```python block is run and what it shows (the value of its last
    line, or what it prints) is the ```text block after it, character for character."""
    import ast
    import contextlib
    import io
    import re
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "api.md").read_text(encoding="utf-8")
    parts = re.findall(r"```(python|text)\n(.*?)```", page, flags=re.S)
    monkeypatch.chdir(root)
    scope: dict = {}
    checked = 0
    for i, (lang, code) in enumerate(parts):
        if lang != "python":
            continue
        tree = ast.parse(code)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(tree, "docs/api.md", "exec"), scope)  # noqa: S102 - the documented example
            value = eval(compile(ast.Expression(last.value), "docs/api.md", "eval"), scope) if last else None  # noqa: S307
        shown = out.getvalue() + ("" if value is None else repr(value) + "\n")
        following = parts[i + 1] if i + 1 < len(parts) else None
        if following and following[0] == "text":
            assert shown == following[1], f"docs/api.md block {i}: the page shows\n{following[1]}\nthe code gives\n{shown}"
            checked += 1
    assert checked >= 5


def test_two_diagnoses_with_different_settings_run_at_once_in_two_threads():
    """A notebook's two diagnoses side by side (diagnoser.run_context): each runs under its own settings,
    never the other's, while both run at once in one process; each report is the one it makes alone."""
    import threading
    import time
    runs = {"default": None, "narrow_gaps": {"timeline.launch_gap_max_ns": 1}}
    alone = {name: diagnoser.diagnose(HOST_SYNC_TRACE, settings=s).to_json() for name, s in runs.items()}
    assert alone["default"] != alone["narrow_gaps"]
    start, got, spans, errors = threading.Barrier(len(runs)), {}, {}, []

    def diagnose_in_thread(name):
        try:
            start.wait()
            t0 = time.perf_counter()
            got[name] = diagnoser.diagnose(HOST_SYNC_TRACE, settings=runs[name])
            spans[name] = (t0, time.perf_counter())
        except Exception as e:  # noqa: BLE001 - shown by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=diagnose_in_thread, args=(name,)) for name in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    (a0, a1), (b0, b1) = spans.values()
    assert a0 < b1 and b0 < a1  # the two diagnoses overlapped in time
    assert {name: r.to_json() for name, r in got.items()} == alone
    assert got["default"].settings["settings"] == []
    assert [s["name"] for s in got["narrow_gaps"].settings["settings"]] == ["timeline.launch_gap_max_ns"]
    from diagnoser import settings
    assert settings.current_overrides() == {}  # nothing left behind in this thread
