"""Several ranks of one distributed run: who waits in collectives, and who makes them wait.

In a collective every rank's NCCL kernel spins until the last rank arrives, so the rank that waits
least in NCCL kernels is the one that arrives last (the straggler); what every other rank waits
beyond that is the time the straggler costs them.

Arriving last is not yet a rank-specific problem. A straggler does work the others do not: more GPU
compute, or GPU idle while its host does something other than launching the common work (input,
syncs, rank-only host code); its "own work" (busy + data/sync/unexplained idle, % of step) exceeds
theirs. When the ranks do the same work and the host launches are the bottleneck (a launch-bound
run), the last rank's extra idle is launch gaps and the others' is NCCL wait: each rank's own work is
about the same, and the NCCL wait difference only says which host issues the same launches later.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# GPU idle a rank's own host causes by doing something other than launching the common work; launch
# gaps (the same launches, issued more slowly) and NCCL waits are not the rank's own work
OWN_IDLE_CLASSES = ("data", "sync", "unexplained")


@dataclass
class RankSummary:
    """What the per-rank analysis hands to the cross-rank comparison (times per steady step)."""

    rank: int
    step_ms: float
    comm_ms: float          # time in NCCL kernels per step (waiting + transferring)
    busy_pct: float         # GPU busy with compute/copies, % of step
    idle_by_class_pct: dict  # idle class -> % of step

    @property
    def own_work_pct(self) -> float:
        """GPU busy plus GPU idle while the host does something other than launching or communicating:
        % of the step this rank spends on work of its own (what a straggler has more of)."""
        return self.busy_pct + sum(self.idle_by_class_pct.get(c, 0.0) for c in OWN_IDLE_CLASSES)


def straggler_analysis(ranks: list[RankSummary]) -> dict:
    """Per-rank comparison: collective wait per rank, the straggler and its cost to the others.

    Returns {"per_rank": {rank: {fact: value}}, "run": {fact: value}}; empty without 2+ ranks.
    """
    if len(ranks) < 2:
        return {"per_rank": {}, "run": {}}
    comm = np.array([r.comm_ms for r in ranks])
    steps = np.array([r.step_ms for r in ranks])
    step_ms = float(steps.mean())
    slowest = int(np.argmin(comm))  # arrives last, so waits least
    extra = comm - comm[slowest]
    others = np.arange(len(ranks)) != slowest
    cost_ms = float(extra[others].mean()) if others.any() else 0.0
    own = np.array([r.own_work_pct for r in ranks])
    excess_work_pct = float(own[slowest] - own[others].mean()) if others.any() else 0.0
    per_rank = {}
    for i, r in enumerate(ranks):
        top_cls, top_pct = max(r.idle_by_class_pct.items(), key=lambda kv: (kv[1], kv[0])) if r.idle_by_class_pct else ("", 0.0)
        d = {
            "rank_step_time_ms": r.step_ms,
            "rank_gpu_busy_pct": r.busy_pct,
            "rank_comm_wait_ms": r.comm_ms,
            "rank_comm_wait_pct": 100.0 * r.comm_ms / max(r.step_ms, 1e-9),
            "rank_extra_wait_pct": 100.0 * float(extra[i]) / max(step_ms, 1e-9),
            "rank_is_straggler": bool(i == slowest),
            "rank_idle_top_class": top_cls,
            "rank_idle_top_pct": float(top_pct),
            "rank_own_work_pct": float(own[i]),
        }
        if i == slowest:
            d["rank_straggler_cost_pct"] = 100.0 * cost_ms / max(step_ms, 1e-9)
            d["rank_straggler_cost_ms"] = cost_ms
            d["rank_straggler_excess_work_pct"] = excess_work_pct
        per_rank[r.rank] = d
    run = {
        "world_size": len(ranks),
        "straggler_rank": str(ranks[slowest].rank),
        "straggler_cost_pct": 100.0 * cost_ms / max(step_ms, 1e-9),
        "rank_step_time_spread_pct": 100.0 * float(steps.max() - steps.min()) / max(step_ms, 1e-9),
        "max_rank_comm_wait_pct": float(max(100.0 * r.comm_ms / max(r.step_ms, 1e-9) for r in ranks)),
    }
    return {"per_rank": per_rank, "run": run}
