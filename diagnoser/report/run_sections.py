"""Inputs that are several separate runs (pipeline.Report.separate_runs): each run's findings and chart data,
so every renderer gives each run its own section (never one run's charts under another's findings)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .formatting import fmt_value

# what a run section's first line says about the run, when the run measured it: (fact, words)
HEADLINE = (
    ("step_time_ms_p50", "step time {} (median)"),
    ("step_count", "{} steady steps"),
    ("gpu_busy_pct", "GPU busy {}"),
    ("kernel_gpu_time_total_ms", "kernel GPU time {}"),
    ("kernel_launch_count", "{} kernel launches"),
    ("peak_allocated_gib", "peak allocated {}"),
    ("peak_reserved_gib", "peak reserved {}"),
    ("num_ooms", "out-of-memory events: {}"),
)


@dataclass
class RunSection:
    """The part of a report about one of several separate runs."""

    run: int
    inputs: list[str]
    findings: list = field(default_factory=list)  # this run's findings, in the report's order
    charts: dict = field(default_factory=dict)    # this run's chart data (analysis series)
    headline: str = ""                            # its headline numbers in words (HEADLINE)


def run_sections(report, findings) -> list[RunSection]:
    """One section per run, holding the `findings` (already filtered) of that run; [] for one run."""
    runs = getattr(report, "separate_runs", None) or []
    if len(runs) < 2:
        return []
    return [RunSection(r["run"], list(r.get("inputs") or []), [f for f in findings if f.run == r["run"]],
                       r.get("charts") or {}, headline(r.get("facts") or [])) for r in runs]


def headline(facts) -> str:
    """A run's headline numbers (run-level facts) in words: "step time 35.0 ms (median) · 5 steady steps"."""
    by_name = {f.name: f for f in facts if f.subject is None}
    parts = []
    for name, words in HEADLINE:
        f = by_name.get(name)
        if f is not None and isinstance(f.value, (int, float)) and not isinstance(f.value, bool):
            unit = "" if f.unit == "count" else f.unit
            parts.append(words.format(fmt_value(int(f.value) if f.unit == "count" else f.value, unit)))
    return " \u00b7 ".join(parts)


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
