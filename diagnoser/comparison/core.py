"""Two runs, diagnosed with the same rules, matched fact by fact, kernel by kernel, finding by finding.

Each side is one run (any inputs `diagnose FILE...` takes, several ranks included) diagnosed by
pipeline.diagnose. Then:

- facts: every fact both sides measured on the same subject, before / after / change, and whether it
  moved the right way. The right way of a fact comes from the rules: a rule's `verify_check` says
  where the fact must go after a fix (lt/lte/falls: down; gt/gte/rises: up); times and memory go
  down (HEADLINE_DIRECTIONS); otherwise the direction is unknown and not judged.
- subjects: kernels are matched by name and launch configuration (grid x block), the n-th launch of
  a configuration to the n-th; a kernel whose configuration changed is matched by name (a fix may
  change the grid). Ranks, devices and other subjects by id. Steps by role: the steady steps of
  each side are summarized (median) and compared phase by phase (busy, idle by class).
- findings: per finding of BEFORE, `fixed` (the rule no longer fires and every condition of its
  `verify_check` holds on AFTER), `improved` (its cost fell beyond the noise, or it no longer fires
  but the Verify step does not hold yet), `unchanged`, `regressed` (cost rose beyond the noise, or
  its severity rose); findings only AFTER has are `new`. A finding's cost is its estimated gain
  times the time it is a share of (step time, GPU time, peak memory) on its side, so a share that
  grows only because the total shrank is not a regression.
- noise: the variation between the steady steps of one run (p10..p90 of the step times over the
  median, with fewer than 10 steps the full range), the larger of the two sides. A headline change
  or a finding's cost change counts only when it exceeds that noise (and, for findings, the
  `compare.min_change_pct` setting); the CI gate (`--fail-on-regression PCT`) trips only when a
  headline number got worse by more than max(PCT, noise).

The parts live in their own modules: sides.py (a side and its noise), changes.py (before -> after of
a number and its direction), matching.py (subjects), verdicts.py (findings), tables.py (headlines,
kernels, phases, facts), gate.py (the CI gate), kernel_selection.py (`--kernels`); this module runs
both diagnoses and assembles the comparison.
"""
from __future__ import annotations

from .. import settings
from .changes import change, fact_directions
from .kernel_selection import restrict
from .likeness import refusal, step_basis
from .matching import _subj_json, match_subjects
from .sides import side_of
from .tables import fact_rows, headlines, kernel_rows, kernel_totals, op_totals, phase_rows, timeline_kernel_rows
from .verdicts import SEV_RANK, VERDICT_ORDER, finding_verdicts

SCHEMA = "diagnoser.compare/1"


def compare_runs(before_paths, after_paths, pack, progress: bool = False, set_values: dict | None = None,
                 kernels: list[str] | None = None, to_kernels: list[str] | None = None, force: bool = False) -> dict:
    """`kernels` / `to_kernels`: compare only these Nsight Compute launches of each side; given both,
    they are paired in the order listed (twins with different names) instead of by name. Two sides that
    are not runs of one program (likeness.refusal) raise DiagnoserError, unless `force`."""
    from ..pipeline import diagnose
    rb = diagnose(before_paths, pack=pack, progress=progress, set_values=set_values)
    ra = diagnose(after_paths, pack=pack, progress=progress, set_values=set_values)
    if kernels:
        rb = restrict(rb, kernels)
    if to_kernels:
        ra = restrict(ra, to_kernels)
    pairs = None
    if kernels and to_kernels:
        if len(kernels) != len(to_kernels):
            from ..errors import DiagnoserError
            raise DiagnoserError(f"--kernels names {len(kernels)} launches, --to-kernels {len(to_kernels)}: "
                                 "give one AFTER launch per BEFORE launch (paired in order)")
        pairs = {("kernel", b): ("kernel", a) for b, a in zip(kernels, to_kernels)}
    with settings.overridden({**pack.settings, **(set_values or {})}):
        out = build(before_paths, rb, after_paths, ra, pack, pairs, force)
        out["settings"] = dict(rb.settings, settings=settings.changed())  # how both sides were diagnosed
        return out


SAME_WORK_PCT = 5.0  # two spans launching kernels within this many % of each other: the same work


def span_headline(basis: dict) -> dict | None:
    """Where the two sides cut steps differently but ran the same work (about as many kernel launches),
    the wall time of each side's analysed span is the headline: what the user waits for. None otherwise."""
    b, a = (basis or {}).get("before") or {}, (basis or {}).get("after") or {}
    kb, ka, sb, sa = b.get("kernels"), a.get("kernels"), b.get("span_ms"), a.get("span_ms")
    if not (kb and ka and sb and sa) or abs(kb - ka) > SAME_WORK_PCT / 100 * max(kb, ka):
        return None
    row = {"fact": "span_ms", "label": f"wall time of the same work ({kb:,} -> {ka:,} kernel launches)", "unit": "ms"}
    row.update(change(sb, sa, "lower"))
    row["noise_pct"] = 0.0
    return row


def build(before_paths, rb, after_paths, ra, pack, pairs: dict | None = None, force: bool = False) -> dict:
    before, after = side_of(before_paths, rb), side_of(after_paths, ra)
    refused = refusal(before, after, paired=pairs is not None) if rb.inputs and ra.inputs else None
    if refused and not force:
        from ..errors import DiagnoserError
        raise DiagnoserError(f"compare: {refused} (--force compares them anyway)")
    basis = step_basis(before, after)
    same_steps = basis.get("comparable", True)
    before.steps_comparable = after.steps_comparable = same_steps
    matched = dict(pairs) if pairs is not None else match_subjects(before, after)
    noise = max(before.noise_pct, after.noise_pct)
    directions = fact_directions(pack)
    findings = finding_verdicts(before, after, pack, matched, noise)
    findings.sort(key=lambda f: (VERDICT_ORDER.index(f["verdict"]), -SEV_RANK.get(f.get("severity_after") or f.get("severity_before"), 0), f["rule"]))
    counts = {v: sum(1 for f in findings if f["verdict"] == v) for v in VERDICT_ORDER}
    out = {
        "schema": SCHEMA,
        "before": {"inputs": rb.inputs, "findings": len(rb.findings), "noise_pct": round(before.noise_pct, 3),
                   "noise_basis": before.noise_basis, "steps": len(before.steps)},
        "after": {"inputs": ra.inputs, "findings": len(ra.findings), "noise_pct": round(after.noise_pct, 3),
                  "noise_basis": after.noise_basis, "steps": len(after.steps)},
        "noise_pct": round(noise, 3),
        "summary": counts,
        "headlines": headlines(before, after, matched, noise, same_steps),
        "findings": findings,
        "kernels": kernel_rows(before, after, matched) if any(k[0] == "kernel" for k in before.subjects) else [],
        "timeline_kernels": timeline_kernel_rows(before, after) if same_steps else [],
        "phases": phase_rows(before, after) if same_steps else [],
        "facts": fact_rows(before, after, matched, directions, same_steps),
        "unmatched": {"before": [_subj_json(before, k) for k in before.subjects if k not in matched],
                      "after": [_subj_json(after, k) for k in after.subjects if k not in set(matched.values())]},
        "notes": [f"BEFORE: {n}" for n in rb.notes] + [f"AFTER: {n}" for n in ra.notes],
        "charts": {"before": rb.charts, "after": ra.charts},
        "tables": {"before": rb.tables, "after": ra.tables},  # read by the gate (noise_gate), not written out
    }
    if basis:
        out["steps_basis"] = basis
    if not same_steps:
        same_work = span_headline(basis)
        if same_work:  # the change that matters first: the wall time of the same work (steps cut differently)
            out["headlines"].insert(0, same_work)
        out["kernel_totals"] = kernel_totals(before, after)
        out["op_totals"] = op_totals(before, after)
    if refused:
        out["notes"].insert(0, f"compared with --force although {refused}")
    return out
