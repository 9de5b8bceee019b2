"""The `diagnose` command as users run it: real fixtures in, one-line errors for bad input."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from diagnoser.cli import cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOST_SYNC_TRACE = FIX / "torch" / "host_sync.pt.trace.json.gz"

REPORT_SCHEMA = {
    "type": "object",
    "required": ["schema", "inputs", "findings", "not_evaluated"],
    "properties": {
        "schema": {"const": "diagnoser.report/1"},
        "inputs": {"type": "array", "items": {"type": "object", "required": ["path", "kind"]}},
        "findings": {"type": "array", "items": {
            "type": "object",
            "required": ["rule", "category", "tree", "severity", "title", "message", "evidence",
                         "estimated_gain", "subject", "fix", "verify"],
            "properties": {
                "severity": {"enum": ["critical", "warning", "info"]},
                "estimated_gain": {"type": "number", "minimum": 0, "maximum": 1},
                "evidence": {"type": "object"},
                "subject": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["kind", "id", "name"]}]},
            },
        }},
        "not_evaluated": {"type": "array", "items": {"type": "object", "required": ["rule", "missing"]}},
    },
}


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _bad_inputs(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    truncated = tmp_path / "trace.json.gz"
    data = HOST_SYNC_TRACE.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    nested = tmp_path / "nested.json"  # synthetic hostile JSON: deep nesting
    nested.write_bytes(b'{"traceEvents": [' + b"[" * 100000)
    garbage = tmp_path / "random.bin"
    garbage.write_bytes(os.urandom(4096))
    no_events = tmp_path / "other.json"
    no_events.write_text('{"foo": 1, "bar": [1, 2, 3]}')
    missing = tmp_path / "missing.sqlite"
    return {"empty": empty, "truncated gzip": truncated, "random bytes": garbage,
            "json without traceEvents": no_events, "missing file": missing,
            "deeply nested json": nested}


@pytest.mark.parametrize("case", ["empty", "truncated gzip", "random bytes", "json without traceEvents",
                                  "missing file", "deeply nested json"])
def test_bad_input_is_one_line_exit_1(tmp_path, case):
    path = _bad_inputs(tmp_path)[case]
    out = tmp_path / "report.md"
    result = run(path, "-o", out)
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("diagnose: error: ") and str(path) in lines[0], result.output
    assert "Traceback" not in result.output
    assert not out.exists() and not list(tmp_path.glob(".report.md.*")), "nothing written half-way"


def test_host_sync_trace_json_report_follows_the_contract():
    result = run(HOST_SYNC_TRACE, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["inputs"] == [{"path": str(HOST_SYNC_TRACE), "kind": "torch-trace"}]
    serious = [f for f in report["findings"] if f["severity"] in ("critical", "warning")]
    assert serious and serious[0]["category"] == "host_sync"
    gains = [(f["severity"], f["marginal_gain"]) for f in report["findings"]]
    order = {"critical": 0, "warning": 1, "info": 2}
    assert gains == sorted(gains, key=lambda g: (order[g[0]], -g[1])), \
        "ranked by severity, then the gain not already explained by the findings above"


def test_markdown_report_is_deterministic_and_input_untouched(tmp_path):
    before = hashlib.sha256(HOST_SYNC_TRACE.read_bytes()).hexdigest()
    a, b = run(HOST_SYNC_TRACE), run(HOST_SYNC_TRACE)
    assert a.exit_code == 0 and a.output == b.output
    assert "# diagnoser report" in a.output and "**Fix:**" in a.output and "**Verify:**" in a.output
    assert hashlib.sha256(HOST_SYNC_TRACE.read_bytes()).hexdigest() == before


def test_output_file_written_atomically(tmp_path):
    out = tmp_path / "sub" / "report.json"
    out.parent.mkdir()  # -o never creates folders (tests/test_output_paths.py)
    result = run(HOST_SYNC_TRACE, "--format", "json", "-o", out)
    assert result.exit_code == 0 and result.output == ""
    assert json.loads(out.read_text())["schema"] == "diagnoser.report/1"
    assert [p.name for p in out.parent.iterdir()] == ["report.json"]


def test_fail_on_gates_ci(tmp_path):
    assert run(HOST_SYNC_TRACE, "--fail-on", "warning").exit_code == 3
    healthy = FIX / "torch" / "healthy.pt.trace.json.gz"
    assert run(healthy, "--fail-on", "warning").exit_code == 0


def test_param_override_changes_the_verdict():
    """Raising a threshold past the measured value silences the rule (thresholds are user params)."""
    base = json.loads(run(HOST_SYNC_TRACE, "--format", "json").output)
    first = [f for f in base["findings"] if f["severity"] != "info"][0]["rule"]
    from diagnoser.pipeline import load_pack
    rule = load_pack().rules[first]
    numeric = [k for k, v in rule.params.items() if isinstance(v, (int, float)) and k.startswith("min_")]
    assert numeric, f"{first} has no min_ threshold to raise"
    result = run(HOST_SYNC_TRACE, "--format", "json", "--param", f"{first}.{numeric[0]}=1000000")
    assert first not in {f["rule"] for f in json.loads(result.output)["findings"]}


def test_unknown_param_is_a_one_line_error():
    result = run(HOST_SYNC_TRACE, "--param", "TRAIN001.no_such_param=3")
    assert result.exit_code == 1 and "has no param no_such_param" in result.output


def test_facts_command_and_catalogue():
    result = run("facts", HOST_SYNC_TRACE, "--format", "json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)["facts"]
    assert facts and all({"name", "value", "unit", "source"} <= set(f) for f in facts)
    cat = run("facts", "--catalogue")
    names = {f["name"] for f in facts}
    assert cat.exit_code == 0 and all(n in cat.output for n in names), "every emitted fact is catalogued"


def test_rules_list_and_show():
    listed = run("rules", "list")
    assert listed.exit_code == 0 and "TRAIN001" in listed.output and "KERN" in listed.output and "OOM" in listed.output
    shown = run("rules", "show", "TRAIN001")
    assert shown.exit_code == 0 and "when (compiled)" in shown.output
    assert run("rules", "show", "NOPE999").exit_code == 1
