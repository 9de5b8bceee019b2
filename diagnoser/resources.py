"""Where the shipped rule packs, playbooks and templates live.

Installed, `rules/` and `playbooks/` ship inside the package as `diagnoser/_rules` and
`diagnoser/_playbooks` (see pyproject.toml); in a source checkout they are the top-level folders.
"""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _shipped(installed: str, checkout: str) -> Path:
    inside = _PACKAGE / installed
    if inside.is_dir():
        return inside
    return _PACKAGE.parent / checkout


def rules_dir() -> Path:
    return _shipped("_rules", "rules")


def playbooks_dir() -> Path:
    return _shipped("_playbooks", "playbooks")


def templates_dir() -> Path:
    return _PACKAGE / "report" / "templates"
