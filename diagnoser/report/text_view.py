"""What a text report shows (the Markdown template and the terminal draw the same view): findings at
or above a severity, the first N in full, the rest as one table, the measurement tables. Inputs that
are several separate runs get one section each: its findings, ranked on their own, and its tables."""
from __future__ import annotations

from .._version import __version__
from ..rulespec.model import SEVERITY_RANK
from .finding_parts import (evidence_sources, gain_note, kernel_table, playbook_ref, predicted_all_text, prediction_text,
                            settings_lines, severity_note, subject_label, summary_counts)
from .formatting import md_cell, share_pct
from .run_sections import run_sections


def _tables(charts) -> list[dict]:
    from .charts import report_tables
    return report_tables(charts)


def _findings(kept: list, top: int | None, first: int = 1, report=None) -> tuple[list[dict], list[dict]]:
    """(the first `top` findings in full, the rest as table rows), numbered from `first`."""
    shown = kept[:top] if top else kept
    index_of: dict[str, int] = {}
    for i, f in enumerate(kept, first):
        index_of.setdefault(f.rule, i)
    views = []
    for i, f in enumerate(shown, first):
        label, name = subject_label(f)
        views.append({"i": i, "f": f, "label": label, "name": name, "kernels": kernel_table(f),
                      "gain_note": gain_note(f, index_of), "severity_note": severity_note(f), "predicted": prediction_text(f),
                      "playbook": playbook_ref(f, report), "sources": evidence_sources(f)})
    more = []
    for i, f in enumerate(kept[len(shown):], first + len(shown)):
        label, name = subject_label(f)
        subject = (f"{len(f.kernels)} kernels" if f.kernels else (name or label)) or "run"
        more.append({"i": i, "f": f, "subject": md_cell(subject), "gain": share_pct(f.estimated_gain) if f.estimated_gain > 0 else "-"})
    return views, more


def present(report, top: int | None = None, min_severity: str = "info") -> dict:
    """What a text report shows: findings at or above min_severity, the first `top` in full, the
    rest as one table; and the summary counts of what is kept. Several separate runs: `runs` holds
    one section per run (its findings, the first `top` of each in full, numbered on; its tables)
    and the top-level findings, more and tables are empty."""
    limit = SEVERITY_RANK[min_severity]
    kept = [f for f in report.findings if SEVERITY_RANK[f.severity] <= limit]
    sections = run_sections(report, kept)
    runs, views, more, tables = [], [], [], []
    if sections:
        first = 1
        for s in sections:
            run_views, run_more = _findings(s.findings, top, first, report)
            first += len(s.findings)
            runs.append({"run": s.run, "inputs": s.inputs, "headline": s.headline, "counts": summary_counts(s.findings),
                         "findings": run_views, "more": run_more, "tables": _tables(s.charts)})
    else:
        views, more = _findings(kept, top, report=report)
        tables = _tables(getattr(report, "charts", None))
    return {"report": report, "counts": summary_counts(kept), "findings": views, "more": more,
            "hidden": len(report.findings) - len(kept), "min_severity": min_severity,
            "settings": settings_lines(report), "version": __version__, "tables": tables, "runs": runs,
            "predicted_all": predicted_all_text(report)}
