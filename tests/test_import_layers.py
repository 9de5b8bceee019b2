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
