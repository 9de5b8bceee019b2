"""The Nsight Compute family's model: what both ncu readers (diagnoser/ingest: ncu_report.py, ncu_csv.py)
fill, whichever form the report came in. Values are stored as Nsight Compute stores them (base
units: ns, bytes, Hz, per second); no metric is computed here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

MetricValue = Union[float, int, str]


@dataclass
class NcuRule:
    """One message of one Nsight Compute guided-analysis rule (its own verdict on a launch)."""

    identifier: str  # e.g. "SOLBottleneck", "UncoalescedGlobalAccess"
    section: str  # section identifier, e.g. "SpeedOfLight"
    type: str  # none | info | warning | error | optimization (CSV: INF, WRN, ERR, OPT)
    text: str
    speedup_type: str | None = None  # local | global
    speedup_pct: float | None = None


@dataclass
class NcuLaunch:
    """One profiled kernel launch: identity, launch configuration, every metric and rule result."""

    id: int  # 0-based launch index, equal to the "ID" column of NVIDIA's CSV export
    name: str  # demangled name (function name when the kernel has no C++ mangling)
    short_name: str  # function name without namespaces, template arguments or parameters
    mangled_name: str = ""
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    device: int = 0
    stream: int = 0
    context: int = 0
    process_id: int = 0
    nvtx: list[str] = field(default_factory=list)
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)  # only where the source stores a unit
    rules: list[NcuRule] = field(default_factory=list)


@dataclass
class NcuReport:
    """A whole Nsight Compute report, whichever form it came from (binary or CSV)."""

    path: str
    kind: str  # "ncu-rep" | "ncu-csv-raw" | "ncu-csv-details"
    launches: list[NcuLaunch] = field(default_factory=list)
    tool_version: str = ""
    versions: dict[str, str] = field(default_factory=dict)  # provider -> version
    devices: dict[int, dict[str, MetricValue]] = field(default_factory=dict)  # id -> attributes
    device_names: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
