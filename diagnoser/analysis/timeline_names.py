"""Name matching over timeline tables: each distinct name is matched once (traces repeat a few
thousand names over hundreds of thousands of rows), and the ranges that mark optimizer steps."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..timeline.tables import Timeline

OPTIMIZER_ANNOTATION = re.compile(r"^Optimizer\.step#")
OPTIMIZER_NVTX = re.compile(r"^(?:optimizer|optim|optimizer[_ .]step|opt[_ .]step)$", re.I)


def name_mask(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Boolean mask: `pattern.search(name)` for each row (anchor the pattern with ^ to match a prefix)."""
    if len(names) == 0:
        return np.zeros(0, dtype=bool)
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes, uniques = names.cat.codes.to_numpy(), names.cat.categories
    else:
        codes, uniques = pd.factorize(names.astype(object), use_na_sentinel=True)
    hit = np.array([bool(pattern.search(str(u))) for u in uniques] + [False], dtype=bool)
    return hit[codes]  # code -1 (missing name) picks the trailing False


def optimizer_ranges(tl: Timeline) -> pd.DataFrame:
    """Host ranges of optimizer steps: torch's `Optimizer.step#...` annotations or NVTX `optimizer`."""
    r = tl.ranges
    ann = (r["kind"] == "annotation").to_numpy() & name_mask(r["name"], OPTIMIZER_ANNOTATION)
    nvtx = (r["kind"] == "nvtx").to_numpy() & name_mask(r["name"], OPTIMIZER_NVTX)
    return r[ann | nvtx]
