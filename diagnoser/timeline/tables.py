"""Normalized timeline tables: one schema for Nsight Systems exports and PyTorch profiler traces.

Both readers (ingest/nsys_sqlite.py, ingest/torch_trace.py) return a `Timeline`; every timeline
metric is written once against these tables. Times are integer nanoseconds on the source's own
clock (consistent within one Timeline; only differences matter). Rows are sorted by start_ns.

gpu        one row per GPU activity
  kind         str   "kernel" | "memcpy" | "memset"
  name         str   demangled kernel name; for copies/sets a label like "Memcpy HtoD"
  start_ns     int64
  end_ns       int64
  device       int32 CUDA device index; int8 (or int16) where every value fits (NARROWABLE)
  stream       int32; int16 where every value fits (NARROWABLE)
  correlation  int32 joins to host.correlation (-1 when unknown)
  bytes        int64 bytes moved/set (0 for kernels); int32 where every value fits (NARROWABLE)
  copy_kind    str   "HtoD" | "DtoH" | "DtoD" | "HtoH" | "PtoP" | "" (kernels, memsets)
  pageable     bool  copy touches pageable (unpinned) host memory
  grid         int64 blocks in the grid (gridX*gridY*gridZ; 0 when unknown or not a kernel); int32 as bytes
  block        int32 threads per block (0 when unknown or not a kernel); int16 where every value fits (NARROWABLE)

host       one row per CUDA runtime/driver API call on a host thread
  name         str   API name as recorded: "cudaLaunchKernel", "cudaStreamSynchronize", ...
  start_ns, end_ns int64
  thread       int64 host thread id (matched against ranges.thread and op_shapes: a torch trace's tid can
               be a 64-bit pthread id); int32 where the source's ids are narrow (NARROWABLE: an Nsight
               Systems export's thread ids are 24 bits)
  correlation  int32 joins to gpu.correlation (-1 when unknown)

ranges     one row per CPU-side range: NVTX push/pop or start/end ranges, PyTorch user
           annotations (ProfilerStep#N, DataLoader __next__, Optimizer.step#...), aten ops
  name         str
  start_ns, end_ns int64
  thread       int64
  kind         str   "nvtx" | "annotation" | "op" | "python"

memory     one row per device-memory allocator event (PyTorch traces with profile_memory=True: the
           `[memory]` instants of Device Type 1; Nsight Systems exports made with
           --cuda-memory-usage=true: the driver-level allocations and frees, total_allocated -1;
           empty for other traces)
  start_ns        int64 when the allocator served the call
  bytes           int64 the block's size: > 0 an allocation, < 0 a free
  total_allocated int64 bytes allocated on the device after it (-1: the source does not know)
  total_reserved  int64 bytes the caching allocator holds from the driver after it
  device          int32 CUDA device index

Ids, codes and small counts are int32 (a table's rows are most of a big trace's memory: 10M kernels
and 21M runtime calls were 1.41 GB as int64); times stay int64, and bytes, grid sizes and thread ids
too unless every value fits (NARROWABLE, below). A reader narrows an id column with `as_int32`: ids
beyond the int32 range wrap into it (ids are only joined and told apart, and no trace spans 2**31 of
them).

host_threads  what the host threads did besides CUDA calls (Nsight Systems exports only; None for
           other sources): a HostThreads of three tables, each empty when not traced, and `traced`,
           the subset of {"osrt", "samples", "sched"} the export was profiled with
  os_calls   OS runtime calls (-t osrt: OSRT_API): name str, start_ns, end_ns, thread int64
  samples    CPU samples (--sample: COMPOSITE_EVENTS): start_ns, thread int64, running bool (the thread
             state was Running), function str / module str (the leaf frame of its call chain; "" if none)
  running    spans a thread was scheduled in (--cpuctxsw: SCHED_EVENTS, in/out pairs): start_ns, end_ns,
             thread int64 (a span open at the export's edge runs to its first/last event)

Timeline also carries devices (list of dicts: id, name, sm_count, total_memory, cc), for
distributed runs rank/world_size, and clock_epoch_ns (the offset from its clock to the Unix clock,
when the source records one: it places the trace in time against a memory snapshot's history).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

GPU_COLUMNS = {
    "kind": "object", "name": "object", "start_ns": "int64", "end_ns": "int64",
    "device": "int32", "stream": "int32", "correlation": "int32", "bytes": "int64",
    "copy_kind": "object", "pageable": "bool", "grid": "int64", "block": "int32",
}
HOST_COLUMNS = {
    "name": "object", "start_ns": "int64", "end_ns": "int64", "thread": "int64",
    "correlation": "int32",
}
# columns a reader may hold narrower than the schema's type where every value fits, and the types it may use: an
# Nsight Systems export's thread ids are 24 bits, its copies' sizes and kernels' grids rarely pass 2**31 (4 bytes a
# row of its two biggest tables: 160 MB at 10M kernels), its devices are a few small indexes, its streams small
# ids and its blocks at most 1,024 threads (5 more bytes a kernel: 50 MB at 10M); a torch trace keeps the schema's
# types (64-bit pthread ids; streams and devices fall back to pids and tids). Arithmetic on them goes through int64
# (numpy's and pandas' sums of small integers do; keys are packed in int64, `ops._group_rows`).
NARROWABLE = {"host": {"thread": ("int32",)},
              "gpu": {"bytes": ("int32",), "grid": ("int32",), "device": ("int8", "int16"), "stream": ("int16",),
                      "block": ("int16",)}}


def narrowed(columns: dict[str, str], types: dict[str, str]) -> dict[str, str]:
    """A table's schema with the named columns as the given (NARROWABLE) types."""
    return {c: types.get(c, t) for c, t in columns.items()}


def narrowest(label: str, column: str, parts) -> str | None:
    """The narrowest NARROWABLE type of a table's column that holds every value of `parts` (arrays or scalars),
    None when none does (the schema's type then)."""
    for dtype in NARROWABLE[label][column]:
        info = np.iinfo(dtype)
        if all(_within(p, info.min, info.max) for p in parts):
            return dtype
    return None


def _within(values, lo: int, hi: int) -> bool:
    a = np.asarray(values)
    return a.size == 0 or (lo <= int(a.min()) and int(a.max()) <= hi)
RANGE_COLUMNS = {
    "name": "object", "start_ns": "int64", "end_ns": "int64", "thread": "int64", "kind": "object",
}
MEMORY_COLUMNS = {
    "start_ns": "int64", "bytes": "int64", "total_allocated": "int64", "total_reserved": "int64", "device": "int32",
}
OS_CALL_COLUMNS = {"name": "object", "start_ns": "int64", "end_ns": "int64", "thread": "int64"}
SAMPLE_COLUMNS = {"start_ns": "int64", "thread": "int64", "running": "bool", "function": "object", "module": "object"}
RUNNING_COLUMNS = {"start_ns": "int64", "end_ns": "int64", "thread": "int64"}
GPU_KINDS = ("kernel", "memcpy", "memset")
COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "")
RANGE_KINDS = ("nvtx", "annotation", "op", "python")


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def fits_int32(values) -> bool:
    """Whether every value (an array, or one scalar) lies in int32's range."""
    return _within(values, INT32_MIN, INT32_MAX)


def as_int32(values) -> np.ndarray:
    """An id column as int32 (the schema's type for ids): values beyond the int32 range wrap into it
    (a negative one becomes -1, unknown; a large one keeps its low 31 bits). Ids are only joined and
    told apart, and a trace never spans 2**31 of them, so wrapping keeps them distinct."""
    a = np.asarray(values)
    if a.dtype == np.int32:
        return a
    if a.dtype.kind in "iu" and not fits_int32(a):
        a = a.astype(np.int64)  # (a copy: the caller's array is left alone)
        wide = (a < INT32_MIN) | (a > INT32_MAX)
        a[wide] = np.where(a[wide] < 0, -1, a[wide] & INT32_MAX)
    return a.astype(np.int32)


def empty_table(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in columns.items()})


@dataclass
class HostThreads:
    """OS runtime calls, CPU samples and scheduling of the host threads (module doc: host_threads)."""

    os_calls: pd.DataFrame = field(default_factory=lambda: empty_table(OS_CALL_COLUMNS))
    samples: pd.DataFrame = field(default_factory=lambda: empty_table(SAMPLE_COLUMNS))
    running: pd.DataFrame = field(default_factory=lambda: empty_table(RUNNING_COLUMNS))
    traced: frozenset = frozenset()
    names: dict = field(default_factory=dict)  # thread id -> the name the OS gave it (nsys ThreadNames)


@dataclass
class Timeline:
    """One rank's timeline as a reader builds it: GPU activity, host API calls and host ranges as tables (the
    schema above), with what the input says about its devices, rank, process groups and clock."""

    path: str
    source: str  # "nsys" | "torch"
    gpu: pd.DataFrame
    host: pd.DataFrame
    ranges: pd.DataFrame
    devices: list[dict] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    process_groups: list[dict] = field(default_factory=list)  # [{name, desc, size}] of a distributed run
    memory: pd.DataFrame = field(default_factory=lambda: empty_table(MEMORY_COLUMNS))  # allocator events
    # add to start_ns/end_ns for Unix-epoch ns (Kineto baseTimeNanoseconds, nsys session start); None if unknown
    clock_epoch_ns: int | None = None
    notes: list[str] = field(default_factory=list)  # what the reader saw that limits what can be measured
    # modelled aten ops with their record_shapes arguments (torch reader); None: no op recorded shapes
    op_shapes: pd.DataFrame | None = None
    host_threads: HostThreads | None = None  # OS runtime / CPU samples / scheduling (nsys); None: not a source of them

    @property
    def device_memory(self) -> int:
        """The largest device's total memory in bytes (0: the source does not say)."""
        return max((int(d.get("total_memory") or 0) for d in self.devices), default=0)

    def validate(self) -> "Timeline":
        """Check every table against the schema (columns, dtypes, enums); raise ValueError if off."""
        checks = (("gpu", self.gpu, GPU_COLUMNS), ("host", self.host, HOST_COLUMNS),
                  ("ranges", self.ranges, RANGE_COLUMNS), ("memory", self.memory, MEMORY_COLUMNS))
        if self.host_threads is not None:
            h = self.host_threads
            checks += (("os_calls", h.os_calls, OS_CALL_COLUMNS), ("samples", h.samples, SAMPLE_COLUMNS),
                       ("running", h.running, RUNNING_COLUMNS))
        for label, table, columns in checks:
            missing = [c for c in columns if c not in table.columns]
            if missing:
                raise ValueError(f"timeline table {label} lacks columns {missing}")
            for col, dtype in columns.items():
                got = str(table[col].dtype)
                if got != dtype and not (dtype == "object" and got in ("string", "category")) \
                        and got not in NARROWABLE.get(label, {}).get(col, ()):
                    raise ValueError(f"timeline table {label}.{col} is {table[col].dtype}, expected {dtype}")
        bad = set(self.gpu["kind"].unique()) - set(GPU_KINDS)
        if bad:
            raise ValueError(f"timeline gpu.kind has unknown values {sorted(bad)}")
        bad = set(self.ranges["kind"].unique()) - set(RANGE_KINDS)
        if bad:
            raise ValueError(f"timeline ranges.kind has unknown values {sorted(bad)}")
        return self
