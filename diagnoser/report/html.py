"""The self-contained HTML remediation report: summary, ranked findings with their playbook
sections (why it matters, fix, verify), and inline SVG charts. No network, no JavaScript.

This module only assembles what the template places: findings as they are, the playbook text
rendered from Markdown (escaped), evidence values formatted, and chart geometry from charts.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import jinja2
from markupsafe import Markup

from .._version import __version__
from ..kernel_names import short_name
from .charts import Chart, build_charts
from .finding_parts import (evidence_sources, gain_note, handbook_command, kernel_table, playbook_ref, predicted_all_text,
                            prediction_text, settings_lines, severity_note, summary_counts)
from .formatting import fmt_value, share_pct, shorten
from .playbook import PlaybookLibrary, render_inline, render_markdown, safe_href
from .run_sections import run_sections

SUBJECT_NAME_LIMIT = 160
SUBJECT_SHORT_LIMIT = 34  # in the summary table


def short_subject_name(name: str) -> str:
    """A C++ kernel name as a table can hold it (see kernel_names.short_name)."""
    return short_name(name, limit=SUBJECT_SHORT_LIMIT)


def gain_text(gain: float | None) -> str | None:
    """A gain share as a percentage (`<1%` when tiny, see share_pct); None when there is no gain."""
    if not gain or gain <= 0:
        return None
    return share_pct(gain)


@dataclass
class EvidenceItem:
    name: str
    value: str
    meaning: str
    numeric: bool

    @property
    def wide(self) -> bool:
        """Long text values (kernel names, regexes) get a double-width card."""
        return not self.numeric and len(self.value) > 28

    @property
    def name_parts(self) -> list[str]:
        """The fact name split at underscores, so long names break there (`_<wbr>`)."""
        return self.name.split("_")


@dataclass
class FindingView:
    """A Finding plus what the report shows around it (the Finding itself is never altered)."""

    index: int
    anchor: str
    f: object  # diagnoser.findings.Finding
    subject_label: str
    subject_name: str
    subject_full: str
    subject_short: str
    gain: str | None
    evidence: list[EvidenceItem]
    fix: Markup
    verify: Markup
    meaning: Markup | None
    fix_detail: Markup | None
    verify_detail: Markup | None
    refs: list[tuple[str, bool]]
    playbook_ref: str
    kernels: dict | None = None  # per-kernel table of a finding grouped across kernels (finding_parts.kernel_table)
    severity_note: Markup | None = None
    gain_note: Markup | None = None
    predicted: str = ""  # finding_parts.prediction_text: the step time after the fix
    sources: list = None  # finding_parts.evidence_sources: [{source, facts}]


def _fact_meanings() -> dict[str, str]:
    try:
        from ..catalogue import catalogue
        return {name: spec.meaning for name, spec in catalogue().items()}
    except Exception:  # noqa: BLE001 - labels are a nicety; the report must render without them
        return {}


def _evidence(f, meanings: dict[str, str]) -> list[EvidenceItem]:
    items = []
    for name, ev in (f.evidence or {}).items():
        ev = ev if isinstance(ev, dict) else {"value": ev, "unit": ""}
        value = ev.get("value")
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        text = "n/a" if value is None else fmt_value(value, ev.get("unit") or "")
        items.append(EvidenceItem(name, text, meanings.get(name, ""), numeric))
    # numbers first (they read as cards), then strings and lists (ids, names)
    return sorted(items, key=lambda e: not e.numeric)


def finding_view(index: int, f, library: PlaybookLibrary, meanings: dict[str, str], index_of: dict | None = None,
                 report=None) -> FindingView:
    """`library` finds the rule's playbook section (a user rule's beside its rule file, see
    PlaybookLibrary); `report` (its rule packs) completes the `diagnose playbook` pointer."""
    section = library.section(f.rule)

    def part(name: str) -> Markup | None:
        md = section.part(name, f.params) if section else ""
        return render_markdown(md, 3) if md else None

    subject_label, name = "", ""
    if f.subject is not None:
        subject_label = f"{f.subject.kind} {f.subject.id}"
        name = f.subject.name if f.subject.name and f.subject.name not in (subject_label, f.subject.id) else ""
    short = shorten(name, SUBJECT_NAME_LIMIT)
    return FindingView(
        index=index, anchor=f"finding-{index}", f=f, subject_label=subject_label, subject_name=short,
        subject_full=name,
        gain=gain_text(f.estimated_gain),
        subject_short=short_subject_name(name) if name else "",
        evidence=_evidence(f, meanings),
        fix=render_inline(f.fix or "", links=False), verify=render_inline(f.verify or "", links=False),
        meaning=part("meaning"), fix_detail=part("fix") if f.own_fix else None, verify_detail=part("verify"),
        refs=[(r, safe_href(r)) for r in f.refs], playbook_ref=playbook_ref(f, report),
        kernels=kernel_table(f),
        severity_note=render_inline(severity_note(f), links=False) if severity_note(f) else None,
        gain_note=render_inline(gain_note(f, index_of or {}), links=False) if gain_note(f, index_of or {}) else None,
        sources=evidence_sources(f), predicted=prediction_text(f),
    )


def _finding_views(findings: list, first: int, library: PlaybookLibrary, meanings: dict[str, str],
                   report=None) -> list[FindingView]:
    """The views of `findings` (one run's, or the report's), numbered from `first`; a gain note
    refers to the findings of the same list only."""
    index_of: dict[str, int] = {}
    for i, f in enumerate(findings, first):
        index_of.setdefault(f.rule, i)
    return [finding_view(i, f, library, meanings, index_of, report) for i, f in enumerate(findings, first)]


def _section(findings: list[FindingView], charts: list[Chart], prefix: str = "") -> dict:
    """What report.html.j2's parts place for one run (or the whole report): its findings, its first
    fix (the top finding, unless it is only info), its charts; `prefix` keeps element ids unique."""
    top = findings[0] if findings and findings[0].f.severity != "info" else None
    return {"findings": findings, "top": top, "charts": charts, "prefix": prefix}


def report_view(report) -> dict:
    """Everything report.html.j2 places, computed here so the template stays a layout. Several
    separate runs: `runs` holds one section per run (its findings, numbered on, and its own charts)."""
    library = PlaybookLibrary(getattr(report, "rule_files", None))
    meanings = _fact_meanings()
    runs = []
    parts = run_sections(report, report.findings)
    if parts:
        findings = []
        for part in parts:
            views = _finding_views(part.findings, len(findings) + 1, library, meanings, report)
            findings += views
            charts = [replace(c, run=part.run) for c in build_charts(part.charts)]
            runs.append(dict(_section(views, charts, f"run-{part.run}-"), run=part.run, inputs=part.inputs,
                             headline=part.headline, counts=summary_counts(part.findings)))
        whole = dict(_section(findings, []), top=None)  # each run has its own first fix
    else:
        whole = _section(_finding_views(report.findings, 1, library, meanings, report), build_charts(report.charts))
    return {
        "version": __version__,
        "inputs": report.inputs,
        "counts": summary_counts(report.findings),
        **whole,
        "runs": runs,
        "not_evaluated": [{"n": n, "collect": render_inline(n.collect or "", links=False)} for n in report.not_evaluated],
        "not_applicable": list(getattr(report, "not_applicable", None) or []),
        "notes": report.notes,
        "settings": [render_inline(line, links=False) for line in settings_lines(report)],
        "handbook_command": handbook_command(report),
        "predicted_all": "" if runs else predicted_all_text(report),
    }


def render_report_html(report, env: jinja2.Environment) -> str:
    """One self-contained HTML file (inline CSS and SVG; nothing fetched, no script)."""
    return env.get_template("report.html.j2").render(view=report_view(report))
