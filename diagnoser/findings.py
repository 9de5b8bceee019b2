"""Finding objects (what rules conclude, with their evidence numbers), their grouping and ranking.

`arrange()` turns the engine's raw findings into the report's list, in this order:
launches of one kernel with one finding become one finding; the same rule on the same subject
from several inputs is kept once; a rule's findings over several kernels become one finding with
a per-kernel list; a finding whose estimated gain of a time is under the
`findings.warning_min_gain_pct` setting is info; and findings are ranked by severity, then by the
gain not already explained by a finding ranked above them (`marginal_gain`): the time two findings
explain is counted once, for the one ranked first (gain_parts.py says which parts of its unit each
gain claims).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from . import settings
from .facts import Subject
from .gain_parts import Ledger, claim_of, unit_parts
from .rulespec.model import SEVERITY_RANK

WARNING_MIN_GAIN_PCT = settings.register(
    "findings.warning_min_gain_pct", 1.0, "%",
    "a finding whose estimated gain is under this share of a time (step, GPU or kernel time) is info, "
    "never warning or critical, so a CI gate (--fail-on) does not trip on noise")
TIE_POINTS = settings.register(
    "findings.tie_points", 5.0, "points",
    "the first warning-or-critical finding and the next one of another category are of one size when the second's "
    "marginal gain (what it adds beyond the findings ranked above it, of the same time) is within this many "
    "percentage points of the first's gain: both are the first fix, in CAUSE_ORDER, in every source of the run")
# The one tie-break every source shares, for two causes of one size: the cause whose fix the other's
# needs first. Long host-side stalls (syncs, allocations, input, host compute, communication) come
# before launch overhead, whose fix (CUDA graphs, torch.compile) needs a step free of them; timeline
# causes before kernel-level ones.
CAUSE_ORDER = ("compile_recompile", "cudnn_autotune", "gil_contention",
               "host_sync", "allocator_churn", "input_pipeline", "host_compute", "straggler", "communication_wait",
               "one_time_setup", "launch_overhead", "small_batch", "pageable_memcpy", "unexplained_idle",
               "unfused_attention", "fp32_no_tensor_cores", "single_tensor_optimizer", "memory_bound_kernels")
KERNEL_ROWS = 8  # per-kernel rows a grouped finding shows in text reports (JSON lists them all)


@dataclass
class Finding:
    """What a rule concluded about the run or one subject: its texts filled in with the measured values, the
    evidence, the estimated gain and the prediction of the fix."""

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
    gain_expr: str | None = None  # the rule's estimated_gain expression
    gain_env: dict = field(default_factory=dict)  # the numbers it was evaluated on
    gain_known: bool = False  # the expression could be evaluated (all its names present)
    gain_out_of_unit: float | None = None  # what the expression gave when above 1 (not a share: not counted)
    rule_severity: str = ""  # the rule's severity before the gain floor ("" = unchanged)
    marginal_gain: float | None = None  # the gain not already explained by a higher-ranked finding
    tied_first: str = ""  # the rule of the other first fix when two causes are of one size (tie_first)
    overlaps: list[str] = field(default_factory=list)  # higher-ranked rules that explain the same time
    gain_together: float | None = None  # with its overlaps: the gain of them all, each part counted once
    launches: list["Finding"] = field(default_factory=list, repr=False)  # per-launch findings merged here
    kernels: list["Finding"] = field(default_factory=list, repr=False)  # per-kernel findings of a rule group
    evidence_sources: dict = field(default_factory=dict)  # evidence fact -> the source file (and reader) it came from
    run: int | None = None  # which of several separate runs among the inputs (pipeline.Report.separate_runs), None: one run
    variant: dict = field(default_factory=dict)  # the program facts that chose the rule's text variant ({}: its own)
    own_fix: bool = True  # the fix is the rule's own text (its playbook's Fix section is written for it)
    params: dict = field(default_factory=dict, repr=False)  # the rule's params in force: its playbook's `{param}` numbers
    # the step time after its fix, ms (low, high), and the measured step it is from (pipeline: timeline/replay.py)
    predicted_step_ms: tuple | None = None
    step_ms: float | None = None
    step_assumes: str | None = None  # what the step-time range assumes beyond the replay's defaults (the host's pace)
    # a finding on another unit: its measure after the fix, {unit, measured, low, high, assumes} (peak memory in
    # GiB: memory/peak_after_fix.py; a launch's time in us: ncu/kernel_after_fix.py), or {unit, measured,
    # not_computable}; {} without one
    prediction: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        """One line, as a notebook shows `report.findings[0]`: the rule, severity, title, subject and gain
        (every field stays an attribute; `to_json()` has them all)."""
        subject = f" [{self.subject.kind} {self.subject.name or self.subject.id}]" if self.subject else ""
        gain = f", up to {self.estimated_gain:.0%} of {self.gain_of}" if self.estimated_gain > 0 else ""
        return f"<Finding {self.rule} {self.severity}: {self.title}{subject}{gain}>"

    def to_json(self) -> dict:
        out = {
            "rule": self.rule, "category": self.category, "tree": self.tree, "severity": self.severity,
            "title": self.title, "message": self.message, "evidence": self.evidence,
            "estimated_gain": round(self.estimated_gain, 4), "gain_of": self.gain_of,
            "subject": self.subject.to_json() if self.subject else None,
            "fix": self.fix, "verify": self.verify, "refs": list(self.refs), "count": self.count,
            "sources": self.sources,
            "evidence_sources": {k: v for k, v in self.evidence_sources.items() if k in self.evidence},
        }
        if self.run is not None:
            out["run"] = self.run
        if self.variant:
            out["variant"] = dict(self.variant)
        if self.marginal_gain is not None:
            out["marginal_gain"] = round(self.marginal_gain, 4)
        if self.overlaps:
            out["overlaps"] = list(self.overlaps)
            if self.gain_together is not None:
                out["gain_together"] = round(self.gain_together, 4)
        if self.predicted_step_ms is not None:
            out["predicted_step_ms"] = [round(self.predicted_step_ms[0], 2), round(self.predicted_step_ms[1], 2)]
            if self.step_assumes:
                out["prediction_assumes"] = self.step_assumes
        out.update(prediction_json(self.prediction))
        if self.rule_severity:
            out["rule_severity"] = self.rule_severity
        if self.tied_first:
            out["tied_first"] = self.tied_first
        if self.kernels:
            out["kernels"] = [{"subject": k.subject.to_json() if k.subject else None, "count": k.count,
                               "estimated_gain": round(k.estimated_gain, 4), "message": k.message,
                               "evidence": k.evidence, **prediction_json(k.prediction)} for k in self.kernels]
        return out


PREDICTION_KEYS = {"GiB": ("predicted_peak_gib", "peak_gib"), "us": ("predicted_kernel_us", "kernel_us")}


def prediction_json(p: dict) -> dict:
    """A prediction in another unit as JSON: `predicted_peak_gib: [low, high]` and the measured `peak_gib`
    (or `predicted_kernel_us` / `kernel_us`), with what it assumes or why it is not computable."""
    if not p:
        return {}
    key, measured = PREDICTION_KEYS[p["unit"]]
    if "not_computable" in p:
        return {key: None, measured: round(p["measured"], 3), "prediction_not_computable": p["not_computable"]}
    return {key: [round(p["low"], 3), round(p["high"], 3)], measured: round(p["measured"], 3),
            "prediction_assumes": p["assumes"]}


@dataclass(frozen=True)
class NotEvaluated:
    """A rule that could not be evaluated (on some or all of its subjects): the facts it needs and how to
    collect them."""

    rule: str
    title: str
    tree: str
    missing: tuple[str, ...]
    collect: str
    subjects: str = ""  # "120 of 400 kernels": evaluated on the others ("" = not evaluated at all)

    def to_json(self) -> dict:
        out = {"rule": self.rule, "title": self.title, "tree": self.tree, "missing": list(self.missing),
               "collect": self.collect}
        if self.subjects:
            out["subjects"] = self.subjects
        return out


@dataclass(frozen=True)
class NotApplicable:
    """A rule the inputs show has nothing to act on: what it is about is absent (no GEMMs, no OOM)."""

    rule: str
    title: str
    tree: str
    reason: str
    missing: tuple[str, ...] = ()  # the facts it would read, absent for that reason

    def to_json(self) -> dict:
        return {"rule": self.rule, "title": self.title, "tree": self.tree, "reason": self.reason,
                "missing": list(self.missing)}


def _natural(text: str):
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text or ""))


def rank_key(f: Finding):
    subj = (f.subject.kind, _natural(f.subject.id)) if f.subject else ("", ())
    return (SEVERITY_RANK[f.severity], -round(f.estimated_gain, 6), f.rule, subj)


def rank(findings: list[Finding]) -> list[Finding]:
    """Most important first: severity, then estimated gain, then rule id, then subject."""
    return sorted(findings, key=rank_key)


def arrange(findings: list[Finding], run_values: dict | None = None, catalogue: dict | None = None) -> list[Finding]:
    """The engine's findings as the report lists them (see the module docstring); `run_values`: the
    run's facts (its run-level record), which size the parts of step time the gains claim;
    `catalogue`: the fact specs, whose shares say which parts each share fact claims."""
    grouped = group_across_kernels(dedupe(group_kernel_launches(findings)))
    return tie_first(rank_counting_once([apply_gain_floor(f) for f in grouped], run_values, catalogue))


def _cause_rank(f: Finding) -> int:
    return CAUSE_ORDER.index(f.category) if f.category in CAUSE_ORDER else len(CAUSE_ORDER)


def _counted(f: Finding) -> float:
    """The gain f counts in the ranking: its marginal gain where the ledger set one, else its own."""
    return f.estimated_gain if f.marginal_gain is None else f.marginal_gain


def tie_first(ranked: list[Finding]) -> list[Finding]:
    """Two causes of one size are both the first fix: when the next warning-or-critical finding of another
    category than the first (gain of the same time) adds, beyond what the findings ranked above it explain
    (its marginal gain, from the gain ledger), within TIE_POINTS of the first's gain, both get `tied_first`
    and they lead in CAUSE_ORDER, whichever a source measured a point larger. A second cause whose time the
    first already explains (launch gaps a sync exposes, claimed by the sync) adds nothing: it is no tie,
    however large its own gain. Per run (findings of several separate runs are tied within their run)."""
    out = list(ranked)
    for run in dict.fromkeys(f.run for f in out):
        serious = [f for f in out if f.run == run and f.severity != "info"]
        if len(serious) < 2:
            continue
        a = serious[0]
        b = next((f for f in serious[1:] if f.category != a.category), None)
        if b is None or b.gain_of != a.gain_of or not is_time_gain(a) \
                or 100.0 * abs(_counted(a) - _counted(b)) >= float(TIE_POINTS.value):
            continue
        first, second = sorted((a, b), key=lambda f: (_cause_rank(f), -f.estimated_gain, f.rule))
        first.tied_first, second.tied_first = second.rule, first.rule
        at = next(i for i, f in enumerate(out) if f is a)
        rest = [f for f in out if f is not a and f is not b]
        out = rest[:at] + [first, second] + rest[at:]
    return out


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
        g = replace(best, subject=Subject("kernel", members[0].subject.id, members[0].subject.name),
                    launches=[leaf for m in members for leaf in leaves(m)], kernels=[])
        g.estimated_gain = min(1.0, sum(m.estimated_gain for m in members))
        g.count = sum(m.count for m in members)
        g.evidence = dict(best.evidence)
        g.evidence["launches"] = {"value": g.count, "unit": "count"}
        g.evidence["launch_ids"] = {"value": ",".join(ids[:20]) + ("..." if len(ids) > 20 else ""), "unit": ""}
        out.append(g)
    return out


def group_across_kernels(findings: list[Finding]) -> list[Finding]:
    """One rule's findings on several kernels become one finding with a per-kernel list.

    The group reads as its costliest kernel (message, evidence, fix and verify) and sums the gains
    and launches of all; `kernels` holds every kernel's finding, costliest first.
    """
    by_rule: dict[str, list[Finding]] = {}
    out = []
    for f in findings:
        if f.subject is not None and f.subject.kind == "kernel":
            by_rule.setdefault(f.rule, []).append(f)
        else:
            out.append(f)
    for members in by_rule.values():
        if len(members) == 1:
            out.append(members[0])
            continue
        members.sort(key=lambda m: (-round(m.estimated_gain, 9), _natural(m.subject.id)))
        top = members[0]
        g = replace(top, kernels=list(members), launches=[])
        g.estimated_gain = min(1.0, sum(m.estimated_gain for m in members))
        g.count = sum(m.count for m in members)
        g.sources = sorted({s for m in members for s in m.sources})
        g.evidence = dict(top.evidence)
        g.evidence["kernels"] = {"value": len(members), "unit": "count"}
        g.evidence["launches"] = {"value": g.count, "unit": "count"}
        g.evidence.pop("launch_ids", None)
        out.append(g)
    return out


def leaves(f: Finding) -> list[Finding]:
    """The single-subject findings a (possibly grouped) finding was made of."""
    if f.kernels:
        return [leaf for k in f.kernels for leaf in leaves(k)]
    return list(f.launches) or [f]


def is_time_gain(f: Finding) -> bool:
    return "time" in (f.gain_of or "").lower()


def apply_gain_floor(f: Finding) -> Finding:
    """Warning/critical with an estimated gain of a time under the setting -> info (rule_severity keeps the rule's)."""
    floor = float(WARNING_MIN_GAIN_PCT.value) / 100
    if f.severity == "info" or not is_time_gain(f) or not any(leaf.gain_known for leaf in leaves(f)):
        return f
    if round(f.estimated_gain, 6) >= floor:
        return f
    g = replace(f, severity="info", rule_severity=f.rule_severity or f.severity)
    g.kernels = [replace(k, severity="info", rule_severity=k.rule_severity or k.severity) for k in f.kernels]
    return g


def rank_counting_once(findings: list[Finding], run_values: dict | None = None,
                       catalogue: dict | None = None) -> list[Finding]:
    """Rank by severity, then by marginal gain (greedy: after each pick, the findings on the same
    unit are re-valued), then own gain, rule id and subject. Sets `marginal_gain`, `overlaps` and
    `gain_together`.

    A gain expression reads `SHARE / 100 * FRACTION`: its leftmost factor names the share of
    `gain_of` the finding explains; its catalogue entry says which parts of the unit each share fact is
    (idle classes, kernel categories, a straggler's own work) and keeps one ledger per unit, so the
    time two findings explain is counted once, for the one ranked first (TRAIN002 claims the sync
    and launch idle; TRAIN004 after it adds nothing; TRAIN012's unexplained idle on the straggler
    rank is mostly the straggler's own work TRAIN005 claimed). `run_values`: the run's facts, which
    size the parts (without them, or without the `catalogue`, every share fact is a part of its own).
    """
    values = run_values or {}
    parts = {unit: unit_parts(unit, values) for unit in {f.gain_of for f in findings}}
    ledgers = {unit: Ledger(dict(sizes)) for unit, sizes in parts.items()}
    claims = {id(f): [c for c in (claim_of(leaf, f.gain_of, values, parts[f.gain_of], catalogue or {})
                                  for leaf in leaves(f))
                      if c is not None] for f in findings}
    out: list[Finding] = []
    for severity in sorted({f.severity for f in findings}, key=SEVERITY_RANK.get):
        pool = rank([f for f in findings if f.severity == severity])
        value = {id(f): _value(f, ledgers[f.gain_of], claims[id(f)]) for f in pool}
        while pool:
            best = min(pool, key=lambda f: (-round(value[id(f)][0], 6),) + rank_key(f)[1:])
            pool.remove(best)
            marginal, overlaps, use = value[id(best)]
            best.marginal_gain, best.overlaps = marginal, overlaps
            ledgers[best.gain_of].commit(best.rule, marginal, use)
            out.append(best)
            for f in pool:
                if f.gain_of == best.gain_of:
                    value[id(f)] = _value(f, ledgers[f.gain_of], claims[id(f)])
    for i, f in enumerate(out):
        if f.overlaps:
            f.gain_together = min(1.0, f.marginal_gain + sum(
                g.marginal_gain for g in out[:i] if g.gain_of == f.gain_of and g.rule in f.overlaps))
    return out


def _value(f: Finding, ledger: Ledger, claims: list) -> tuple[float, list[str], dict]:
    """f's marginal gain on the ledger as it stands, who claimed its parts before, its use of them."""
    if not claims:  # a gain that names no share (a constant): all of it, as far as the unit has room
        room = max(0.0, 1.0 - ledger.counted)
        return min(f.estimated_gain, room), [r for r in ledger.counters if r != f.rule] if f.estimated_gain > room else [], {}
    marginal, overlaps, use = ledger.value(claims, f.rule)
    return min(f.estimated_gain, marginal), overlaps, use


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
