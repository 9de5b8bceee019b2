"""What an input recorded about the program and the time it ran in (snapshot stacks, with_stack ranges,
the readers' clocks): evidence that two inputs are of one run (diagnoser.runs). The main script is
the file of a `<module>` frame of the user's code; the user's files leave out libraries."""
from __future__ import annotations

import sys
from typing import Iterable

_LIBRARY_PATH = ("site-packages/", "dist-packages/", "/lib/python", "torch/", "<")
# Kineto writes frames relative to sys.path: the standard library's files come bare (`enum.py`)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
PYTHON_FILES_KEPT = 500
# Unix time in ns of 2000-01-01 and 2100-01-01: a clock origin or event time outside is no such time
UNIX_NS_MIN, UNIX_NS_MAX = 946_684_800 * 10**9, 4_102_444_800 * 10**9


def is_unix_ns(value) -> bool:
    """A plausible Unix time in nanoseconds (an int or float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and UNIX_NS_MIN <= value < UNIX_NS_MAX


def user_python_file(path: str) -> str | None:
    """The base name of a Python file of the user's code; None for libraries (torch, site-packages, the
    standard library) and non-Python frames, whose names every PyTorch program shares."""
    path = str(path).replace("\\", "/")
    if not path.endswith(".py") or any(m in path for m in _LIBRARY_PATH):
        return None
    if "/" not in path and path[:-3] in _STDLIB:
        return None
    return path.rsplit("/", 1)[-1]


def main_script(path: str, function: str) -> str | None:
    """The program's main script: the file of a `<module>` frame that is the user's, else None."""
    return user_python_file(path) if function == "<module>" else None


def program_identity(files: Iterable[str], mains: Iterable[tuple[str, str]]) -> dict:
    """{"python_files": the user's files among `files`, "programs": main scripts among the (path,
    function) frames `mains`}, sorted and bounded; a key only where something was found."""
    out: dict = {}
    found = sorted({user_python_file(p) for p in files} - {None})
    if found:
        out["python_files"] = found[:PYTHON_FILES_KEPT]
    programs = sorted({main_script(p, fn) for p, fn in mains} - {None})
    if programs:
        out["programs"] = programs[:PYTHON_FILES_KEPT]
    return out
