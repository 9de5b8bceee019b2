"""docs/architecture.md names a module at each step of the walk: every module and `module.function`
it names exists, so the walk cannot drift from the code unnoticed."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
BASES = ("diagnoser", "diagnoser/timeline", "diagnoser/report", "")


def test_every_module_the_architecture_walk_names_exists():
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*\.py)", DOC))
    assert len(named) > 30
    missing = [p for p in sorted(named) if not any((ROOT / base / p).is_file() for base in BASES)]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_function_the_architecture_walk_names_exists():
    checked = 0
    for module, name in re.findall(r"`([a-z_]+(?:\.[a-z_]+)*)\.([a-z_]+)[`(]", DOC):
        if name == "py":
            continue
        try:
            mod = importlib.import_module(f"diagnoser.{module}")
        except ModuleNotFoundError:
            continue
        assert hasattr(mod, name), f"docs/architecture.md: diagnoser.{module} has no {name}"
        checked += 1
    assert checked >= 5
