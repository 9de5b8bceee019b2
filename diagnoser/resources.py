"""Where the shipped rule packs, playbooks and templates live (inside the installed package)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def _package_dir(package: str, fallback: str) -> Path:
    try:
        p = Path(str(resources.files(package)))
        if p.is_dir() and any(p.iterdir()):
            return p
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent / fallback


def rules_dir() -> Path:
    return _package_dir("diagnoser._rules", "rules")


def playbooks_dir() -> Path:
    return _package_dir("diagnoser._playbooks", "playbooks")


def templates_dir() -> Path:
    return Path(__file__).resolve().parent / "report" / "templates"
