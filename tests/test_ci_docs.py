"""docs/ci.md: the GitHub Actions and GitLab CI jobs parse, and their `diagnose` commands, run as the
jobs run them (in a folder holding `traces/`), write an HTML report and a JUnit report that fails on
the real host-sync trace's warning and critical findings (exit 3)."""
from __future__ import annotations

import re
import shlex
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from diagnoser.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
TRACE = ROOT / "fixtures" / "torch" / "host_sync.pt.trace.json.gz"


def _jobs() -> dict[str, list[str]]:
    """Each job's shell commands: GitHub's `run:` steps, GitLab's `script:` lines."""
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", PAGE, flags=re.S)]
    github = next(b for b in blocks if "jobs" in b)
    gitlab = next(b for b in blocks if "diagnose" in b and "script" in b["diagnose"])
    return {"github": [s["run"] for s in github["jobs"]["diagnose"]["steps"] if "run" in s],
            "gitlab": list(gitlab["diagnose"]["script"]),
            "local": [ln for b in re.findall(r"```sh\n(.*?)```", PAGE, flags=re.S) for ln in b.splitlines()]}


@pytest.mark.parametrize("job", ["github", "gitlab", "local"])
def test_ci_job_commands_write_the_reports_it_publishes(job, tmp_path, monkeypatch):
    commands = [c.split(";")[0] for c in _jobs()[job] if c.startswith(".venv/bin/diagnose ")]
    assert len(commands) == 2, commands
    (tmp_path / "traces").mkdir()
    shutil.copy(TRACE, tmp_path / "traces")
    monkeypatch.chdir(tmp_path)
    codes = [CliRunner().invoke(cli, shlex.split(c)[1:]).exit_code for c in commands]
    assert codes == [0, 3]  # the HTML report passes; the JUnit step fails the job on TRAIN002/TRAIN004
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    root = ET.fromstring((tmp_path / "diagnosis.xml").read_bytes())
    failed = sorted(c.get("name").split()[0] for c in root.iter("testcase") if c.find("failure") is not None)
    assert failed == ["TRAIN002", "TRAIN004"]


def test_gitlab_job_publishes_the_junit_file_it_writes():
    gitlab = next(yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", PAGE, flags=re.S) if "diagnose:" in b and "script" in b)
    artifacts = gitlab["diagnose"]["artifacts"]
    assert artifacts["reports"]["junit"] == "diagnosis.xml" and artifacts["when"] == "always"
