"""The import direction written down in pyproject.toml ([tool.importlinter]) holds: a cycle between
layers, or a module importing against the flow (a reader importing the rule engine, the rule layer
importing the pipeline), fails here and so in CI. Function-level imports count."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    out = io.StringIO()
    here = os.getcwd()
    os.chdir(ROOT)  # the contracts name the package; grimp finds it on sys.path from the checkout
    try:
        with contextlib.redirect_stdout(out):
            code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    finally:
        os.chdir(here)
    assert code == 0, out.getvalue()[-4000:]


def test_the_contracts_hold_without_exceptions():
    """No contract lists `ignore_imports` (a lazy import that dodges a contract is a contract broken by
    other means), and no module imports the package root (`from .. import __version__`: diagnoser/_version.py)."""
    import ast
    import tomllib
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert contracts and not [c["name"] for c in contracts if c.get("ignore_imports")]
    package = ROOT / "diagnoser"
    root_importers = []
    for path in package.rglob("*.py"):
        depth = len(path.relative_to(package).parts)  # `from ..` in diagnoser/x/y.py is the root
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module is None and node.level == depth:
                root_importers += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names
                                   if not (package / a.name).with_suffix(".py").exists() and not (package / a.name).is_dir()]
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "diagnoser" in (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]):
                root_importers.append(str(path.relative_to(ROOT)))
    assert not root_importers, root_importers
