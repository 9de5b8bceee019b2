"""A Timeline as plain numpy arrays, with what every metric derives from it computed once.

Timeline tables can hold tens of millions of rows (a 10M-kernel Nsight Systems export has about
20M CUDA API calls), so the metrics never copy or filter whole DataFrames: they read columns as
arrays (no copy), match names once per distinct name (integer codes, see `Names`), and share the
GPU-row -> launch-call join, done once by sorted-array search rather than a hash map.
"""
from __future__ import annotations

import re
import weakref
from functools import cached_property

import numpy as np
import pandas as pd

from ..case_blind import ascii_lower, found_each
from ..ordering import is_sorted
from .api_kinds import API_KINDS, api_kind
from .intervals import searchsorted
from .op_tree import OpTree
from .tables import Timeline


def codes_of(values: pd.Series) -> tuple[np.ndarray, object]:
    """Integer code per row (-1: missing) and the distinct values the codes index."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.array.codes, values.cat.categories  # (the column's own codes, read-only: `.cat.codes` copies)
    return pd.factorize(values.astype(object), use_na_sentinel=True)


_TAKE_CHUNK = 1 << 16


def take(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """`np.take(table, index)` a chunk of rows at a time: np.take first converts a narrow index (int8 name
    codes, int32 ids) to an intp copy of every row, 8 bytes a row beside a result of 1."""
    if index.size <= _TAKE_CHUNK or index.dtype == np.intp:
        return np.take(table, index)
    out = np.empty(index.size, table.dtype)
    for i in range(0, index.size, _TAKE_CHUNK):
        out[i:i + _TAKE_CHUNK] = np.take(table, index[i:i + _TAKE_CHUNK])
    return out


def true_rows(mask: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """`np.flatnonzero(mask)[idx]` (the rows of the idx-th True values, e.g. of a tree over the op rows) without
    the row list of every True when the False rows are fewer: True number i lies past the False rows that have
    at most i Trues before them."""
    false = np.flatnonzero(~mask)
    if false.size * 2 > mask.size:
        return np.flatnonzero(mask)[idx]
    trues_before = false - np.arange(false.size)
    return idx + np.searchsorted(trues_before, idx, side="right")


class RowRuns:
    """Rows of a table as runs of consecutive rows, [starts[i], stops[i]) in increasing order: a selection
    that is a few long runs (the steady steps' GPU rows: about a run a step) without an index of every row
    (8 bytes a row, kept as long as the selection). `take(values)` is `values[rows]` (a new array)."""

    def __init__(self, starts: np.ndarray, stops: np.ndarray):
        self.starts, self.stops = starts.astype(np.int64), stops.astype(np.int64)
        self.offsets = np.concatenate(([0], np.cumsum(self.stops - self.starts)))  # position of each run's first row

    @classmethod
    def of_mask(cls, mask: np.ndarray) -> "RowRuns":
        """The runs of True rows of a mask (found from its edges: no index of every row)."""
        if not mask.size:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))
        edge = np.diff(mask.view(np.int8))  # +1 where a run begins (after), -1 where one ends
        starts, stops = np.flatnonzero(edge == 1) + 1, np.flatnonzero(edge == -1) + 1
        del edge
        if mask[0]:
            starts = np.concatenate(([0], starts))
        if mask[-1]:
            stops = np.concatenate((stops, [mask.size]))
        return cls(starts, stops)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def take(self, values: np.ndarray) -> np.ndarray:
        out = np.empty(len(self), dtype=values.dtype)
        for k, (a, b) in enumerate(zip(self.starts.tolist(), self.stops.tolist())):
            out[self.offsets[k]:self.offsets[k + 1]] = values[a:b]
        return out

    def part(self, a: int, b: int):
        """The rows at positions a..b - 1 of the selection: a slice within one run, else an index array."""
        b = min(b, len(self))
        if a >= b:
            return slice(0, 0)
        k = int(np.searchsorted(self.offsets, a, side="right")) - 1
        if b <= self.offsets[k + 1]:
            first = int(self.starts[k] + (a - self.offsets[k]))
            return slice(first, first + (b - a))
        return self.rows_at(np.arange(a, b))

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """The row at each position of the selection."""
        k = np.searchsorted(self.offsets, positions, side="right") - 1
        return self.starts[k] + (positions - self.offsets[k])

    def positions_of(self, rows: np.ndarray) -> np.ndarray:
        """For each row, the positions of the selection's rows before it (np.searchsorted(index, rows, "left"))."""
        k = np.searchsorted(self.starts, rows, side="right") - 1  # the last run starting at or before the row
        ok = k >= 0
        k = np.maximum(k, 0)
        inside = np.minimum(rows, self.stops[k]) - self.starts[k]
        return np.where(ok, self.offsets[k] + np.maximum(inside, 0), 0)


def take_rows(values: np.ndarray, rows) -> np.ndarray:
    """`values[rows]` for rows a slice, an index array, a mask or RowRuns."""
    return rows.take(values) if isinstance(rows, RowRuns) else values[rows]


# what is worked out per distinct name (the names as str, lower-cased, each pattern's hits), per categories Index:
# a categorical column, every subset of its rows and every later read of it hold the same one, so the analyses'
# many matches of one column (name_mask on a table's rows) share it; an entry goes when its Index does
_SHARED_CACHES: dict[int, tuple] = {}


def _shared_cache(uniques) -> dict:
    key = id(uniques)
    hit = _SHARED_CACHES.get(key)
    if hit is not None and hit[0]() is uniques:
        return hit[1]
    cache: dict = {}
    _SHARED_CACHES[key] = (weakref.ref(uniques, lambda _, key=key: _SHARED_CACHES.pop(key, None)), cache)
    return cache


class Names:
    """A name column as codes into its distinct values; a pattern is matched once per distinct name."""

    def __init__(self, codes: np.ndarray, uniques, categorical: bool, cache: dict | None = None):
        self.codes = codes
        self.uniques = uniques
        self.categorical = categorical
        self._cache = {} if cache is None else cache  # shared with subsets: same uniques

    @classmethod
    def of(cls, values: pd.Series) -> "Names":
        codes, uniques = codes_of(values)
        categorical = isinstance(values.dtype, pd.CategoricalDtype)
        return cls(codes, uniques, categorical, _shared_cache(uniques) if categorical else None)

    def __len__(self) -> int:
        return int(self.codes.size)

    def subset(self, rows) -> "Names":
        """The names of some rows (a mask, an index array, a slice or RowRuns)."""
        return Names(take_rows(self.codes, rows), self.uniques, self.categorical, self._cache)

    def per_unique(self, key, label, missing) -> np.ndarray:
        """`label(str(name))` for each distinct name, plus `missing` last (picked by code -1)."""
        if key not in self._cache:
            self._cache[key] = np.array([label(u) for u in self.strings()] + [missing])
        return self._cache[key]

    def strings(self) -> list[str]:
        """The distinct names as a list of str (iterating a pandas Index boxes every element)."""
        if "str" not in self._cache:
            self._cache["str"] = [str(u) for u in np.asarray(self.uniques, dtype=object).tolist()]
        return self._cache["str"]

    def hits(self, pattern: re.Pattern) -> np.ndarray:
        key = ("search", pattern)
        if key not in self._cache:  # (a case-blind pattern's twin searches the names lower-cased once: case_blind)
            self._cache[key] = np.array(found_each(pattern, self.strings(), self.lowered()) + [False], dtype=bool)
        return self._cache[key]

    def lowered(self) -> list[str | None]:
        """The distinct names lower-cased where ASCII (None where not: case_blind.ascii_lower)."""
        if "lower" not in self._cache:
            self._cache["lower"] = [ascii_lower(s) for s in self.strings()]
        return self._cache["lower"]

    def mask(self, pattern: re.Pattern) -> np.ndarray:
        """Boolean mask: `pattern.search(name)` for each row (never for a missing name)."""
        if self.codes.size == 0:
            return np.zeros(0, dtype=bool)
        return take(self.hits(pattern), self.codes)  # (code -1, missing, takes the trailing False)

    def equals(self, value: str) -> np.ndarray:
        """Rows whose name is exactly `value`."""
        hit = np.array([u == value for u in np.asarray(self.uniques, dtype=object).tolist()] + [False], dtype=bool)
        return hit[self.codes]

    def sum_by_name(self, weights: np.ndarray) -> pd.Series:
        """`DataFrame.groupby("name")[col].sum()` over these rows: observed names only, in groupby's
        order (category order for a categorical column, sorted values otherwise), int64 sums."""
        n, weights = len(self.uniques), np.asarray(weights)
        sums, seen = np.zeros(n), np.zeros(n, dtype=np.int64)
        exact = None  # int64 sums, where float ones could round (weights of 2**53 or more in all)
        for a in range(0, self.codes.size, _TAKE_CHUNK):  # (a chunk at a time: no copies of every row)
            codes, w = self.codes[a:a + _TAKE_CHUNK], np.asarray(weights[a:a + _TAKE_CHUNK], dtype=np.int64)
            ok = codes >= 0
            if not ok.all():
                codes, w = codes[ok], w[ok]
            if exact is None and float(np.abs(w).sum()) + float(np.abs(sums).sum()) >= 2 ** 52:
                exact = np.rint(sums).astype(np.int64)
            if exact is None:  # float accumulation is exact
                sums += np.bincount(codes, weights=w, minlength=n)
            else:
                np.add.at(exact, codes, w)
            seen += np.bincount(codes, minlength=n)
        sums = np.rint(sums).astype(np.int64) if exact is None else exact
        seen = np.flatnonzero(seen > 0)
        if not self.categorical:
            seen = np.array(sorted(seen.tolist(), key=lambda i: self.uniques[i]), dtype=np.int64)
        return pd.Series(sums[seen], index=pd.Index([self.uniques[i] for i in seen], dtype=object, name="name"),
                         name="dur_ns")


def values_at(column: pd.Series, rows) -> np.ndarray:
    """`column.to_numpy()[rows]` (an index array or a mask) without every row's value made first: a
    Categorical of 21M CUDA calls would become 21M object pointers for the few rows wanted."""
    return np.asarray(column.array[rows], dtype=object)


def first_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
    """Sorted distinct non-negative keys, and the row where each first occurs (an int when the
    rows are consecutive from there: keys already sorted and distinct)."""
    if is_sorted(keys):
        lo = int(np.searchsorted(keys, 0))  # negative keys (unknown) come first
        if keys.size - lo < 2 or bool((keys[lo + 1:] != keys[lo:-1]).all()):  # each key once
            return keys[lo:], lo
        order, sk = None, keys
    else:
        order = np.argsort(keys, kind="stable")  # stable: the first occurrence comes first
        sk = keys[order]
    first = np.empty(sk.size, dtype=bool)
    if sk.size:
        first[0] = True
        np.not_equal(sk[1:], sk[:-1], out=first[1:])
        first &= sk >= 0
    rows = np.flatnonzero(first)
    return sk[rows], (rows if order is None else order[rows])


def lookup(keys: np.ndarray, rows: np.ndarray | int, queries: np.ndarray) -> np.ndarray:
    """Row of each query in (sorted keys, rows), or -1 where the key is absent."""
    if keys.size == 0 or queries.size == 0:
        return np.full(queries.size, -1, dtype=np.int64)
    order = None if is_sorted(queries) else np.argsort(queries, kind="stable")
    q = queries if order is None else queries[order]  # sorted queries: cache-friendly search
    i = searchsorted(keys, q, "left")
    np.minimum(i, keys.size - 1, out=i)
    missing = keys[i] != q
    if isinstance(rows, int):
        i += rows
    else:
        i = rows[i]
    i[missing] = -1
    if order is None:
        return i
    out = np.empty(queries.size, dtype=np.int64)
    out[order] = i
    return out


def _gather(values: np.ndarray, rows: np.ndarray, default) -> np.ndarray:
    """values[rows], or `default` (an array like rows, or a number) where rows is -1."""
    out = values[np.maximum(rows, 0)] if values.size else np.zeros(rows.size, dtype=np.int64)
    np.copyto(out, default, where=rows < 0)
    return out


class TimelineView:
    """Column arrays of one Timeline and the derived arrays the metrics share (each built once)."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        gpu, host = tl.gpu, tl.host
        self.gpu_start = gpu["start_ns"].to_numpy(dtype=np.int64)
        self.gpu_end = gpu["end_ns"].to_numpy(dtype=np.int64)
        self.gpu_corr = gpu["correlation"].to_numpy()  # int32 ids: no int64 copy
        self.host_start = host["start_ns"].to_numpy(dtype=np.int64)
        self.host_end = host["end_ns"].to_numpy(dtype=np.int64)
        self.host_corr = host["correlation"].to_numpy()

    @cached_property
    def gpu_names(self) -> Names:
        return Names.of(self.tl.gpu["name"])

    @cached_property
    def host_names(self) -> Names:
        return Names.of(self.tl.host["name"])

    @cached_property
    def host_api(self) -> np.ndarray:
        """Kind of each host API call as an index into API_KINDS (vendor-neutral; see api_kinds)."""
        if self.host_start.size == 0:
            return np.zeros(0, dtype=np.int8)
        names = self.host_names
        per = names.per_unique("api_kind", lambda n: API_KINDS.index(api_kind(n)), API_KINDS.index("other"))
        return per.astype(np.int8)[names.codes]

    def host_is(self, *kinds: str) -> np.ndarray:
        """Mask of host API calls of any of these kinds (a lookup per call in a table of the kinds: np.isin
        of 21M int8 kinds costs 4x as much)."""
        table = np.zeros(len(API_KINDS), dtype=bool)
        table[[API_KINDS.index(k) for k in kinds]] = True
        return take(table, self.host_api)

    @cached_property
    def gpu_kind(self) -> Names:
        return Names.of(self.tl.gpu["kind"])

    @cached_property
    def is_kernel(self) -> np.ndarray:
        return self.gpu_kind.equals("kernel")

    @cached_property
    def is_memcpy(self) -> np.ndarray:
        return self.gpu_kind.equals("memcpy")

    @cached_property
    def launch_row(self) -> np.ndarray:
        """Host row of each gpu row's launch call (the first call with its correlation id), or -1."""
        keys, rows = first_rows(self.host_corr)
        row = lookup(keys, rows, self.gpu_corr)
        return row.astype(np.int32) if self.host_start.size < 1 << 31 else row  # (kept all along: half the size)

    @cached_property
    def launch_known(self) -> np.ndarray:
        """Whether the gpu row's launch call is in the trace (work launched before it starts has none)."""
        return self.launch_row >= 0

    @cached_property
    def launch_ns(self) -> np.ndarray:
        """Host time each gpu row was launched (its call's start), else the row's own start."""
        return _gather(self.host_start, self.launch_row, self.gpu_start)

    def launch_ns_of(self, rows) -> np.ndarray:
        """`launch_ns[rows]` (a slice, an index array or a mask) without every row's built and kept."""
        if "launch_ns" in self.__dict__:
            return take_rows(self.launch_ns, rows)
        return _gather(self.host_start, take_rows(self.launch_row, rows), take_rows(self.gpu_start, rows))

    @cached_property
    def op_tree(self) -> OpTree:
        """The CPU operators' tree (ranges of kind op; its `rows` index those ranges in table order)."""
        ranges = self.tl.ranges
        return OpTree.of_table(ranges, (ranges["kind"] == "op").to_numpy())

    @cached_property
    def modelled_op_tree(self) -> OpTree | None:
        """The tree of the ops the perf model covers (op_shapes rows: the per-op roofline's); None without shapes."""
        shapes = getattr(self.tl, "op_shapes", None)
        return None if shapes is None else OpTree.of_table(shapes)

    def forget(self, *names: str) -> None:
        """Drop derived arrays (cached properties) until their next use, which builds them again: what the stages
        before a long timeline's memory peak need and the ones at it do not (8 bytes a GPU row for launch_ns)."""
        for name in names:
            self.__dict__.pop(name, None)

    def returned_ns(self) -> np.ndarray:
        """When each gpu row's launch call returned on the host; -1 when unknown."""
        return _gather(self.host_end, self.launch_row, -1)
