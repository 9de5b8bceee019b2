"""The native Kineto batch scanner: the Scanner of `_diagnoser_native` (native/kineto_scan.c; diagnoser/native.py
says when the extension is used).

It reads a batch of trace events straight into columns, with no Python object per event, and only where every
field the tables read has its plain shape; any other batch it gives back (None) and msgspec decodes it, so
the tables and every error message are the same whichever path read a batch. What the values mean stays in
torch_tables.py (`TraceColumns.add_scanned`). Without the extension every batch is decoded by msgspec.
"""
from __future__ import annotations

from ..native import native_module
from .kineto_events import BUCKET_OF_CAT

# the int64 slots of each kept event, in the extension's order (its LAYOUT_VERSION, diagnoser/native.py)
(S_PID, S_TID, S_CORRELATION, S_DEVICE, S_STREAM, S_BYTES, S_GRID, S_BLOCK,
 S_MEM_BYTES, S_TOTAL_ALLOCATED, S_TOTAL_RESERVED, S_DEVICE_ID, S_DEVICE_TYPE) = range(13)
SCANNED_INTS = 13
SCANNED_NONE = -(1 << 63)  # an absent or null value
SCANNED_MEMORY = 7  # the kind of a "[memory]" instant (the buckets are 0-6)


def available() -> bool:
    """Whether batches are scanned natively in this process."""
    return native_module() is not None


def new_scanner(native: bool = True):
    """A scanner for one trace (it codes the trace's names), or None: every batch then goes to msgspec."""
    module = native_module() if native else None
    if module is None:
        return None
    return module.Scanner({cat.encode(): bucket for cat, bucket in BUCKET_OF_CAT.items()})
