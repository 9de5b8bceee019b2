"""The facts catalogue: every fact any analysis can produce (the rule authors' vocabulary).

Read from each family's catalogue module, which imports no pandas or numpy, so commands that
only need the vocabulary (`rules list`, rule validation) start fast. The analysis settings
(diagnoser.settings) are the catalogue's second half: `diagnose facts --catalogue` lists both.
"""
from __future__ import annotations

import importlib

from .facts import FactSpec

ANALYSIS_MODULES = ("diagnoser.timeline.catalogue", "diagnoser.kernels.catalogue",
                    "diagnoser.memory.catalogue", "diagnoser.runs.catalogue")


def catalogue() -> dict[str, FactSpec]:
    specs: dict[str, FactSpec] = {}
    for name in ANALYSIS_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:  # an analysis family not installed/built yet
            if e.name != name:
                raise
            continue
        for spec in getattr(module, "CATALOGUE", []):
            specs.setdefault(spec.name, spec)
    return dict(sorted(specs.items()))
