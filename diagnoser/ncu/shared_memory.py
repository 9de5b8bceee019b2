"""Shared-memory bank conflicts, loads and stores judged apart.

A kernel's conflicts averaged over all its shared-memory wavefronts hide the direction that conflicts:
a transpose whose column loads are 32-way conflicted and whose row stores are clean averages to what
the clean stores allow. Nsight Compute's own SharedMemoryConflicts rule judges each direction (N-way =
wavefronts per request). What the conflicts cost is the time the L1 data pipe spends on their extra
wavefronts: a 32-way conflicted load issued once per block costs nothing next to the kernel's DRAM
traffic, the same load in a loop can take most of the pipe.
"""
from __future__ import annotations

from .units import _num

SIDES = (("ld", "load"), ("st", "store"))


def shared_conflict_facts(m: dict) -> dict[str, object]:
    f: dict[str, object] = {}
    side_pct, side_conflicts, pipe, pipe_known = {}, {}, 0.0, True
    for op, word in SIDES:
        conflicts = _num(m, f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum")
        wavefronts = _num(m, f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum")
        requests = _num(m, f"smsp__sass_inst_executed_op_shared_{op}.sum")
        busy = _num(m, f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum.pct_of_peak_sustained_elapsed")
        if conflicts is None or not wavefronts:
            pipe_known = pipe_known and conflicts is not None and wavefronts == 0
            continue
        share = min(1.0, conflicts / wavefronts)
        side_pct[word], side_conflicts[word] = 100.0 * share, conflicts
        f[f"shared_{word}_conflict_pct"] = 100.0 * share
        if requests:
            f[f"shared_{word}_wavefronts_per_request"] = wavefronts / requests
        if busy is None:
            pipe_known = False
        else:
            pipe += share * busy
    total = _num(m, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")
    waves = _num(m, "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    if total is None and len(side_conflicts) == len(SIDES):  # only the per-direction counters were collected
        total = sum(side_conflicts.values())
        waves = sum(v for op, _w in SIDES if (v := _num(m, f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum")))
    f["shared_bank_conflicts_count"] = total
    if total is not None and waves:
        f["shared_bank_conflict_pct"] = 100.0 * total / waves
    if side_conflicts and max(side_conflicts.values()) > 0:
        side = max(sorted(side_conflicts), key=lambda w: side_conflicts[w])
        f["shared_conflict_side"] = side + "s"
        f["shared_conflict_side_pct"] = side_pct[side]
        ways = f.get(f"shared_{side}_wavefronts_per_request")
        if ways is not None:
            f["shared_conflict_side_ways"] = ways
    if side_pct and pipe_known:
        f["shared_conflict_pipe_pct"] = pipe
    return f
