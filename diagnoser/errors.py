"""One exception family; the CLI turns each into a one-line message and exit code 1."""


class DiagnoserError(Exception):
    """Base of every error the user should see as one line (never a traceback)."""


class InputError(DiagnoserError):
    """An input file is missing, unreadable, truncated, corrupt or of the wrong kind."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


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
