"""One exception family; the CLI turns each into a one-line message and exit code 1. An input's
error names the file and may quote the input: its message is shown safe already (C0 as `?` or a
space, every other control, bidi or non-character escaped: text_safety.visible_line), so `str(e)`
printed by a program using the API acts on no terminal either."""
import re

from .text_safety import visible_line

MAX_PROBLEM_CHARS = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def one_line(text: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    """`text` as one line: whitespace runs and control characters (newlines in quoted SQL, NULs
    in a file name) become one space; cut at `limit` characters."""
    text = " ".join(_CONTROL.sub(" ", str(text)).split())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


class DiagnoserError(Exception):
    """Base of every error the user should see as one line (never a traceback)."""


class InputError(DiagnoserError):
    """An input file is missing, unreadable, truncated, corrupt or of the wrong kind."""

    def __init__(self, path, problem: str):
        self.path = visible_line(_CONTROL.sub("?", str(path)))  # a newline in a file name stays on the line
        self.problem = visible_line(one_line(problem))
        super().__init__(f"{self.path}: {self.problem}")


class RuleError(DiagnoserError):
    """A rule file is invalid; the message names file, line and what to change."""

    def __init__(self, path, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {problem}")


class EngineError(DiagnoserError):
    """The rule engine failed (an action raised, or durable_rules refused a fact)."""


def unexpected_problem(e: BaseException) -> str:
    """An exception nobody foresaw (a reader or analysis defect, or an input shape no check names),
    said in words rather than as Python's exception name: what kind of content it points at, then
    its own text where that text is about the data (a missing key, an unparsable value)."""
    if isinstance(e, UnicodeError):
        return "holds text that is not valid UTF-8"
    if isinstance(e, KeyError):
        return f"lacks a field it needs ({one_line(repr(e.args[0]) if e.args else '?', 120)})"
    if isinstance(e, IndexError):
        return "holds a list or table shorter than its other fields say"
    if isinstance(e, TypeError):
        return "holds a value of the wrong kind (an empty/null value, text or a list where a number belongs, or the reverse)"
    if isinstance(e, (ArithmeticError, OverflowError)):
        return "holds a number out of range"
    if isinstance(e, ValueError):
        detail = one_line(e, 160)
        return f"holds a value that is not valid{f' ({detail})' if detail else ''}"
    if isinstance(e, AttributeError):
        return "holds a value of an unexpected shape (an object where a plain value belongs, or the reverse)"
    return "holds content this version cannot handle"
