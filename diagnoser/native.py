"""The optional C extension `_diagnoser_native` (native/, built by `pip install`; setup.py): whether this process
uses it. Its parts stand for Python code that stays beside them as the reference and the path taken without it:
the Kineto reader's batch scanner (ingest/kineto_scan.py), the step replay's hot loop (timeline/replay.py) and the
interval queries' search of sorted times (timeline/intervals.py).
Without the extension, or with DIAGNOSER_NO_NATIVE=1 in the environment, the Python paths run: the same results.
"""
from __future__ import annotations

import os

try:
    import _diagnoser_native as _module
except ImportError:  # not built (no C compiler at install, or a clone run without installing)
    _module = None

LAYOUT_VERSION = 3  # what the Python side expects of the extension's parts (its LAYOUT_VERSION must match)


def native_module():
    """The extension, or None where it is absent, of another layout, or turned off (DIAGNOSER_NO_NATIVE)."""
    if _module is None or getattr(_module, "LAYOUT_VERSION", None) != LAYOUT_VERSION or os.environ.get("DIAGNOSER_NO_NATIVE"):
        return None
    return _module
