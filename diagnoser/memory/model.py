"""The memory family's model: what the memory readers fill (diagnoser/ingest: mem_snapshot.py for
CUDA memory snapshots, mem_stats.py for the allocator's counters). The allocator's own records
(segments, blocks, per-device trace entries as numpy columns, the OOM events, allocator settings) and
a deduplicated table of allocation stacks; no metric is computed here (that is memory/analysis.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

READER = "mem_snapshot"
# Trace actions, in the allocator's own words; `TraceTable.action` holds indexes into this tuple.
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot")
ACTION_CODE = {a: i for i, a in enumerate(ACTIONS)}
UNKNOWN_ACTION = -1


@dataclass(frozen=True)
class Frame:
    """One stack frame: a Python frame (filename ends with .py) or a native one."""

    filename: str
    line: int
    name: str


@dataclass(frozen=True)
class Block:
    address: int
    size: int
    requested_size: int
    state: str  # active_allocated | active_awaiting_free | inactive
    stack: int  # index into MemorySnapshot.stacks (-1: none recorded)


@dataclass(frozen=True)
class Segment:
    device: int
    address: int
    total_size: int
    allocated_size: int
    active_size: int
    requested_size: int
    stream: int
    segment_type: str  # small | large
    is_expandable: bool
    blocks: tuple[Block, ...]


@dataclass
class TraceTable:
    """One device's trace entries as columns, in recorded order (oldest first)."""

    device: int
    action: np.ndarray  # int8 index into ACTIONS (UNKNOWN_ACTION for others)
    addr: np.ndarray  # int64 (addresses fit: user space is below 2**63)
    size: np.ndarray  # int64 bytes
    time_us: np.ndarray  # int64
    stream: np.ndarray  # int64
    stack: np.ndarray  # int32 index into MemorySnapshot.stacks, -1 when no frames

    def __len__(self) -> int:
        return len(self.action)


@dataclass(frozen=True)
class OomEvent:
    device: int
    index: int  # position in that device's TraceTable
    time_us: int
    size: int  # bytes of the failing request
    device_free: int  # bytes the driver reported free on the device at the OOM


@dataclass(frozen=True)
class Annotation:
    stage: str  # START | END
    name: str  # e.g. "Optimizer.step#AdamW.step"
    device: int
    time_us: int


@dataclass
class MemorySnapshot:
    path: str
    segments: list[Segment]
    traces: dict[int, TraceTable]
    stacks: list[tuple[Frame, ...]]  # innermost frame first, as recorded
    ooms: list[OomEvent]
    allocator_settings: dict = field(default_factory=dict)
    annotations: list[Annotation] = field(default_factory=list)

    @property
    def source(self) -> str:
        return f"{self.path} ({READER})"  # the path as given, like the timeline readers


READER_JSON = "mem_stats"
READER_TEXT = "mem_summary"


@dataclass
class MemoryStats:
    path: str
    kind: str  # mem-stats | mem-summary
    allocated_current: int | None = None
    allocated_peak: int | None = None
    reserved_current: int | None = None
    reserved_peak: int | None = None
    active_peak: int | None = None
    requested_peak: int | None = None
    inactive_split_current: int | None = None
    inactive_split_peak: int | None = None
    num_ooms: int | None = None
    num_alloc_retries: int | None = None
    device: int | None = None
    counters: dict = field(default_factory=dict)  # every raw counter read (name -> number)

    @property
    def source(self) -> str:
        return f"{self.path} ({READER_JSON if self.kind == 'mem-stats' else READER_TEXT})"
