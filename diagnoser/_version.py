"""The version of diagnoser: a leaf module, so any layer names the version without importing the package."""

__version__ = "0.1.0"
