"""diagnoser: a rule-based diagnostic expert system for GPU performance.

    import diagnoser
    report = diagnoser.diagnose("fixtures/torch/host_sync.pt.trace.json.gz")
    report.to_frame()            # the findings as a pandas DataFrame (`to_frame("facts")`: the facts)
    report                       # in a notebook: the HTML report
    diagnoser.compare(before, after).to_frame()   # each finding fixed / improved / unchanged / regressed / new

See docs/api.md. diagnoser.api imports only the errors and the report type at start-up (each call imports
what it runs), and this package imports it where one of its names is first used (PEP 562), so
`import diagnoser` and the command line's start-up (which imports it inside its run: the dataclasses'
code comes from the cache there, diagnoser/dataclass_code.py) stay fast.
"""
from ._version import __version__
from .errors import DiagnoserError, EngineError, InputError, RuleError

_API = ("ComparisonReport", "DiagnosisReport", "compare", "diagnose", "load_rules")


def __getattr__(name: str):
    if name in _API:
        from . import api
        value = globals()[name] = getattr(api, name)
        return value
    raise AttributeError(f"module 'diagnoser' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))


__all__ = ["diagnose", "compare", "load_rules", "DiagnosisReport", "ComparisonReport",
           "DiagnoserError", "InputError", "RuleError", "EngineError", "__version__"]
