"""inputs -> readers -> analyses -> facts -> records -> rules -> findings: the whole diagnosis."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from . import settings as settings_mod
from .catalogue import all_settings, catalogue
from .families import family_of
from .families.reading import check_ranks
from .engine.evaluate import applicable, durable_matcher, evaluate
from .engine.margins import close_calls
from .engine.records import build_records
from .diagnosis import Report
from .facts import AnalysisResult, Fact
from .input_family import Family
from .findings import Finding, NotApplicable, NotEvaluated, arrange
from .timeline import device_peaks
from .timeline.replay import FIX_OF, PACE_ASSUMES, assumes, paced, predict
from .memory.peak_after_fix import peak_after_fix
from .ncu.kernel_after_fix import kernel_after_fix
from .resources import rules_dir
from .result_tables import ResultTables
from .rulespec.loader import build_pack
from .rulespec.model import RulePack

MISSING_RANKS_SHOWN = 16


@dataclass
class Group:
    """Inputs analysed together (one run; or all ranks of one distributed run)."""

    family: Family
    paths: list[str]
    kinds: list[str]
    models: list
    notes: list[str] = field(default_factory=list)


def _missing_ranks(world: int, present: set[int]) -> str:
    """The first few ranks absent from `present` (never a set of all `world` ranks)."""
    shown = []
    for r in range(world):
        if r not in present:
            shown.append(str(r))
            if len(shown) == MISSING_RANKS_SHOWN:
                break
    more = world - len(present) - len(shown)
    return ", ".join(shown) + (f" and {more:,} more" if more > 0 else "")


def drop_rank_claimed_twice(g: Group) -> None:
    """Two traces of one run that claim the same rank: the first given (command-line order; a folder's
    files in name order) is that rank, the others are left out, and a note names every claimant."""
    claims: dict[int, list[int]] = {}
    for i, m in enumerate(g.models):
        claims.setdefault(m.rank, []).append(i)
    twice = {rank: idx for rank, idx in claims.items() if len(idx) > 1}
    if not twice:
        return
    dropped = {i for idx in twice.values() for i in idx[1:]}
    for rank, idx in sorted(twice.items()):
        others = ", ".join(g.paths[i] for i in idx[1:])
        g.notes.append(f"{len(idx)} traces claim rank {rank}: {g.paths[idx[0]]} (kept: the first given) and {others} "
                       "(left out); pass one trace per rank")
    keep = [i for i in range(len(g.models)) if i not in dropped]
    g.paths = [g.paths[i] for i in keep]
    g.kinds = [g.kinds[i] for i in keep]
    g.models = [g.models[i] for i in keep]


def load_groups(paths: Iterable[str], progress: bool = False) -> list[Group]:
    """Sniff and read every input (directories and globs expanded; timeline traces measured per rank,
    in parallel as distributed.executing() says); group the ranks of a distributed run together."""
    from .distributed import measure_inputs
    from .families.rank_files import attach_failures
    from .ingest.expansion import expand_inputs
    paths = expand_inputs(paths)
    pre = measure_inputs(paths, progress)
    singles: list[Group] = []
    ranked: dict[tuple, Group] = {}  # (world size, run label: families.rank_files.run_labels) -> its ranks
    for path in (p for p in paths if p in pre.kinds):
        kind = pre.kinds[path]
        family = family_of(kind)
        model = pre.measured[path] if path in pre.measured else family.measure(path, path, kind, progress)
        rank = getattr(model, "rank", None)
        if family.per_rank and rank is not None and getattr(model, "world_size", None):
            check_ranks(path, model)
            g = ranked.setdefault((model.world_size, pre.runs.get(path, "")), Group(family, [], [], []))
            g.paths.append(str(path))
            g.kinds.append(kind)
            g.models.append(model)
        else:
            singles.append(Group(family, [str(path)], [kind], [model]))
    for g in ranked.values():
        drop_rank_claimed_twice(g)
    for (world, _), g in ranked.items():
        present = {m.rank for m in g.models}
        if len(present) < world:
            g.notes.append(f"the traces cover {len(g.models)} of {world} ranks (missing rank(s) "
                           f"{_missing_ranks(world, present)}): pass every rank's trace to compare ranks and find stragglers")
    for g in ranked.values():
        order = sorted(range(len(g.models)), key=lambda i: g.models[i].rank)
        g.paths = [g.paths[i] for i in order]
        g.kinds = [g.kinds[i] for i in order]
        g.models = [g.models[i] for i in order]
    attach_failures(pre.failures, pre.notes, ranked)
    return singles + [ranked[k] for k in sorted(ranked)]


def analyse(group: Group) -> AnalysisResult:
    result = group.family.analyse(group.models)
    result.inputs = [{"path": p, "kind": k} for p, k in zip(group.paths, group.kinds)]
    return result


def load_pack(user_rules: Iterable[str] = (), params: Iterable[str] = ()) -> RulePack:
    return build_pack(rules_dir(), [Path(p) for p in user_rules], params, known_facts=catalogue(),
                      known_settings=all_settings)


def diagnose(paths: Iterable[str], user_rules: Iterable[str] = (), params: Iterable[str] = (),
             progress: bool = False, matcher=durable_matcher, pack: RulePack | None = None,
             set_values: dict | None = None) -> Report:
    """`set_values`: analysis settings by name (`--set`), over those the rule packs set."""
    pack = pack or load_pack(user_rules, params)
    with settings_mod.overridden({**pack.settings, **(set_values or {})}):
        report = _diagnose(paths, pack, progress, matcher)
        report.settings = dict(pack.provenance(), settings=settings_mod.changed())
        report.rule_files = {rid: rule.path for rid, rule in pack.rules.items() if not rule.shipped}
    return report


def analyse_runs(paths, progress: bool = False) -> list[tuple[list, AnalysisResult]]:
    """Every run among the inputs (diagnoser.runs.grouping decides which inputs are one run) as
    (its groups, its merged AnalysisResult)."""
    from .ingest.expansion import expand_inputs
    from .runs.grouping import group_runs, unique_inputs
    paths, dup_notes = unique_inputs(expand_inputs(paths))
    runs = group_runs([(g, analyse(g)) for g in load_groups(paths, progress=progress)])
    out = []
    for i, run in enumerate(runs):
        if len(run.members) == 1:
            g, result = run.members[0]
            result.notes = result.notes + run.evidence
            out.append(([g], result))
        else:
            from .runs.merge import merge_run  # (several inputs of one run)
            out.append(([g for g, _ in run.members], merge_run(run)))
    if out:
        out[0][1].notes[:0] = dup_notes
    if len(out) > 1:
        out[0][1].notes.insert(len(dup_notes), f"the inputs are {len(out)} separate runs (timelines that share too few "
                               "kernels with the same launch configuration, memory inputs that nothing places in a "
                               "timeline's run: see the notes on each): each is diagnosed on its own; a finding's "
                               "sources name its run's files")
    return out


def _diagnose(paths, pack: RulePack, progress: bool, matcher) -> Report:
    cat = catalogue()
    all_inputs, findings, skipped, charts, notes, facts = [], [], {}, {}, [], []
    tables = ResultTables()
    per_run, runs, identities, evaluated = [], [], [], []
    for groups, result in analyse_runs(paths, progress):
        identities.append(dict(result.identity or {}))
        runs.append({"run": len(runs) + 1, "inputs": [i["path"] for i in result.inputs], "charts": result.charts,
                     "facts": [f for f in result.facts if f.subject is None]})  # its run-level facts (headline numbers)
        all_inputs += result.inputs
        records, warnings = build_records(result.facts, result.gain_units)
        notes += [n for g in groups for n in g.notes] + result.notes + warnings
        kinds = [i["kind"] for i in result.inputs]
        got, missing = evaluate(pack.rules, records, cat, matcher, kinds=kinds)
        predict_other_units(got, records)
        evaluated.append(_evaluated_rules(pack, records, cat, kinds, missing))
        notes += close_calls(pack.rules, records, {f.rule for f in got})
        notes += list(dict.fromkeys(gain_out_of_unit_note(f) for f in got if f.gain_out_of_unit is not None))
        per_run.append((got, next((r.values for r in records if r.scope == "run"), {}), result.step_graph))
        for ne in missing:  # several runs: not evaluated in one outweighs not applicable in another
            if ne.rule not in skipped or (isinstance(ne, NotEvaluated) and isinstance(skipped[ne.rule], NotApplicable)):
                skipped[ne.rule] = ne
        for key, value in result.charts.items():
            charts.setdefault(key, value)
        tables = tables.filled_from(result.tables)
        facts += result.facts
    predictions, peak_predictions = [], []
    for i, (got, run_values, graph) in enumerate(per_run):  # separate runs: ranked each on its own, one after the other
        arranged = arrange(got, run_values, cat)
        predictions.append(predict_steps(arranged, graph, run_values))
        peak_predictions.append(predict_peak_all(arranged))
        if len(per_run) > 1:
            for f in arranged:
                f.run = i + 1
        findings += arranged
    fired_rules = {f.rule for f in findings}
    not_evaluated = [skipped[k] for k in sorted(skipped) if isinstance(skipped[k], NotEvaluated)
                     and (k not in fired_rules or skipped[k].subjects)]
    not_applicable = [skipped[k] for k in sorted(skipped) if isinstance(skipped[k], NotApplicable) and k not in fired_rules]
    return Report(all_inputs, findings, not_evaluated, charts, notes, facts, separate_runs=runs if len(runs) > 1 else [],
                  not_applicable=not_applicable, identities=identities,
                  evaluated=evaluated, predictions=predictions, peak_predictions=peak_predictions, tables=tables)


def predict_steps(findings: list[Finding], graph, values: dict) -> dict | None:
    """Sets each step-time finding's predicted_step_ms (the step after its fix, replayed on the run's
    step graph: timeline/replay.py; a cause the replay does not model: its own share of the measured
    step, down to half of it); returns the prediction for the warning and critical ones together, each
    part of the step counted once (the replay applies their fixes to one graph; the rest by their marginal
    gains from the gain ledger). None without a step-time finding or a measured step."""
    step = values.get("step_time_ms_p50")
    timed = [f for f in findings if f.gain_of == "step time"]
    if not isinstance(step, (int, float)) or step <= 0 or not timed:
        return None
    for f in timed:
        got = predict(graph, [f.category], step) if graph is not None else None
        if got is None:
            got = (step * (1.0 - f.estimated_gain), step * (1.0 - f.estimated_gain / 2))
        elif paced(graph, f.category):
            f.step_assumes = PACE_ASSUMES
        elif assumes(graph, f.category):
            f.step_assumes = assumes(graph, f.category)
        f.predicted_step_ms, f.step_ms = (min(got[0], step), min(got[1], step)), step
    serious = [f for f in timed if f.severity != "info"]
    if not serious:
        return None
    modelled = [f.category for f in serious if f.category in FIX_OF]
    got = predict(graph, modelled, step) if graph is not None and modelled else None
    low, high = got if got is not None else (step, step)
    rest = sum(f.marginal_gain if f.marginal_gain is not None else f.estimated_gain
               for f in serious if got is None or f.category not in FIX_OF)
    low, high = low * max(0.0, 1.0 - rest), high * max(0.0, 1.0 - rest / 2)
    return {"step_ms": step, "low": min(low, step), "high": min(high, step), "rules": [f.rule for f in serious]}


def predict_other_units(findings: list[Finding], records) -> None:
    """Sets each memory or kernel finding's prediction in its own unit (before the findings are grouped, so
    each kernel's comes from its own facts): the peak after the fix (memory/peak_after_fix.py), a launch's
    time at the roof the fixed kernel should reach (ncu/kernel_after_fix.py)."""
    by_subject = {r.subject: r.values for r in records}
    name = by_subject.get(None, {}).get("device_name")
    peaks = device_peaks.lookup([{"name": name}]) if isinstance(name, str) else None
    for f in findings:
        values = by_subject.get(f.subject, by_subject.get(None, {}))
        got = peak_after_fix(f.rule, values, f.params) or kernel_after_fix(f.rule, values, peaks)
        if got:
            f.prediction = got


def predict_peak_all(findings: list[Finding]) -> dict | None:
    """The peak after the fixes of a run's warning and critical memory findings together: each frees its own
    owner's bytes (leak, temporaries, cache, optimizer state), so their gains add; None unless two or more
    such findings have a computable prediction of one measured peak (fragmentation's is of reserved memory:
    not added)."""
    parts = [f for f in findings if f.severity != "info" and f.prediction.get("unit") == "GiB"
             and "low" in f.prediction and f.rule != "OOM004"]
    if len(parts) < 2 or len({f.category for f in parts}) < len(parts):
        return None
    peak = parts[0].prediction["measured"]
    low = peak - sum(peak - f.prediction["low"] for f in parts)
    high = peak - sum(peak - f.prediction["high"] for f in parts)
    return {"peak_gib": peak, "low": max(0.0, low), "high": max(0.0, high), "rules": [f.rule for f in parts]}


def gain_out_of_unit_note(f) -> str:
    """A rule whose estimated_gain came out above 1: a gain is a share (0..1) of `gain_of`, so more than
    all of it is an expression in the wrong unit (a % fact not divided by 100); its gain is not counted."""
    return (f"{f.rule}: its estimated_gain `{f.gain_expr}` gave {f.gain_out_of_unit:.3g} here, more than all of the "
            f"{f.gain_of}; a gain is a share from 0 to 1 (divide a % fact by 100), so this finding's gain is not "
            "counted")


def _evaluated_rules(pack: RulePack, records, cat, kinds, left_out) -> list[str]:
    """The rules evaluated on a run: those the engine ran, and those the other findings decided
    (a rule that lacks facts but needs a finding that did not fire); not those left out (not
    evaluated, not applicable) nor the rules of trees that do not apply."""
    todo, skipped = applicable(pack.rules.values(), records, cat, kinds)
    out = {ne.rule for ne in skipped} - {ne.rule for ne in left_out}
    run_values = next((r.values for r in records if r.scope == "run"), {})
    return sorted(rid for rid in out | {r.id for r in todo} if not _for_other_workload(pack.rules[rid], run_values))


def _for_other_workload(rule, run_values: dict) -> bool:
    """A rule guarded by another workload than the run's (an inference rule on a training step: the
    `workload_kind` test first in its `all`, as the loader writes it) does not apply to the run: it is
    not a rule that passed."""
    workload = run_values.get("workload_kind")
    if workload is None or rule.when.kind != "all":
        return False
    return any(c.kind == "fact" and c.fact == "workload_kind" and c.op == "eq" and c.value is not None
               and c.value != workload for c in rule.when.items)


def fact_blocks(paths: Iterable[str], progress: bool = False) -> list[tuple[list[dict], list[Fact]]]:
    """What `diagnose facts` shows: one block per input (the ranks of one distributed run read together),
    its inputs and the facts measured from them. Blocks of one run are not merged here, as `diagnose`
    merges them (analyse_runs)."""
    return [(result.inputs, result.facts) for result in (analyse(g) for g in load_groups(paths, progress))]
