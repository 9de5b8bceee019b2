"""The program an input recorded, from its Python frames (snapshot stacks, with_stack ranges): the main
script (the file of the outermost `<module>` frame) and the user's own files; evidence that two inputs
ran the same program (diagnoser.runs)."""
from __future__ import annotations

import sys

_LIBRARY_PATH = ("site-packages/", "dist-packages/", "/lib/python", "torch/", "<")
# Kineto writes frames relative to sys.path: the standard library's files come bare (`enum.py`)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


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
