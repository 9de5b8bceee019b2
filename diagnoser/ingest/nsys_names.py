"""Name resolution for an Nsight Systems export: StringIds lookups, string ids -> category codes,
and the frame builder that turns those codes into sorted Categorical columns.

An export stores every kernel and API name as an integer id into StringIds; the readers carry
ids until the end, look each distinct id up once in SQL, and hand the Timeline categoricals, so a
10M-row table holds a few thousand strings.
"""
from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd

from ..ordering import is_sorted
from ..timeline.tables import as_int32
from .sqlite_columns import empty_column

SMALL_IDS = 1 << 24  # string ids below this are mapped through a lookup table


def sqlite_text(value) -> str:
    """A TEXT value as str (SQLite hands back bytes for text that is not valid UTF-8)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def lookup_strings(conn: sqlite3.Connection, tables: set[str], ids: np.ndarray) -> dict[int, str]:
    """StringIds values for the given distinct ids (each looked up once, in SQL)."""
    wanted = [int(i) for i in ids]
    found: dict[int, str] = {}
    if "StringIds" in tables:
        for k in range(0, len(wanted), 500):
            batch = wanted[k:k + 500]
            marks = ",".join("?" * len(batch))
            for i, value in conn.execute(
                    f"SELECT id, value FROM StringIds WHERE id IN ({marks})", batch):
                found[i] = sqlite_text(value)
    return {i: found.get(i, f"<unknown string {i}>") for i in wanted}


def distinct_ids(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct ids (a bitmap when ids are small, as StringIds ids are)."""
    if len(ids) and ids.min() >= 0 and ids.max() < SMALL_IDS:
        return np.flatnonzero(np.bincount(ids))
    return np.unique(ids)


def codes_of_ids(ids: np.ndarray, distinct: np.ndarray, code_of_distinct: list[int]) -> np.ndarray:
    """Per row, the code given to its id (distinct[k] -> code_of_distinct[k]), as int32."""
    codes = np.array(code_of_distinct, np.int32)
    if len(distinct) and distinct[0] >= 0 and distinct[-1] < SMALL_IDS:
        lookup = np.zeros(int(distinct[-1]) + 1, np.int32)
        lookup[distinct] = codes
        return lookup[ids]
    return codes[np.searchsorted(distinct, ids)]


# rows of a part placed a chunk at a time where the parts are merged (each chunk's searches: 8 bytes a row)
MERGE_CHUNK = 1 << 16


def _places(starts: list[np.ndarray], bounds: np.ndarray) -> np.ndarray | None:
    """Where each row of the concatenated parts goes in stable start order (ties keep the parts' order), None
    when it is in order already. Parts each in start order (an export's tables are, in row order) are merged
    by rank: a row's place is its index in its part plus, in every other part, the rows before it (at or below
    its start in an earlier part, below it in a later one); no concatenated copy of the starts and no argsort
    index beside the places (16 of 20 bytes a row at the GPU table's peak). Other parts are sorted whole."""
    n = int(bounds[-1])
    dtype = np.int32 if n < 1 << 31 else np.int64
    if not all(is_sorted(s) for s in starts):
        start = np.concatenate(starts) if len(starts) > 1 else starts[0]
        order = np.argsort(start, kind="stable")
        del start
        dest = np.empty(n, dtype)
        dest[order] = np.arange(n, dtype=dtype)
        return dest
    filled = [s for s in starts if s.size]
    if all(b[0] >= a[-1] for a, b in zip(filled, filled[1:])):
        return None  # (one part, or parts that follow each other)
    dest = np.empty(n, dtype)
    for j, s in enumerate(starts):
        for a in range(0, s.size, MERGE_CHUNK):
            v = s[a:a + MERGE_CHUNK]
            place = np.arange(a, a + v.size, dtype=np.int64)
            for m, other in enumerate(starts):
                if m != j and other.size:
                    place += np.searchsorted(other, v, side="right" if m < j else "left")
            dest[bounds[j] + a:bounds[j] + a + v.size] = place
    return dest


def categorical_frame(parts: list[dict], schema: dict[str, str],
                      categories: dict[str, list[str]]) -> pd.DataFrame:
    """One schema-ordered frame from row groups, sorted by start_ns (stable: ties keep order).

    A part's column is an array or one scalar for all its rows; each column is written once,
    straight to its sorted place, and dropped from the parts as it goes (peak memory). Columns in
    `categories` hold codes into that sorted list and become Categoricals, which compare and sort
    like the strings they stand for.
    """
    sizes = [len(p["start_ns"]) for p in parts]
    bounds = np.cumsum([0] + sizes)
    n = int(bounds[-1])
    dest = _places([np.asarray(p["start_ns"]) for p in parts], bounds)  # row i of the parts goes to dest[i]
    data = {}
    for c, dtype in schema.items():
        dtype = np.dtype(np.int32 if c in categories else dtype)
        first = parts[0][c]
        if len(parts) == 1 and dest is None and isinstance(first, np.ndarray) and first.dtype == dtype:
            out = parts[0].pop(c)  # already in place
        else:
            out = empty_column(n, dtype)
            for p, lo, hi in zip(parts, bounds[:-1], bounds[1:]):
                values = p.pop(c)
                if dtype == np.int32 and c not in categories:  # an id: wrapped into int32, never truncated
                    values = as_int32(values)
                if dest is None:
                    out[lo:hi] = values
                else:
                    out[dest[lo:hi]] = values
                del values
        if c in categories:
            assert categories[c] == sorted(categories[c]), c
            out = pd.Categorical.from_codes(out, categories=categories[c])
        data[c] = out
    return pd.DataFrame(data, copy=False)
