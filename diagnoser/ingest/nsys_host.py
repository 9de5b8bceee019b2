"""What the host threads did besides CUDA calls, from an Nsight Systems export: OS runtime calls
(`-t osrt`: OSRT_API), CPU samples (`--sample`: COMPOSITE_EVENTS, the leaf frame of each one's
SAMPLING_CALLCHAINS chain) and thread scheduling (`--cpuctxsw`: SCHED_EVENTS in/out pairs), as the
Timeline's HostThreads tables (timeline/tables.py). Each table is read in one ordered pass, only the
columns needed, in chunks; names are looked up once per distinct string id. Absent tables are left
empty and out of `traced`, so the analysis can say what was not recorded.
"""
from __future__ import annotations

import sqlite3
from pathlib import PurePosixPath

import numpy as np
import pandas as pd

from ..timeline.tables import (OS_CALL_COLUMNS, RUNNING_COLUMNS, SAMPLE_COLUMNS, HostThreads,
                               empty_table)
from .nsys_tables import CorruptExport
from .nsys_names import codes_of_ids, distinct_ids, lookup_strings, sqlite_text

TID_MOD = 0x1000000  # globalTid = ... | pid << 24 | tid (as nsys_tables)
CHUNK = 1 << 16
RUNNING_STATE = "Running"  # ENUM_SAMPLING_THREAD_STATE name of a sample taken while the thread ran


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {sqlite_text(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')}


def _rows(conn: sqlite3.Connection, table: str, sql: str, width: int) -> np.ndarray:
    """All rows of a query (integers, no NULLs: the SQL coalesces) as an (n, width) int64 array, in chunks;
    text, blobs, reals or NULLs where the schema has integers make the export corrupt."""
    cur = conn.execute(sql)
    parts = []
    while True:
        chunk = cur.fetchmany(CHUNK)
        if not chunk:
            break
        a = np.array(chunk)  # int64 only when every value is an int that fits (else float, str, object, uint64)
        if a.dtype != np.int64:
            if not all(type(v) is int for r in chunk for v in r):
                raise CorruptExport(f"table {table} holds a value that is not an integer where the schema has one")
            try:
                a = np.array(chunk, dtype=np.int64)
            except OverflowError:
                raise CorruptExport(f"table {table} holds an integer beyond 64 bits") from None
        parts.append(a.reshape(-1, width))
    return np.concatenate(parts) if parts else np.zeros((0, width), np.int64)


def _names(conn: sqlite3.Connection, tables: set[str], ids: np.ndarray, short: bool = False) -> pd.Categorical:
    """Per row, the StringIds value of its id (a Categorical; "" for -1); modules shortened to a file name."""
    ok = ids >= 0
    distinct = distinct_ids(ids[ok]) if ok.any() else np.zeros(0, np.int64)
    found = lookup_strings(conn, tables, distinct)
    labels = [found[int(i)] for i in distinct]
    if short:
        labels = [PurePosixPath(s).name or s for s in labels]
    cats = sorted(set(labels) | {""})
    pos = {c: k for k, c in enumerate(cats)}
    codes = np.full(ids.size, pos[""], np.int32)
    if ok.any():
        codes[ok] = codes_of_ids(ids[ok], distinct, [pos[s] for s in labels])
    return pd.Categorical.from_codes(codes, categories=cats)


def _os_calls(conn: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    if not {"start", "end", "nameId", "globalTid"} <= _columns(conn, "OSRT_API"):
        return empty_table(OS_CALL_COLUMNS)
    a = _rows(conn, "OSRT_API", "SELECT start, coalesce(end, start), coalesce(nameId, -1), coalesce(globalTid, -1) "
                                "FROM OSRT_API ORDER BY start", 4)
    return pd.DataFrame({"name": _names(conn, tables, a[:, 2]), "start_ns": a[:, 0], "end_ns": a[:, 1],
                         "thread": np.where(a[:, 3] >= 0, a[:, 3] % TID_MOD, -1)})


def _running_state(conn: sqlite3.Connection, tables: set[str]) -> int:
    if "ENUM_SAMPLING_THREAD_STATE" in tables:
        for i, name, *_ in conn.execute("SELECT id, name FROM ENUM_SAMPLING_THREAD_STATE"):
            if sqlite_text(name) == RUNNING_STATE:
                return int(i)
    return 1


def _samples(conn: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    cols = _columns(conn, "COMPOSITE_EVENTS")
    if not {"id", "start", "globalTid"} <= cols:
        return empty_table(SAMPLE_COLUMNS)
    state = "coalesce(e.threadState, -1)" if "threadState" in cols else "-1"
    chain = "SAMPLING_CALLCHAINS" in tables and {"id", "symbol", "module", "stackDepth"} <= _columns(conn, "SAMPLING_CALLCHAINS")
    leaf = ("coalesce(k.symbol, -1), coalesce(k.module, -1) FROM COMPOSITE_EVENTS e LEFT JOIN SAMPLING_CALLCHAINS k "
            "ON k.id = e.id AND k.stackDepth = 0") if chain else "-1, -1 FROM COMPOSITE_EVENTS e"
    a = _rows(conn, "COMPOSITE_EVENTS", f"SELECT e.start, coalesce(e.globalTid, -1), {state}, {leaf} ORDER BY e.start", 5)
    running = _running_state(conn, tables)
    return pd.DataFrame({"start_ns": a[:, 0], "thread": np.where(a[:, 1] >= 0, a[:, 1] % TID_MOD, -1),
                         "running": (a[:, 2] == running) | (a[:, 2] < 0),
                         "function": _names(conn, tables, a[:, 3]), "module": _names(conn, tables, a[:, 4], short=True)})


def _running(conn: sqlite3.Connection) -> pd.DataFrame:
    """Scheduled-in spans per thread from the in/out events (one ordered pass: thread, then time)."""
    if not {"start", "isSchedIn", "globalTid"} <= _columns(conn, "SCHED_EVENTS"):
        return empty_table(RUNNING_COLUMNS)
    a = _rows(conn, "SCHED_EVENTS", "SELECT coalesce(globalTid, -1) % 16777216, start, coalesce(isSchedIn != 0, 0) "
                                    "FROM SCHED_EVENTS ORDER BY 1, start", 3)
    if a.shape[0] == 0:
        return empty_table(RUNNING_COLUMNS)
    tid, t, sched_in = a[:, 0], a[:, 1], a[:, 2].astype(bool)
    lo, hi = int(t.min()), int(t.max())
    first = np.ones(tid.size, bool)
    first[1:] = tid[1:] != tid[:-1]
    last = np.ones(tid.size, bool)
    last[:-1] = tid[1:] != tid[:-1]
    nxt = np.arange(tid.size) + 1
    # an in event runs to the next event of its thread (normally its out; a repeated in ends the span)
    ins = np.flatnonzero(sched_in & ~last)
    starts, ends, threads = [t[ins]], [t[nxt[ins]]], [tid[ins]]
    tail = np.flatnonzero(sched_in & last)  # still running at the last event
    starts.append(t[tail]), ends.append(np.full(tail.size, hi, np.int64)), threads.append(tid[tail])
    head = np.flatnonzero(~sched_in & first)  # running since before the first event
    starts.append(np.full(head.size, lo, np.int64)), ends.append(t[head]), threads.append(tid[head])
    s, e, th = np.concatenate(starts), np.concatenate(ends), np.concatenate(threads)
    order = np.argsort(s, kind="stable")
    return pd.DataFrame({"start_ns": s[order], "end_ns": e[order], "thread": th[order]})


def _thread_names(conn: sqlite3.Connection, tables: set[str]) -> dict:
    """Thread id -> its OS name (ThreadNames: nameId, globalTid), for the threads an export names."""
    if "ThreadNames" not in tables or not {"nameId", "globalTid"} <= _columns(conn, "ThreadNames"):
        return {}
    a = _rows(conn, "ThreadNames", "SELECT coalesce(globalTid, -1), coalesce(nameId, -1) FROM ThreadNames", 2)
    a = a[(a[:, 0] >= 0) & (a[:, 1] >= 0)]
    if not a.shape[0]:
        return {}
    found = lookup_strings(conn, tables, distinct_ids(a[:, 1]))
    return {int(t % TID_MOD): str(found.get(int(i), "")) for t, i in a.tolist()}


def read_host_threads(conn: sqlite3.Connection, tables: set[str]) -> HostThreads:
    """The HostThreads tables of an export (each empty, and left out of `traced`, when not recorded)."""
    traced = set()
    h = HostThreads()
    if "OSRT_API" in tables:
        h.os_calls, traced = _os_calls(conn, tables), traced | {"osrt"}
    if "COMPOSITE_EVENTS" in tables:
        h.samples, traced = _samples(conn, tables), traced | {"samples"}
    if "SCHED_EVENTS" in tables:
        h.running, traced = _running(conn), traced | {"sched"}
    h.traced = frozenset(traced)
    h.names = _thread_names(conn, tables)
    return h
