"""diagnoser: a rule-based diagnostic expert system for GPU performance.

    import diagnoser
    report = diagnoser.diagnose("fixtures/torch/host_sync.pt.trace.json.gz")
    report.to_frame()            # the findings as a pandas DataFrame (`to_frame("facts")`: the facts)
    report                       # in a notebook: the HTML report
    diagnoser.compare(before, after).to_frame()   # each finding fixed / improved / unchanged / regressed / new

See docs/api.md. diagnoser.api imports only the errors at start-up (each call imports what it runs),
so `import diagnoser` (and the command line's start-up) stays fast.
"""
from ._version import __version__
from .api import ComparisonReport, DiagnosisReport, compare, diagnose, load_rules
from .errors import DiagnoserError, EngineError, InputError, RuleError

__all__ = ["diagnose", "compare", "load_rules", "DiagnosisReport", "ComparisonReport",
           "DiagnoserError", "InputError", "RuleError", "EngineError", "__version__"]
