"""How evenly a launch's work spread over the SMs (Nsight Compute's WorkloadDistribution counters)."""
from __future__ import annotations

from .units import _num


def sm_balance_facts(m: dict) -> dict[str, object]:
    """How unevenly the SMs worked: the busiest SM's active cycles over the average SM's. One block (or
    warp) with most of the work keeps one SM busy long after the others are done."""
    mx, avg = _num(m, "sm__cycles_active.max"), _num(m, "sm__cycles_active.avg")
    if mx is None or not avg or mx <= 0:
        return {}
    return {"sm_busiest_to_average_cycles_ratio": mx / avg, "sm_average_of_busiest_cycles_pct": 100.0 * avg / mx}
