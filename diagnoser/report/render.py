"""Render a Report as Markdown, JSON, HTML or terminal text: the one entry point of the report
package. Data flows one way: the renderers below take a Report and produce text; nothing under
report/ imports this module (the helpers they share live in formatting.py and finding_parts.py).

Names in a report come from the profiled program: Markdown, HTML and the terminal draw the report
as text_safety.displayable shows it (control characters escaped), and Markdown and HTML pass once
more through visible_text whole (Markdown through md_inert too: no raw HTML from a name); JSON keeps every value as read, written with text_safety.json_text
(controls, bidi and non-characters as \\u escapes). JUnit (junit.py) does as Markdown does."""
from __future__ import annotations

from dataclasses import replace

from ..rulespec.model import SEVERITY_RANK
from ..text_safety import displayable, md_inert, visible_text
from .json_report import render_json
from .run_sections import first_findings
from .template_env import template_env as _env
from .text_view import present


def render_markdown(report, top: int | None = None, min_severity: str = "info") -> str:
    view = present(displayable(report), top, min_severity)
    return md_inert(visible_text(_env(False).get_template("report.md.j2").render(view=view)))


def render_html(report, top: int | None = None, min_severity: str = "info") -> str:
    from .html import render_report_html
    report = displayable(report)
    limit = SEVERITY_RANK[min_severity]
    kept = [f for f in report.findings if SEVERITY_RANK[f.severity] <= limit]
    shown, _ = first_findings(report, kept, top)
    return visible_text(render_report_html(replace(report, findings=shown), _env(True)))


def render_report(report, fmt: str, top: int | None = None, min_severity: str = "info") -> str:
    """The report in `fmt`: md | json | html | terminal (Markdown rendered for a terminal with rich)."""
    if fmt == "json":
        return render_json(report, top, min_severity)
    if fmt == "html":
        return render_html(report, top, min_severity)
    if fmt == "terminal":
        from .terminal import render_terminal
        return render_terminal(present(displayable(report), top, min_severity))
    return render_markdown(report, top, min_severity)
