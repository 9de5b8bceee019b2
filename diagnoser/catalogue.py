"""The facts catalogue: every fact any analysis can produce (the rule authors' vocabulary)."""
from __future__ import annotations

import importlib

from .facts import FactSpec

ANALYSIS_MODULES = ("diagnoser.analysis.timeline", "diagnoser.analysis.kernels", "diagnoser.analysis.memory")


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
