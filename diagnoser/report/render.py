"""Render a Report as Markdown, JSON or HTML. Templates only draw what findings and charts hold."""
from __future__ import annotations

import json
import math
import os
from dataclasses import replace

from .. import __version__
from ..facts import short_name
from ..findings import KERNEL_ROWS
from ..inputs import display_kind
from ..resources import templates_dir
from ..rulespec.model import SEVERITY_RANK

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
    """How an installed user reads the rule's playbook section (the handbook ships in the package)."""
    return f"diagnose playbook {finding.rule}"


def md_cell(text) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def subject_label(f) -> tuple[str, str]:
    """("kernel 86", "short name") for a finding's subject; the name only where it says more than the id."""
    if f.subject is None:
        return "", ""
    label = f"{f.subject.kind} {f.subject.id}"
    name = f.subject.name or ""
    if name in (label, f.subject.id):
        name = ""
    return label, short_name(name) if name else ""


KERNEL_COLUMNS = 3  # evidence columns of a grouped finding's per-kernel table
_NOT_COLUMNS = {"launches", "kernels", "launch_ids", "kernel_name", "kernel_time_share_pct"}


def kernel_table(f) -> dict | None:
    """The per-kernel table of a finding grouped across kernels: the costliest KERNEL_ROWS kernels,
    the rest summed in one row. Columns: the first numeric evidence facts of the rule."""
    if not f.kernels:
        return None
    columns = [n for n, ev in f.evidence.items() if n not in _NOT_COLUMNS
               and isinstance(ev.get("value"), (int, float)) and not isinstance(ev.get("value"), bool)][:KERNEL_COLUMNS]
    rows = []
    for k in f.kernels[:KERNEL_ROWS]:
        share = k.evidence.get("kernel_time_share_pct", {}).get("value") if "kernel_time_share_pct" in k.evidence else None
        rows.append({
            "kernel": short_name(k.subject.name or k.subject.id) if k.subject else "",
            "first": k.subject.id if k.subject else "", "launches": k.count,
            "gain": share_pct(k.estimated_gain) if k.estimated_gain > 0 else "-",
            "cells": [fmt_value(k.evidence[c]["value"], k.evidence[c].get("unit", "")) if c in k.evidence else "n/a"
                       for c in columns],
            "share": "" if share is None else fmt_value(share, "%"),
        })
    rest = f.kernels[KERNEL_ROWS:]
    more = None
    if rest:
        more = {"kernels": len(rest), "launches": sum(k.count for k in rest),
                "gain": share_pct(min(1.0, sum(k.estimated_gain for k in rest)))}
    return {"columns": columns, "rows": rows, "more": more, "kernels": len(f.kernels)}


def gain_note(f, index_of: dict) -> str:
    """Why a finding's gain does not add to the ones above it (the same time explained twice)."""
    if f.marginal_gain is None or not f.overlaps or f.estimated_gain - f.marginal_gain < 0.005:
        return ""
    refs = ", ".join(f"`{r}`" + (f" (finding {index_of[r]})" if r in index_of else "") for r in f.overlaps)
    claims = "claim" if len(f.overlaps) > 1 else "claims"
    return f"{refs} already {claims} this share of {f.gain_of}; beyond it: {share_pct(f.marginal_gain)}"


def severity_note(f) -> str:
    """Why a warning/critical rule's finding is info here (the gain floor)."""
    if not f.rule_severity or f.rule_severity == f.severity:
        return ""
    from ..findings import WARNING_MIN_GAIN_PCT
    return (f"info here: `{f.rule}` is a {f.rule_severity} rule, but its estimated gain is under "
            f"{WARNING_MIN_GAIN_PCT.value:g}% of {f.gain_of} (setting findings.warning_min_gain_pct)")


def settings_lines(report) -> list[str]:
    """How the report was made, one Markdown line each: rule packs, --param, analysis settings."""
    made = getattr(report, "settings", None) or {}
    lines = []
    for pack in made.get("rule_packs", []):
        adds = [r for r in pack["rules"] if r not in pack["replaces"]]
        parts = ([f"adds {', '.join(adds)}"] if adds else []) + \
                ([f"replaces shipped {', '.join(pack['replaces'])}"] if pack["replaces"] else [])
        lines.append(f"rule pack `{pack['path']}`: {'; '.join(parts) or 'no rules'}")
    for p in made.get("params", []):
        if "condition" in p:
            lines.append(f"--param {p['condition']}.{p['param']}={p['value']} (default {p['default']}; "
                         f"shared condition of {', '.join(p['rules']) or 'no rule'})")
        else:
            lines.append(f"--param {p['rule']}.{p['param']}={p['value']} (default {p['default']})")
    for st in made.get("analysis_settings", made.get("settings", [])):
        unit = f" {st['unit']}" if st.get("unit") else ""
        lines.append(f"setting {st['name']}={st['value']} (default {st['default']}{unit})")
    return lines


def evidence_sources(f) -> list[dict]:
    """The finding's evidence grouped by the source that measured it: [{source, facts}], in evidence order."""
    by: dict[str, list[str]] = {}
    for name in f.evidence:
        src = (getattr(f, "evidence_sources", None) or {}).get(name)
        if src:
            by.setdefault(src, []).append(name)
    return [{"source": k, "facts": v} for k, v in by.items()]


def _tables(report) -> list[dict]:
    from .charts import report_tables
    return report_tables(getattr(report, "charts", None))


def present(report, top: int | None = None, min_severity: str = "info") -> dict:
    """What a text report shows: findings at or above min_severity, the first `top` in full, the
    rest as one table; and the summary counts of what is kept."""
    limit = SEVERITY_RANK[min_severity]
    kept = [f for f in report.findings if SEVERITY_RANK[f.severity] <= limit]
    shown = kept[:top] if top else kept
    index_of: dict[str, int] = {}
    for i, f in enumerate(kept, 1):
        index_of.setdefault(f.rule, i)
    views = []
    for i, f in enumerate(shown, 1):
        label, name = subject_label(f)
        views.append({"i": i, "f": f, "label": label, "name": name, "kernels": kernel_table(f),
                      "gain_note": gain_note(f, index_of), "severity_note": severity_note(f),
                      "playbook": playbook_ref(f), "sources": evidence_sources(f)})
    more = []
    for i, f in enumerate(kept[len(shown):], len(shown) + 1):
        label, name = subject_label(f)
        subject = (f"{len(f.kernels)} kernels" if f.kernels else (name or label)) or "run"
        more.append({"i": i, "f": f, "subject": md_cell(subject), "gain": share_pct(f.estimated_gain) if f.estimated_gain > 0 else "-"})
    return {"report": report, "counts": summary_counts(kept), "findings": views, "more": more,
            "hidden": len(report.findings) - len(kept), "min_severity": min_severity,
            "settings": settings_lines(report), "version": __version__, "tables": _tables(report)}


def _bytecode_cache():
    """Compiled templates kept beside the rule cache (jinja2 keys them by template source), so a
    report does not lex and compile its templates on every start; None where caching is off."""
    import jinja2

    from ..rulespec.cache import cache_dir
    directory = cache_dir()
    if directory is None:
        return None

    class QuietCache(jinja2.FileSystemBytecodeCache):
        """A cache that cannot be read or written is skipped, never an error."""

        def load_bytecode(self, bucket):
            try:
                super().load_bytecode(bucket)
            except (OSError, ValueError, EOFError):
                bucket.reset()

        def dump_bytecode(self, bucket):
            try:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)  # private, like __pycache__ of a user install
                super().dump_bytecode(bucket)
            except OSError:
                pass

    return QuietCache(str(directory / f"templates-{__version__}"))


def _env(autoescape: bool):
    """The jinja2 environment (imported here: a JSON report needs no templates)."""
    import jinja2
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())), bytecode_cache=_bytecode_cache(),
        autoescape=autoescape, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["value"] = fmt_value
    env.filters["kind"] = display_kind
    env.filters["pct"] = share_pct
    env.filters["cell"] = md_cell
    env.globals["playbook_ref"] = playbook_ref
    return env


def summary_counts(findings) -> dict:
    counts = {"critical": 0, "warning": 0, "info": 0}
    for f in findings:
        counts[f.severity] += 1
    return counts


def render_markdown(report, top: int | None = None, min_severity: str = "info") -> str:
    return _env(False).get_template("report.md.j2").render(view=present(report, top, min_severity))


def report_json(report, top: int | None = None, min_severity: str = "info") -> dict:
    limit = SEVERITY_RANK[min_severity]
    kept = [f for f in report.findings if SEVERITY_RANK[f.severity] <= limit]
    out = {
        "schema": SCHEMA,
        "inputs": report.inputs,
        "summary": summary_counts(kept),
        "findings": [f.to_json() for f in (kept[:top] if top else kept)],
        "not_evaluated": [n.to_json() for n in report.not_evaluated],
        "notes": report.notes,
        **({"runs": report.runs} if getattr(report, "runs", None) else {}),
        "settings": dict({"diagnoser": __version__, "params": [], "rule_packs": [], "analysis_settings": []},
                         **_settings_json(report)),
    }
    if top and len(kept) > top:
        out["more_findings"] = [{"rule": f.rule, "severity": f.severity, "title": f.title,
                                 "estimated_gain": round(f.estimated_gain, 4), "count": f.count} for f in kept[top:]]
    if len(kept) < len(report.findings):
        out["left_out"] = {"min_severity": min_severity, "findings": len(report.findings) - len(kept)}
    return out


def _settings_json(report) -> dict:
    made = dict(getattr(report, "settings", None) or {})
    if "settings" in made:
        made["analysis_settings"] = made.pop("settings")
    made.pop("pack_settings", None)
    return made


def render_json(report, top: int | None = None, min_severity: str = "info") -> str:
    return json.dumps(report_json(report, top, min_severity), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def render_html(report, top: int | None = None, min_severity: str = "info") -> str:
    from .html import render_report_html
    limit = SEVERITY_RANK[min_severity]
    kept = [f for f in report.findings if SEVERITY_RANK[f.severity] <= limit]
    return render_report_html(replace(report, findings=kept[:top] if top else kept), _env(True))


def render_report(report, fmt: str, top: int | None = None, min_severity: str = "info") -> str:
    """The report in `fmt`: md | json | html | terminal (Markdown rendered for a terminal with rich)."""
    if fmt == "json":
        return render_json(report, top, min_severity)
    if fmt == "html":
        return render_html(report, top, min_severity)
    if fmt == "terminal":
        from .terminal import render_terminal
        return render_terminal(present(report, top, min_severity))
    return render_markdown(report, top, min_severity)
