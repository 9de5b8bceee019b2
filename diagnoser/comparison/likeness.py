"""Like with like: may two runs be compared at all, and do their steps measure the same thing?

- Refused (one line, `--force` to compare anyway): the two sides share no kind of input (an Nsight
  Compute report against a PyTorch trace: per-launch kernel metrics against a timeline), or the run
  grouping's evidence says they ran two programs (diagnoser.runs.grouping.program_evidence: their
  main scripts, else their Python files, never meet; two main scripts that share a file of the user's
  are taken for two versions of one program), or both launched kernels and no kernel name is common to
  them (kernel twins of one report are paired with --kernels / --to-kernels instead).
- Steps: a step time, a time per step, the busy share of the steps and the steps' phases compare only
  when both sides' steps measure the same thing: both come from the program's own markers
  (ProfilerStep#, NVTX step ranges, the optimizer's step annotations), or, whatever cut them (a
  repeating kernel, graph replays, nothing: the trace as one step), they hold the same work: most of
  each side's kernel time per step (`compare.same_step_kernel_share`) is in kernels (name as the run
  grouping keys it, grid, block) that both sides launch equally often per step
  (`compare.same_step_launch_factor`). An Nsight Systems export cut at a kernel and a torch trace cut
  at ProfilerStep# of one script pass; MiniWeather's one 747 ms "step" (924 launches of its hot
  kernel) against 922 steps of one launch each does not. Then those numbers are left out, the
  comparison says why, and shows each kernel's totals over each side's analysed span instead
  (launches, GPU time, time per launch: tables.kernel_totals).
"""
from __future__ import annotations

from .sides import Side, _num
from ..comparison_settings import SAME_WORK_FACTOR, SAME_WORK_SHARE

# steps the program marks itself: one step is one iteration of the program's loop, on both sides alike
MARKED = {"profiler_step": "ProfilerStep# markers", "nvtx": "NVTX step ranges", "optimizer": "optimizer step annotations"}
INFERRED = {"kernel_pattern": "inferred from a repeating kernel", "graph_launch": "one per CUDA graph replay"}
# step-based run facts: numbers whose meaning is "per step" (or the step itself)
STEP_HEADLINES = ("step_time_ms_p50", "gpu_busy_pct", "kernel_time_ms_per_step")


def is_per_step(name: str) -> bool:
    """A fact measured per step (its value depends on where steps are cut)."""
    return "per_step" in name or name.startswith("step_time") or name.startswith("phase_") or name in STEP_HEADLINES


def families(side: Side) -> list[str]:
    from ..families import family_of, known_kind
    return sorted({family_of(i["kind"]).name for i in side.report.inputs if known_kind(i.get("kind"))})


def _kinds(side: Side) -> str:
    from ..ingest.sniff import display_kind
    kinds = list(dict.fromkeys(display_kind(i["kind"]) for i in side.report.inputs))
    return " + ".join(kinds) or "no input"


def _identity(side: Side) -> dict:
    """The side's identity: its runs' identities as one (programs and Python files together)."""
    out: dict = {}
    for ident in getattr(side.report, "identities", None) or []:
        for key in ("programs", "python_files"):
            if ident.get(key):
                out[key] = sorted(set(out.get(key, ())) | set(ident[key]))
    return out


def kernel_names(side: Side) -> set[str]:
    """Every kernel name the side launched (timeline kernels and Nsight Compute launches), as the run
    grouping keys them (one spelling for every tool)."""
    from ..kernel_names import MATCH_KEY, short_name
    names = {short_name(r.name, MATCH_KEY) for r in side.report.tables.kernels or []}
    for (kind, _), entry in side.subjects.items():
        if kind == "kernel":
            names.add(short_name(entry["facts"].get("kernel_name") or entry["name"], MATCH_KEY))
    return names - {""}


def refusal(before: Side, after: Side, paired: bool = False) -> str | None:
    """Why BEFORE and AFTER are not two runs of one program (None: nothing says so)."""
    fb, fa = families(before), families(after)
    if fb and fa and not set(fb) & set(fa):
        return (f"BEFORE is input of another kind than AFTER ({_kinds(before)}; {_kinds(after)}): they measure different things, "
                "so no finding or number of one can be checked on the other")
    from ..runs.grouping import program_evidence
    ib, ia = _identity(before), _identity(after)
    same, why = program_evidence(ib, ia, "BEFORE")
    shared = set(ib.get("python_files", ())) & set(ia.get("python_files", ()))
    if same is False and not shared:  # another main script that imports the same files of the user's: a version of it
        return f"not the same program: AFTER {why.removeprefix('it ')}" if why.startswith("it ") else \
            f"not the same program: AFTER's {why.removeprefix('its ')}"
    nb, na = kernel_names(before), kernel_names(after)
    if not paired and nb and na and not nb & na:
        twins = " (twin kernels under other names: pair them with --kernels / --to-kernels)" \
            if fb == fa == ["kernel"] else ""
        return f"BEFORE and AFTER have no kernel name in common ({len(nb)} and {len(na)} kernels): not the same program{twins}"
    return None


def _steps_of(side: Side) -> dict:
    method, count = side.run.get("step_detection"), _num(side.run.get("step_count"))
    mean = _num(side.run.get("step_time_ms_mean"))
    out = {"step_detection": method, "step_count": None if count is None else int(count)}
    if mean is not None and count:  # the analysed span: the steady steps end to end, and the kernels in it
        out["span_ms"] = round(mean * count, 6)
        for key, fact in (("kernel_ms", "kernel_time_ms_per_step"), ("kernels", "kernels_per_step")):
            v = _num(side.run.get(fact))
            if v is not None:
                out[key] = round(v * count, 6 if key == "kernel_ms" else None)
    return out


def describe(steps: dict) -> str:
    method, n = steps.get("step_detection"), steps.get("step_count") or 0
    if method == "none":
        return "no steps (the trace after start-up as one step)"
    how = MARKED.get(method) or INFERRED.get(method) or str(method)
    return f"{n} step{'s' if n != 1 else ''} ({how})"


def step_basis(before: Side, after: Side) -> dict:
    """{comparable, why, before: {step_detection, step_count, span_ms}, after: {...}}; {} when a side has
    no timeline (no steps at all: Nsight Compute reports, memory snapshots)."""
    sb, sa = _steps_of(before), _steps_of(after)
    if not sb["step_detection"] or not sa["step_detection"]:
        return {}
    mb, ma = sb["step_detection"], sa["step_detection"]
    out = {"comparable": True, "why": "", "before": sb, "after": sa}
    if mb in MARKED and ma in MARKED:
        out["why"] = f"both sides' steps come from the program's own markers: BEFORE {describe(sb)}, AFTER {describe(sa)}"
        return out
    share, apart = same_work(before, after)
    if share >= SAME_WORK_SHARE.value:
        out["why"] = (f"BEFORE has {describe(sb)}, AFTER {describe(sa)}, holding the same work: {100 * share:.0f}% of "
                      "each side's kernel time per step is in kernels both launch as often per step")
        return out
    out["comparable"] = False
    example = ""
    if apart:
        name, lb, la = apart
        example = f" ({name}: {lb:,.4g} launches per step against {la:,.4g})"
    elif share == 0.0:
        example = " (no kernel of one is launched as often per step by the other)"
    if mb == ma == "none":
        out["why"] = ("neither side has steps (no markers, no repeating pattern): each one's 'step' is its trace after "
                      f"start-up, as long as the profiler happened to run, and they hold different work{example}")
        return out
    out["why"] = f"BEFORE has {describe(sb)}, AFTER {describe(sa)}: a step of one is not a step of the other{example}"
    return out


def _per_step(side: Side) -> dict[tuple, list[float]]:
    """(name as the run grouping keys it, grid, block) -> [launches, ms] per step, from the kernels table."""
    from ..kernel_names import MATCH_KEY, short_name
    out: dict[tuple, list[float]] = {}
    for r in side.report.tables.kernels or []:
        if _num(r.launches_per_step) is not None:
            acc = out.setdefault((short_name(r.name, MATCH_KEY), r.grid, r.block), [0.0, 0.0, r.name])
            acc[0] += float(r.launches_per_step)
            acc[1] += float(_num(r.ms_per_step) or 0.0)
    return out


def same_work(before: Side, after: Side) -> tuple[float, tuple | None]:
    """(the smaller of the two sides' shares of kernel time per step in kernels both launch equally often per step,
    the costliest kernel both launch but not equally often per step: (name, launches before, after) or None)."""
    from ..kernel_names import short_name
    kb, ka = _per_step(before), _per_step(after)
    f = SAME_WORK_FACTOR.value

    def equal(x, y):
        return min(x, y) > 0 and max(x, y) <= f * min(x, y)

    def share(mine, other):
        total = sum(v[1] for v in mine.values())
        hit = sum(v[1] for k, v in mine.items() if k in other and equal(v[0], other[k][0]))
        return hit / total if total > 0 else 0.0
    apart = sorted(((-v[1], short_name(v[2] or ""), v[0], ka[k][0]) for k, v in kb.items()
                    if k in ka and not equal(v[0], ka[k][0])))
    return min(share(kb, ka), share(ka, kb)), (apart[0][1:] if apart else None)
