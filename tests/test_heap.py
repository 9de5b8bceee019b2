"""diagnoser/heap.py: a long timeline's analyses give the C heap's free pages back between stages; a small
input's run is left as it was (no trim at all)."""
from __future__ import annotations

import sys

from diagnoser import heap


def test_only_a_long_timeline_trims_the_heap_between_its_analyses():
    assert heap.heap_release_for(heap.TRIM_MIN_ROWS - 1) is heap.no_release
    assert heap.heap_release_for(heap.TRIM_MIN_ROWS) is heap.release_free_heap
    heap.release_free_heap()  # live data stays where it is: this returns free pages only
    if sys.platform.startswith("linux") and heap._TRIM is None:  # musl and others: nothing to call
        assert heap.release_free_heap() is None
