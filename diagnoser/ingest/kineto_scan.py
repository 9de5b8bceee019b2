"""The native Kineto batch scanner: `_diagnoser_native`, built from native/kineto_scan.c when the package is
installed (a C compiler and Python's headers are needed, as for durable_rules; where the build fails the
install goes on without it).

It reads a batch of trace events straight into columns, with no Python object per event, and only where every
field the tables read has its plain shape; any other batch it gives back (None) and msgspec decodes it, so
the tables and every error message are the same whichever path read a batch. What the values mean stays in
torch_tables.py (`TraceColumns.add_scanned`). Without the extension, or with DIAGNOSER_NO_NATIVE=1 in the
environment, every batch is decoded by msgspec.
"""
from __future__ import annotations

import os

from .kineto_events import BUCKET_OF_CAT

try:
    import _diagnoser_native as _native
except ImportError:  # not built (no compiler at install, or a clone run without installing)
    _native = None

LAYOUT_VERSION = 2  # the columns' layout below; the extension says which one it writes
# the int64 slots of each kept event, in the extension's order
(S_PID, S_TID, S_CORRELATION, S_DEVICE, S_STREAM, S_BYTES, S_GRID, S_BLOCK,
 S_MEM_BYTES, S_TOTAL_ALLOCATED, S_TOTAL_RESERVED, S_DEVICE_ID, S_DEVICE_TYPE) = range(13)
SCANNED_INTS = 13
SCANNED_NONE = -(1 << 63)  # an absent or null value
SCANNED_MEMORY = 7  # the kind of a "[memory]" instant (the buckets are 0-6)


def available() -> bool:
    """Whether batches are scanned natively in this process."""
    return (_native is not None and getattr(_native, "LAYOUT_VERSION", None) == LAYOUT_VERSION
            and not os.environ.get("DIAGNOSER_NO_NATIVE"))


def new_scanner(native: bool = True):
    """A scanner for one trace (it codes the trace's names), or None: every batch then goes to msgspec."""
    if not native or not available():
        return None
    return _native.Scanner({cat.encode(): bucket for cat, bucket in BUCKET_OF_CAT.items()})
