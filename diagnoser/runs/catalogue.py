"""Facts that only a run with several sources has (diagnoser/runs/merge.py): an Nsight
Compute report matched to the timeline of the same run."""
from __future__ import annotations

from ..facts import FactSpec

SOURCES = ("ncu-rep", "ncu-csv-raw", "ncu-csv-details", "nsys-sqlite", "nsys-rep", "torch-trace")
BOTH = ("pass the timeline (nsys export or torch trace) and the Nsight Compute report of the same run together: "
        "`diagnose run.sqlite top_kernels.ncu-rep`")

CATALOGUE = [
    FactSpec("ncu_profiled_top_kernel", "string", "", "the timeline's top kernel, present when the Nsight Compute "
             "input profiled it with the same launch configuration", "run", SOURCES, BOTH),
    FactSpec("kernel_ncu_time_share_pct", "number", "%", "the launch's share of the Nsight Compute report's GPU time "
             "(kernel_time_share_pct becomes its kernel's share of step time on the timeline)", "kernel", SOURCES, BOTH),
    FactSpec("kernel_launches_per_step", "number", "count", "launches of this kernel (same name, grid, block) per "
             "steady step on the timeline", "kernel", SOURCES, BOTH),
]
