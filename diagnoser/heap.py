"""Give the C heap's free pages back to the system between the stages of a long diagnosis.

glibc keeps what numpy frees inside its heap: the Kineto reader's per-batch columns, once joined, leave
~60 MiB of holes on a 0.5 GB trace (each smaller than one column of the tables, so the analyses' arrays
do not fit in them and grow the heap past them), and each analysis leaves its temporaries' pages behind
in turn. `malloc_trim(0)` hands every free page back (a few ms; live data does not move). Where the C
library has no malloc_trim (not glibc), nothing is done.
"""
from __future__ import annotations

import ctypes
import sys

# a timeline of fewer rows frees too little to be worth a trim (and a small trace's run stays as it was)
TRIM_MIN_ROWS = 250_000


def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # the process's own C library
    except OSError:
        return None


_TRIM = _malloc_trim()


def release_free_heap() -> None:
    """Return the C heap's free pages to the system (glibc); a no-op elsewhere."""
    if _TRIM is not None:
        _TRIM(0)


def no_release() -> None:
    """What `release_free_heap` is for a small input: nothing."""


def heap_release_for(rows: int):
    """`release_free_heap` for an input of this many rows, `no_release` below TRIM_MIN_ROWS."""
    return release_free_heap if rows >= TRIM_MIN_ROWS else no_release
