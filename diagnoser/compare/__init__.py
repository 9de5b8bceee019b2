"""`diagnose compare BEFORE... --to AFTER...`: two runs side by side, each fix's Verify step checked,
and a CI gate on regressions (issue 12). core.py runs both diagnoses and assembles the comparison
from sides, matching, verdicts, tables and gate; render.py writes Markdown and JSON, html.py the
side-by-side HTML page (charts.py draws what the report's chart modules do not)."""

import sys as _sys
import types as _types


class _CallablePackage(_types.ModuleType):
    """`diagnoser.compare(before, after)` is the library call (diagnoser.api.compare); importing this
    package makes `diagnoser.compare` this package, so the package answers the call too."""

    def __call__(self, *args, **kwargs):
        from ..api import compare
        return compare(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallablePackage
