"""One exception family; the CLI turns each into a one-line message and exit code 1."""
import re

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
        self.path = _CONTROL.sub("?", str(path))  # a newline in a file name stays on the line
        self.problem = one_line(problem)
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
