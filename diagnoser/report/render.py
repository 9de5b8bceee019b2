"""Render a Report as Markdown, JSON or HTML. Templates only draw what findings and charts hold."""
from __future__ import annotations

import json
import math

import jinja2

from ..inputs import display_kind
from ..resources import templates_dir

SCHEMA = "diagnoser.report/1"
TREE_FILES = {"train-slow": "train_slow", "inference-slow": "inference_slow", "kernel": "kernel", "oom": "oom"}


def fmt_value(value, unit: str = "") -> str:
    """A number as people read it: 3 significant digits, thousands separators, unit appended."""
    if isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            text = f"{value:g}"
        elif abs(value) >= 1000:
            text = f"{value:,.0f}"
        elif abs(value) >= 10:
            text = f"{value:.1f}"
        else:
            text = f"{value:.3g}"
    else:
        text = str(value)
    if unit in ("%", "pct"):
        return text + "%"
    return f"{text} {unit}".strip() if unit and unit not in ("count", "bool", "ratio", "") else text


def share_pct(x: float) -> str:
    """A 0..1 share as a whole percent; a real but tiny share reads "<1%", never "0%"."""
    return "<1%" if 0 < x < 0.005 else f"{100 * x:.0f}%"


def shorten(text, limit: int) -> str:
    """`text` cut to `limit` characters, the cut marked with an ellipsis."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def playbook_ref(finding) -> str:
    return f"playbooks/{TREE_FILES.get(finding.tree, finding.tree.replace('-', '_'))}.md#{finding.rule.lower()}"


def _env(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=autoescape, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["value"] = fmt_value
    env.filters["kind"] = display_kind
    env.filters["pct"] = share_pct
    env.globals["playbook_ref"] = playbook_ref
    return env


def summary_counts(findings) -> dict:
    counts = {"critical": 0, "warning": 0, "info": 0}
    for f in findings:
        counts[f.severity] += 1
    return counts


def render_markdown(report) -> str:
    return _env(False).get_template("report.md.j2").render(
        report=report, counts=summary_counts(report.findings))


def report_json(report) -> dict:
    return {
        "schema": SCHEMA,
        "inputs": report.inputs,
        "summary": summary_counts(report.findings),
        "findings": [f.to_json() for f in report.findings],
        "not_evaluated": [n.to_json() for n in report.not_evaluated],
        "notes": report.notes,
    }


def render_json(report) -> str:
    return json.dumps(report_json(report), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def render_html(report) -> str:
    from .html import render_report_html
    return render_report_html(report, _env(True))
