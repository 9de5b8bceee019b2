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

Transfer versus waiting: ranks launch the same collectives in the same order, so the k-th NCCL kernel
of a step on a rank's i-th NCCL stream is the same collective on every rank. Its shortest duration
over the ranks is its transfer time (what every rank spends once all have arrived: the last arriver
barely waits); the rest of a rank's kernel, from its start to `end - transfer`, is waiting for peers.
Only transfer is communication a better overlap could hide; the waiting is the peers' lateness, whose
cause is in the last-arriving rank's own breakdown (see `critical_rank`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..idle_classes import OWN_IDLE_CLASSES


@dataclass
class RankSummary:
    """What the per-rank analysis hands to the cross-rank comparison (times per steady step)."""

    rank: int
    step_ms: float
    comm_ms: float          # time in NCCL kernels per step (waiting + transferring)
    busy_pct: float         # GPU busy with compute/copies, % of step
    idle_by_class_pct: dict  # idle class -> % of step
    transfer_ms: float | None = None        # NCCL transfer per step (per collective, min duration over ranks)
    peer_wait_ms: float | None = None       # NCCL time per step beyond the transfer: waiting for peers
    idle_peer_wait_pct: float | None = None  # GPU idle (communication class) while waiting for peers, % of step

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
        if r.transfer_ms is not None:
            d["rank_comm_transfer_ms"] = r.transfer_ms
            d["rank_peer_wait_ms"] = r.peer_wait_ms
            d["rank_idle_peer_wait_pct"] = r.idle_peer_wait_pct
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


@dataclass
class CollectiveKernels:
    """One rank's NCCL kernels in its steady steps (ns), in launch order per stream."""

    step: np.ndarray     # the steady step each kernel starts in (its label)
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step_labels: list    # the steady steps' labels, in order
    name: np.ndarray | None = None  # kernel names (which collective: ncclDevKernel_AllReduce_Sum_f32_RING_LL...)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.start


def _groups(k: CollectiveKernels, step_key: dict) -> dict:
    """(step key, stream ordinal) -> row indices of that group's kernels in start order."""
    streams = {s: i for i, s in enumerate(np.unique(k.stream).tolist())}
    out: dict = {}
    for j in np.argsort(k.start, kind="stable").tolist():
        out.setdefault((step_key[k.step[j]], streams[int(k.stream[j])]), []).append(j)
    return out


def transfer_per_kernel(ranks: list[CollectiveKernels]) -> tuple[list[np.ndarray], int]:
    """Per rank, the transfer time (ns) of each of its NCCL kernels: the shortest duration of the same
    collective over all ranks. Collectives are matched by step (label, or position when the labels
    differ), NCCL stream (in stream-id order) and order on the stream; a group whose kernel count
    differs between ranks is not matched and counts as transfer whole. Returns (transfers, unmatched
    kernels)."""
    labels = [list(k.step_labels) for k in ranks]
    if all(lab == labels[0] for lab in labels) and len(set(labels[0])) == len(labels[0]):
        keys = [{lab: lab for lab in labels[0]} for _ in ranks]
    else:  # the k-th steady step of each rank
        keys = [{lab: i for i, lab in enumerate(ls)} for ls in labels]
    groups = [_groups(k, key) for k, key in zip(ranks, keys)]
    out = [k.dur.astype(np.int64).copy() for k in ranks]
    unmatched = 0
    for g in set().union(*groups):
        rows = [gr.get(g, []) for gr in groups]
        if len({len(r) for r in rows}) != 1:
            unmatched += sum(len(r) for r in rows)
            continue
        shortest = np.min(np.stack([k.dur[r] for k, r in zip(ranks, rows)]), axis=0)
        for o, r in zip(out, rows):
            o[r] = shortest
    return out, unmatched


def critical_rank(ranks: list[RankSummary]) -> int:
    """Index of the rank whose breakdown explains the run's step: the one that arrives last at the
    collectives (least NCCL time, the straggler_analysis choice). A synchronous step ends when its
    last rank is done, so that rank's idle is the run's; the others' extra idle is waiting for it."""
    return int(np.argmin([r.comm_ms for r in ranks]))
