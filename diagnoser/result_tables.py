"""The typed tables an analysis hands up as data: what run grouping (diagnoser/runs) and `compare` read.

An AnalysisResult's `charts` are what the report draws (and writes into its JSON); nothing reads them back
as input. What the layers above read of a timeline travels here instead, one named row type per table:
its steady steps, its kernels grouped by launch configuration, its ops, the host's time between ops, the
per-op roofline and the kernels of its ops in one step.
A field is None where the input's family does not produce that table (an Nsight Compute report has no steps).
"""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class StepRow:
    """One steady step of the timeline whose numbers the run-level facts are (ms, from the first steady step)."""

    step: str
    start_ms: float
    dur_ms: float
    busy_ms: float
    idle_ms_by_class: dict  # idle class -> ms


@dataclass(frozen=True)
class KernelRow:
    """One kernel launch configuration over the steady steps: (demangled name, grid, block), the key an Nsight
    Compute launch and the other side of a comparison are matched on."""

    name: str
    grid: int
    block: int
    launches_per_step: float
    ms_per_step: float
    step_share_pct: float
    gpu_share_pct: float
    min_us: float
    max_us: float


@dataclass(frozen=True)
class OpRow:
    """One aten op name over the steady steps (the profiler's key_averages view): calls, self GPU and CPU time."""

    op: str
    calls_per_step: float
    gpu_ms_per_step: float
    gpu_share_pct: float
    cpu_ms_per_step: float


@dataclass(frozen=True)
class RooflineRow:
    """One modelled op group (op, shapes, dtype) of the per-op roofline over the steady steps (timeline/roofline.py);
    the roof columns None where the device is not in the peaks table."""

    op: str
    shapes: str
    dtype: str
    family: str
    calls_per_step: float
    gpu_ms_per_step: float
    tflops: float
    tbs: float
    intensity: float
    bound: str
    roof_pct: float | None
    saved_ms_per_step: float | None
    compute_roof_tflops: float | None
    memory_roof_tbs: float | None


@dataclass(frozen=True)
class StepKernel:
    """One kernel of a roofline op in the first steady step, in GPU order: what an Nsight Compute report of the
    run is matched on, launch by launch (runs/roofline_ncu.py). `row`: its op's index in the roofline table
    (-1: an op past the rows kept)."""

    row: int
    name: str
    grid: int
    block: int
    us: float


@dataclass
class ResultTables:
    """The tables of one run (None: its inputs produce none)."""

    steps: list[StepRow] | None = None
    kernels: list[KernelRow] | None = None  # costliest first
    ops: list[OpRow] | None = None  # costliest first, the top ones
    host_gaps: dict | None = None  # step_work.host_gaps: the host's time between ops (compare's regression gate)
    roofline: list[RooflineRow] | None = None  # costliest first, the top ones
    roofline_kernels: list[StepKernel] | None = None

    def filled_from(self, other: "ResultTables") -> "ResultTables":
        """These tables, each one missing taken from `other` (the runs of a diagnosis: the first that has it)."""
        return ResultTables(**{f.name: getattr(self, f.name) if getattr(self, f.name) is not None
                               else getattr(other, f.name) for f in fields(self)})


def row_dict(row) -> dict:
    """A table row as the chart draws it (the field names and order of the row type)."""
    return {f.name: getattr(row, f.name) for f in fields(row)}
