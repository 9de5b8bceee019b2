"""diagnoser: a rule-based diagnostic expert system for GPU performance."""

__version__ = "0.1.0"
