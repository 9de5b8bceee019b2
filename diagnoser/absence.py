"""What a missing fact means: the input could not measure it, or it measured and found none.

A rule that lacks a fact is "not evaluated" when an input that was not given would decide it (the
catalogue's collect text says which). But some facts are missing because the thing they measure is
not there, although the input kind records it: a timeline records every kernel, so a trace without
GEMM kernels has no `gemm_no_tensor_core_step_pct` because it has no GEMMs; a memory snapshot
records OOMs (and so do the allocator's counters), so one taken without an OOM has no `oom_*` facts.
A rule that needs such a fact is "not applicable", with the reason. Each `Absence` declares a family
of facts, the input kinds that would record their events, and the present fact that shows none were
found.

A rule can declare the same for what it is about (`not_applicable:` in its YAML, docs/rules.md): a
KV-cache rule on a trace with no attention kernels at all.
"""
from __future__ import annotations

from dataclasses import dataclass

TIMELINE_KINDS = ("nsys-sqlite", "nsys-rep", "torch-trace")


@dataclass(frozen=True)
class Absence:
    """Facts that are missing because what they measure is absent (no GEMMs, no collectives), not because
    the input could not record it: told apart by a present count fact at its `none` value."""

    facts: frozenset[str]  # the facts missing when the thing is absent
    kinds: tuple[str, ...]  # input kinds that record the events they measure
    evidence: str  # a present fact that says how many were found ...
    none: float  # ... and its value when none were
    reason: str

    def holds(self, kinds, values: dict) -> bool:
        v = values.get(self.evidence)
        return bool(set(kinds) & set(self.kinds)) and isinstance(v, (int, float)) and not isinstance(v, bool) \
            and float(v) == self.none


def _oom_facts(catalogue: dict) -> frozenset[str]:
    """The memory catalogue's facts of the OOM event (`oom_*`, and the limit it hit)."""
    return frozenset(n for n in catalogue if n.startswith("oom_") or n.startswith("memory_limit_"))


def _prefixed(catalogue: dict, prefix: str) -> frozenset[str]:
    return frozenset(n for n in catalogue if n.startswith(prefix) and not n.endswith("_candidates"))


def absences(catalogue: dict) -> tuple[Absence, ...]:
    return (
        Absence(frozenset({"gemm_no_tensor_core_step_pct", "gemm_no_tensor_core_pct", "top_no_tensor_core_kernel"}),
                TIMELINE_KINDS, "gemm_time_pct", 0.0,
                "no GEMM or convolution kernel runs in the trace (gemm_time_pct 0)"),
        Absence(_prefixed(catalogue, "roofline_compute_gap_"), ("torch-trace",), "roofline_compute_gap_candidates", 0.0,
                "the per-op roofline (the trace records shapes) has no compute-bound GEMM or convolution whose dtype "
                "or shapes (fp32, unaligned, skinny) say why it would run below its roof"),
        Absence(_prefixed(catalogue, "roofline_memory_gap_"), ("torch-trace",), "roofline_memory_gap_candidates", 0.0,
                "the per-op roofline (the trace records shapes) has no bandwidth-bound op that loses time to the "
                "memory roof"),
        Absence(frozenset(n for n in catalogue if n.startswith("decode_") and n != "decode_rows_steps_measured"),
                ("torch-trace",), "decode_rows_steps_measured", 0.0,
                "the trace records shapes, but its steady steps show no GEMM rows to follow from step to step (too "
                "few steady steps, or a step without a linear / mm op): no decode loop that re-runs its prefix"),
        Absence(_oom_facts(catalogue), ("mem-snapshot", "mem-stats", "mem-summary"), "num_ooms", 0.0,
                "no OOM happened in the recorded process (num_ooms 0): there is no failing allocation to examine; "
                "what a snapshot shows is the peak"),
    )


def absent_reason(missing, kinds, values: dict, catalogue: dict) -> str:
    """Why the inputs show that facts in `missing` are absent ('' when none of them is known absent)."""
    reasons = [a.reason for a in absences(catalogue) if set(missing) & a.facts and a.holds(kinds, values)]
    return "; ".join(dict.fromkeys(reasons))
