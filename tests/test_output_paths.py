"""Where `-o` writes: the format comes from a known extension (else an error naming the formats, before
any input is read), and the folder must exist (a missing one is an error, never created). Real fixture."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from diagnoser.cli import cli

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOST_SYNC_TRACE = FIX / "torch" / "host_sync.pt.trace.json.gz"
BEFORE = FIX / "torch" / "m_train_convnet_fp32.pt.trace.json.gz"
AFTER = FIX / "torch" / "m_train_convnet_bf16.pt.trace.json.gz"


def _one_error_line(result) -> str:
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith("diagnose: error: -o ") and "Traceback" not in result.output
    return lines[0]


def test_unknown_extension_is_an_error_naming_the_formats(tmp_path):
    for name in ("report.pdf", "report"):
        line = _one_error_line(CliRunner().invoke(cli, [str(HOST_SYNC_TRACE), "-o", str(tmp_path / name)]))
        assert "names no report format" in line and ".md" in line and ".json" in line and ".html" in line
        assert ".xml (junit)" in line and "--format" in line
    assert list(tmp_path.iterdir()) == [], "nothing written"


def test_an_explicit_format_may_go_to_any_file_name(tmp_path):
    out = tmp_path / "report.txt"
    result = CliRunner().invoke(cli, [str(HOST_SYNC_TRACE), "--format", "md", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("# diagnoser report")


def test_a_missing_folder_is_an_error_and_is_not_created(tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "r.html"
    line = _one_error_line(CliRunner().invoke(cli, [str(HOST_SYNC_TRACE), "-o", str(target)]))
    assert f"no folder {tmp_path / 'no' / 'such' / 'dir'}" in line
    assert list(tmp_path.iterdir()) == []


def test_compare_output_paths_follow_the_same_rules(tmp_path):
    args = ["compare", str(BEFORE), "--to", str(AFTER), "-o"]
    line = _one_error_line(CliRunner().invoke(cli, args + [str(tmp_path / "c.pdf")]))
    assert ".html (html)" in line and "junit" not in line  # compare writes md, json, html
    _one_error_line(CliRunner().invoke(cli, args + [str(tmp_path / "missing" / "c.md")]))
    assert list(tmp_path.iterdir()) == []


def test_playbook_handbook_into_a_missing_folder_is_an_error(tmp_path):
    _one_error_line(CliRunner().invoke(cli, ["playbook", "-o", str(tmp_path / "missing" / "playbooks.html")]))
    assert list(tmp_path.iterdir()) == []
