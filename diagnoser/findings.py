"""Finding objects (what rules conclude, with their evidence numbers) and their ranking."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .facts import Subject
from .rulespec.model import SEVERITY_RANK


@dataclass
class Finding:
    rule: str
    name: str
    category: str
    tree: str
    severity: str
    title: str
    message: str
    evidence: dict  # fact -> {"value", "unit"}
    estimated_gain: float
    gain_of: str
    subject: Subject | None
    fix: str
    verify: str
    refs: tuple = ()
    sources: list[str] = field(default_factory=list)
    count: int = 1  # launches/occurrences grouped into this finding

    def to_json(self) -> dict:
        return {
            "rule": self.rule, "category": self.category, "tree": self.tree, "severity": self.severity,
            "title": self.title, "message": self.message, "evidence": self.evidence,
            "estimated_gain": round(self.estimated_gain, 4), "gain_of": self.gain_of,
            "subject": self.subject.to_json() if self.subject else None,
            "fix": self.fix, "verify": self.verify, "refs": list(self.refs), "count": self.count,
            "sources": self.sources,
        }


@dataclass(frozen=True)
class NotEvaluated:
    rule: str
    title: str
    tree: str
    missing: tuple[str, ...]
    collect: str

    def to_json(self) -> dict:
        return {"rule": self.rule, "title": self.title, "tree": self.tree, "missing": list(self.missing),
                "collect": self.collect}


def _natural(text: str):
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text or ""))


def rank_key(f: Finding):
    subj = (f.subject.kind, _natural(f.subject.id)) if f.subject else ("", ())
    return (SEVERITY_RANK[f.severity], -round(f.estimated_gain, 6), f.rule, subj)


def rank(findings: list[Finding]) -> list[Finding]:
    """Most important first: severity, then estimated gain, then rule id, then subject."""
    return sorted(findings, key=rank_key)


def group_kernel_launches(findings: list[Finding]) -> list[Finding]:
    """Many launches of the same kernel with the same finding become one finding.

    The group keeps the evidence of its costliest launch, sums the (global) gains and counts the
    launches; its subject id is the first launch id.
    """
    groups: dict[tuple, list[Finding]] = {}
    out = []
    for f in findings:
        if f.subject is not None and f.subject.kind == "kernel":
            groups.setdefault((f.rule, f.subject.name), []).append(f)
        else:
            out.append(f)
    for (_, _), members in groups.items():
        if len(members) == 1:
            out.append(members[0])
            continue
        members.sort(key=lambda m: _natural(m.subject.id))
        best = max(members, key=lambda m: (m.estimated_gain, [-x[1] for x in _natural(m.subject.id)]))
        ids = [m.subject.id for m in members]
        g = Finding(**{**best.__dict__})
        g.subject = Subject("kernel", members[0].subject.id, members[0].subject.name)
        g.estimated_gain = min(1.0, sum(m.estimated_gain for m in members))
        g.count = sum(m.count for m in members)
        g.evidence = dict(best.evidence)
        g.evidence["launches"] = {"value": g.count, "unit": "count"}
        g.evidence["launch_ids"] = {"value": ",".join(ids[:20]) + ("..." if len(ids) > 20 else ""), "unit": ""}
        out.append(g)
    return out


def dedupe(findings: list[Finding]) -> list[Finding]:
    """The same rule on the same subject from several inputs (nsys + torch of one run): keep the larger gain."""
    best: dict[tuple, Finding] = {}
    for f in findings:
        key = (f.rule, f.subject)
        if key not in best:
            best[key] = f
            continue
        keep = best[key] if best[key].estimated_gain >= f.estimated_gain else f
        other = f if keep is best[key] else best[key]
        keep.sources = sorted(set(keep.sources) | set(other.sources))
        best[key] = keep
    return list(best.values())
