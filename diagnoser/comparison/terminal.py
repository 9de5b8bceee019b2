"""A comparison drawn for a terminal: the Markdown comparison rendered by rich at the terminal's
width (tables fitted to it, text wrapped between words), as `diagnose compare` prints on a TTY."""
from __future__ import annotations

from ..report.terminal import markdown_console_text
from .render import render_markdown


def render_terminal(c: dict, gate_pct=None, reasons=None, width: int | None = None) -> str:
    return markdown_console_text(render_markdown(c, gate_pct, reasons), width)
