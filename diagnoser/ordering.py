"""Whether an array is in order, without a mask of every element: what the timeline analyses and the readers
(an export's row groups merged in start order) both test."""
from __future__ import annotations

import numpy as np


def is_sorted(a: np.ndarray) -> bool:
    """Whether `a` never decreases (compared a chunk at a time: no mask of every row)."""
    n = a.size
    for k in range(0, n - 1, SORTED_CHUNK):
        hi = min(k + SORTED_CHUNK, n - 1)
        if not (a[k + 1:hi + 1] >= a[k:hi]).all():
            return False
    return True


SORTED_CHUNK = 1 << 16
