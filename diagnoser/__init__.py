"""diagnoser: a rule-based diagnostic expert system for GPU performance.

    import diagnoser
    report = diagnoser.diagnose("fixtures/torch/host_sync.pt.trace.json.gz")
    report.to_frame()            # the findings as a pandas DataFrame (`to_frame("facts")`: the facts)
    report                       # in a notebook: the HTML report
    diagnoser.compare(before, after).to_frame()   # each finding fixed / improved / unchanged / regressed / new

See docs/api.md. The names below are loaded on first use, so `import diagnoser` (and the command
line's start-up) stays fast.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["diagnose", "compare", "load_rules", "DiagnosisReport", "ComparisonReport",
           "DiagnoserError", "InputError", "RuleError", "EngineError", "__version__"]

if TYPE_CHECKING:
    from .api import ComparisonReport, DiagnosisReport, compare, diagnose, load_rules
    from .errors import DiagnoserError, EngineError, InputError, RuleError

_API = {"diagnose", "compare", "load_rules", "DiagnosisReport", "ComparisonReport"}
_ERRORS = {"DiagnoserError", "InputError", "RuleError", "EngineError"}


def __getattr__(name: str):
    if name in _API:
        from . import api
        return getattr(api, name)
    if name in _ERRORS:
        from . import errors
        return getattr(errors, name)
    raise AttributeError(f"module 'diagnoser' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
