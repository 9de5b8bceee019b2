"""Facts -> records: one flat dict per subject, the unit the engine matches rules against.

A run-scoped record holds the facts with no subject; a subject record (kernel 3, rank 1...) holds
that subject's facts over the run-level ones. Values are sanitized here (rulespec.values), once, so every backend
(durable_rules and the reference evaluator in tests) sees exactly the same numbers: NaN/inf are
dropped, magnitudes are clamped to what durable_rules parses, and floats are rounded to the
decimal text the engine will read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..facts import Fact, Subject, Value
from ..rulespec.values import sanitize

@dataclass
class Record:
    """The facts of one subject (or of the run) gathered into the record the rules are evaluated on."""

    scope: str  # "run" or the subject kind
    subject: Subject | None
    values: dict[str, Value] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)
    fact_sources: dict[str, str] = field(default_factory=dict)  # fact -> the source that measured it
    # a finding's unit here, for a rule's gain_of (AnalysisResult.gain_units): {"GPU time": "step time"}
    gain_units: dict[str, str] = field(default_factory=dict)


def build_records(facts: list[Fact], gain_units: dict | None = None) -> tuple[list[Record], list[str]]:
    """Group facts into records (run first, then subjects in a stable order); also return warnings.
    `gain_units`: subject -> the units its findings are stated in (AnalysisResult.gain_units)."""
    warnings: list[str] = []
    run = Record("run", None)
    subjects: dict[Subject, Record] = {}
    for f in facts:
        v = sanitize(f.value)
        if v is None:
            warnings.append(f"dropped fact {f.name}={f.value!r} ({f.source}): not a finite number/string/bool")
            continue
        rec = run if f.subject is None else subjects.setdefault(f.subject, Record(f.subject.kind, f.subject))
        rec.values[f.name] = v
        rec.units[f.name] = f.unit
        rec.sources.add(f.source)
        rec.fact_sources[f.name] = f.source
    ordered = [run] + [subjects[s] for s in sorted(subjects, key=_subject_key)]
    for rec in ordered[1:]:
        merged = dict(run.values)
        merged.update(rec.values)
        units = dict(run.units)
        units.update(rec.units)
        rec.values, rec.units = merged, units
        rec.sources |= run.sources
        rec.fact_sources = {**run.fact_sources, **rec.fact_sources}
        rec.gain_units = dict((gain_units or {}).get(rec.subject, {}))
    return ordered, warnings


def _subject_key(s: Subject):
    return (s.kind, _natural(s.id), s.name or "")


def _natural(text: str):
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))
