"""The catalogue: every fact any analysis can produce (the rule authors' vocabulary), and every
analysis setting (`--set NAME=VALUE`): `diagnose facts --catalogue` lists both.

The facts come from each family's catalogue (diagnoser.families), which imports no pandas or numpy,
so commands that only need the vocabulary (`rules list`, rule validation) start fast; then the facts
only a run of several sources has (diagnoser.runs.catalogue). The settings are found by importing the
modules that register them: each family's (Family.settings), then those of ranking, close calls,
runs and comparisons (diagnoser/comparison_settings.py, below the comparison, which reads them).
"""
from __future__ import annotations

from . import settings as settings_mod
from .facts import FactSpec
from .families import FAMILIES
from .runs.catalogue import CATALOGUE as RUNS_CATALOGUE


def catalogue() -> dict[str, FactSpec]:
    specs: dict[str, FactSpec] = {}
    for spec in [s for f in FAMILIES for s in f.catalogue] + RUNS_CATALOGUE:
        specs.setdefault(spec.name, spec)
    return dict(sorted(specs.items()))


def all_settings() -> dict[str, settings_mod.Setting]:
    """Every registered setting, by name (imports the modules that declare them)."""
    from . import comparison_settings, findings  # noqa: F401 - these register settings
    from .engine import margins  # noqa: F401
    from .runs import grouping, merge  # noqa: F401
    for family in FAMILIES:
        family.settings()
    return settings_mod.registered()
