"""Demangled kernel names, the pieces every reader and analysis cuts the same way."""
from __future__ import annotations


def without_parameters(name: str) -> str:
    """The name up to its parameter list: the first `(` outside template brackets
    (`void f<int>(float*)` -> `void f<int>`; `(anonymous namespace)` at the start is kept)."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return name[:i]
    return name
