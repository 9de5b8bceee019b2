"""One side of a comparison: a diagnosed run's facts by subject, its steady steps, its step noise."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass
class Side:
    paths: list[str]
    report: object  # pipeline.Report
    run: dict = field(default_factory=dict)  # run-level facts: name -> value
    subjects: dict = field(default_factory=dict)  # (kind, id) -> {"name", "facts": {}}
    units: dict = field(default_factory=dict)
    noise_pct: float = 0.0
    noise_basis: str = ""
    steps: list = field(default_factory=list)  # result_tables.StepRow: the steady steps that took time
    # False when the two sides cut steps differently (likeness.step_basis): per-step numbers of one are
    # not per-step numbers of the other, and a finding's cost is then its share, not share x step time
    steps_comparable: bool = True


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) else None


def side_of(paths, report) -> Side:
    s = Side(list(paths), report)
    for f in report.facts:
        s.units.setdefault(f.name, f.unit)
        if f.subject is None or f.subject.kind == "run":
            s.run.setdefault(f.name, f.value)
        else:
            entry = s.subjects.setdefault((f.subject.kind, f.subject.id), {"name": f.subject.name, "facts": {}})
            entry["facts"].setdefault(f.name, f.value)
    s.steps = [st for st in (report.tables.steps or []) if _num(st.dur_ms)]
    s.noise_pct, s.noise_basis = step_noise(s.steps)
    return s


def step_noise(steps: list) -> tuple[float, str]:
    """The variation between the steady steps of one run, % of the median step time."""
    durs = sorted(_num(st.dur_ms) for st in steps)
    if len(durs) < 2:
        return 0.0, "one step or none: no step-to-step variation measured"
    med = statistics.median(durs)
    if med <= 0:
        return 0.0, "zero step time"
    if len(durs) >= 10:
        q = statistics.quantiles(durs, n=10, method="inclusive")
        return 100 * (q[-1] - q[0]) / med, f"p10..p90 of {len(durs)} steady steps"
    return 100 * (durs[-1] - durs[0]) / med, f"range of {len(durs)} steady steps"
