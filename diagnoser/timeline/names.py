"""Name matching over timeline tables: each distinct name is matched once (traces repeat a few
thousand names over hundreds of thousands of rows), and the ranges that mark optimizer steps."""
from __future__ import annotations

import functools
import re
from typing import Callable

import numpy as np
import pandas as pd

from .tables import Timeline
from .view import Names

COMM_KERNEL = re.compile(r"nccl", re.I)  # NCCL kernels: communication, not compute
OPTIMIZER_ANNOTATION = re.compile(r"^Optimizer\.step#")
OPTIMIZER_NVTX = re.compile(r"^(?:optimizer|optim|optimizer[_ .]step|opt[_ .]step)$", re.I)


def lazy_pattern(pattern: str, flags: int = 0) -> Callable[[], re.Pattern]:
    """`re.compile(pattern, flags)` done at the first call, the same compiled pattern returned at every call:
    a pattern that most traces never reach (serving frameworks, GIL waits, attention, model classes...)
    costs no compile at start-up (0.2-6 ms each; ~25 ms together in timeline/ before this)."""
    return functools.cache(functools.partial(re.compile, pattern, flags))


def name_mask(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Boolean mask: `pattern.search(name)` for each row (anchor the pattern with ^ to match a prefix)."""
    return Names.of(names).mask(pattern)


def optimizer_ranges(tl: Timeline) -> pd.DataFrame:
    """Host ranges of optimizer steps: torch's `Optimizer.step#...` annotations or NVTX `optimizer`."""
    r = tl.ranges
    ann = (r["kind"] == "annotation").to_numpy() & name_mask(r["name"], OPTIMIZER_ANNOTATION)
    nvtx = (r["kind"] == "nvtx").to_numpy() & (name_mask(r["name"], OPTIMIZER_NVTX)  # NVTX `optimizer`, or
                                                # torch's annotation as NVTX (autograd.profiler.emit_nvtx)
                                                | name_mask(r["name"], OPTIMIZER_ANNOTATION))
    return r[ann | nvtx]
