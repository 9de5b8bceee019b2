"""The user's own Python files among the frames an input records (snapshot stacks, with_stack ranges):
evidence that two inputs ran the same program (diagnoser.runs)."""
from __future__ import annotations

_LIBRARY_PATH = ("site-packages/", "dist-packages/", "/lib/python", "torch/", "<")


def user_python_file(path: str) -> str | None:
    """The base name of a Python file of the user's code; None for libraries (torch, site-packages)
    and non-Python frames, whose names every PyTorch program shares."""
    path = str(path).replace("\\", "/")
    if not path.endswith(".py") or any(m in path for m in _LIBRARY_PATH):
        return None
    return path.rsplit("/", 1)[-1]
