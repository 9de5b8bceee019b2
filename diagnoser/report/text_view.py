"""What a text report shows (the Markdown template and the terminal draw the same view): findings at
or above a severity, the first N in full, the rest as one table, the measurement tables."""
from __future__ import annotations

from .. import __version__
from ..rulespec.model import SEVERITY_RANK
from .finding_parts import (evidence_sources, gain_note, kernel_table, playbook_ref, settings_lines, severity_note,
                            subject_label, summary_counts)
from .formatting import md_cell, share_pct


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
