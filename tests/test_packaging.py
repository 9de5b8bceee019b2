"""The installed package ships every subpackage: pyproject.toml lists packages by hand (rules/ and
playbooks/ are mapped into it), so a new subpackage missing there imports from a checkout and fails
once installed (`diagnose` from another directory: what .ci/run checks last)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "diagnoser").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found - listed == set()
