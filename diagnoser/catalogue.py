"""The catalogue: every fact any analysis can produce (the rule authors' vocabulary), and every
analysis setting (`--set NAME=VALUE`): `diagnose facts --catalogue` lists both.

The facts come from each family's catalogue (diagnoser.families), which imports no pandas or numpy,
so commands that only need the vocabulary (`rules list`, rule validation) start fast; then the facts
only a run of several sources has (diagnoser.runs.catalogue). The settings are collected, by a call, from
the modules that declare them: each family's (Family.settings), then those of ranking, close calls,
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
    """Every setting, by name: those each family's modules declare (Family.settings), then those of
    ranking, close calls, runs and comparisons, collected from the modules by name (settings.declared_in)."""
    from . import comparison_settings, findings
    from .engine import margins
    from .runs import grouping, merge
    modules = [m for family in FAMILIES for m in family.settings()] + [findings, margins, grouping, merge,
                                                                       comparison_settings]
    return settings_mod.declared_in(modules)
