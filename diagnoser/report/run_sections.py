"""Inputs that are several separate runs (pipeline.Report.runs): each run's findings and chart data,
so every renderer gives each run its own section (never one run's charts under another's findings)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunSection:
    run: int
    inputs: list[str]
    findings: list = field(default_factory=list)  # this run's findings, in the report's order
    charts: dict = field(default_factory=dict)    # this run's chart data (analysis series)


def run_sections(report, findings) -> list[RunSection]:
    """One section per run, holding the `findings` (already filtered) of that run; [] for one run."""
    runs = getattr(report, "runs", None) or []
    if len(runs) < 2:
        return []
    return [RunSection(r["run"], list(r.get("inputs") or []), [f for f in findings if f.run == r["run"]],
                       r.get("charts") or {}) for r in runs]


def first_findings(report, kept: list, top: int | None) -> tuple[list, list]:
    """(the findings shown in full, the rest): the first `top` of the report, or of each run when the
    inputs are several separate runs (each is ranked on its own, so each keeps its first fixes)."""
    if not top:
        return list(kept), []
    sections = run_sections(report, kept)
    if not sections:
        return kept[:top], kept[top:]
    shown = [f for s in sections for f in s.findings[:top]]
    return shown, [f for s in sections for f in s.findings[top:]]
