"""The Kineto trace schema, every vintage: the event shapes msgspec decodes, which `cat` goes to
which timeline table, and the labels read from event names.

Kept apart from the stream scan (torch_trace.py) and the table building (torch_tables.py) so the
differences between Kineto versions (old category spellings, annotations filed as operators,
numbers written as text) are resolved in one place, at the reader edge.
"""
from __future__ import annotations

import functools
import re
from typing import Any

import msgspec
import numpy as np

_Num = int | float | str | None


class KinetoArgs(msgspec.Struct, gc=False):
    """The `args` of an event: the fields any table uses, every other key ignored."""

    # Any: a field of an unexpected type (Triton's string `grid`, a list where a number was
    # expected) is read as whatever it is and then ignored where it cannot be used, never fatal
    correlation: Any = None
    device: Any = None
    stream: Any = None
    bytes: Any = None
    grid: Any = None
    block: Any = None
    # allocator events ([memory] instants, profile_memory=True)
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    # operator arguments (record_shapes=True): shapes, dtypes, scalar arguments as text; kept as the raw
    # JSON (no Python lists built for the ops the perf model does not cover), decoded per distinct value
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    input_strides: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Strides")  # PyTorch >= 2.1


class KinetoEvent(msgspec.Struct, gc=False):
    """One element of traceEvents (gc=False: decoded events form no reference cycles)."""

    cat: str | None = ""
    name: str = ""
    pid: _Num = None
    tid: _Num = None
    ts: float = float("nan")
    dur: float = 0.0
    args: KinetoArgs | None = None


class KinetoTrace(msgspec.Struct):
    """The top-level object: the events plus the header fields the Timeline keeps."""

    traceEvents: list[KinetoEvent] | None = None
    deviceProperties: list[dict[str, Any]] | None = None
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: Any = None  # Unix time of the trace's clock origin (Kineto >= 2023); any type: checked in use


NO_ARGS = KinetoArgs()

# cat -> bucket; old Kineto spellings included
KERNEL, MEMCPY, MEMSET, RUNTIME, ANNOTATION, OP, PYTHON = range(7)
BUCKET_OF_CAT = {
    "kernel": KERNEL, "Kernel": KERNEL, "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET, "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME,
    "Runtime": RUNTIME, "user_annotation": ANNOTATION, "cpu_op": OP, "Operator": OP,
    "python_function": PYTHON,
}
GPU_KIND = {KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset"}
RANGE_KIND = {ANNOTATION: "annotation", OP: "op", PYTHON: "python"}
# Kineto before 1.8 recorded the profiler's own annotations under cat "Operator", beside the aten
# ops: these names are annotations whatever their category says.
_ANNOTATION_NAME = re.compile(r"^(?:ProfilerStep#\d|enumerate\(DataLoader\)#|Optimizer\.(?:step|zero_grad)#)")
# CUPTI copy kinds as Kineto prints them; array copies are folded into the device side
_COPY_KIND = {"HtoD": "HtoD", "DtoH": "DtoH", "DtoD": "DtoD", "HtoH": "HtoH", "PtoP": "PtoP",
              "HtoA": "HtoD", "AtoH": "DtoH", "AtoD": "DtoD", "DtoA": "DtoD", "AtoA": "DtoD"}
_MEMCPY_NAME = re.compile(r"Memcpy (\w+)(?: \(([^)]*)\))?")
COPY_KIND_CODES = ("", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP")

_INT64 = 1 << 63


def as_int(v, default: int = -1) -> int:
    """An integer from a number or a string like "stream 7"; `default` for anything else."""
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, float):
        v = int(v) if v == v and abs(v) < _INT64 else default
    elif isinstance(v, str):
        digits = re.search(r"-?\d{1,18}", v)
        v = int(digits.group()) if digits else default
    elif not isinstance(v, int):
        return default  # a list, an object: not a number
    return v if -_INT64 <= v < _INT64 else default


def as_ints(values: list, default: int = -1) -> np.ndarray:
    """`[as_int(v, default) for v in values]` as int64, in one numpy call when every value is a plain int."""
    if set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:  # beyond int64: as_int gives the default
            pass
    return np.array([as_int(v, default) for v in values], dtype=np.int64)


def annotation_names(uniques: np.ndarray) -> np.ndarray:
    """Per name, whether it is one of the profiler's own annotations (whatever its `cat`)."""
    return np.array([bool(_ANNOTATION_NAME.match(n)) for n in uniques], dtype=bool)


@functools.lru_cache(maxsize=4096)
def copy_kind(name: str) -> tuple[int, bool]:
    """("Memcpy HtoD (Pageable -> Device)") -> (code of "HtoD", pageable True)."""
    m = _MEMCPY_NAME.match(name)
    if not m:
        return 0, False
    kind = _COPY_KIND.get(m.group(1), "")
    return COPY_KIND_CODES.index(kind), "Pageable" in (m.group(2) or "")
