"""report layer."""

DEFAULT_TOP = 10  # findings shown in full in Markdown and terminal text; the rest in one table
