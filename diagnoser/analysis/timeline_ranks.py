"""Several ranks of one distributed run: who waits in collectives, and who makes them wait.

In a collective every rank's NCCL kernel spins until the last rank arrives, so the rank that waits
least in NCCL kernels is the one that arrives last (the straggler); what every other rank waits
beyond that is the time the straggler costs them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RankSummary:
    """What the per-rank analysis hands to the cross-rank comparison (times per steady step)."""

    rank: int
    step_ms: float
    comm_ms: float          # time in NCCL kernels per step (waiting + transferring)
    busy_pct: float         # GPU busy with compute/copies, % of step
    idle_by_class_pct: dict  # idle class -> % of step


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
        }
        if i == slowest:
            d["rank_straggler_cost_pct"] = 100.0 * cost_ms / max(step_ms, 1e-9)
            d["rank_straggler_cost_ms"] = cost_ms
        per_rank[r.rank] = d
    run = {
        "world_size": len(ranks),
        "straggler_rank": str(ranks[slowest].rank),
        "straggler_cost_pct": 100.0 * cost_ms / max(step_ms, 1e-9),
        "rank_step_time_spread_pct": 100.0 * float(steps.max() - steps.min()) / max(step_ms, 1e-9),
        "max_rank_comm_wait_pct": float(max(100.0 * r.comm_ms / max(r.step_ms, 1e-9) for r in ranks)),
    }
    return {"per_rank": per_rank, "run": run}
