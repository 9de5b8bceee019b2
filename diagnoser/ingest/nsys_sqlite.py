"""Nsight Systems SQLite export (`nsys export --type sqlite`) -> normalized `Timeline`.

Only normalizes: CUPTI kernel/memcpy/memset rows become `gpu`, CUDA runtime/driver API calls
become `host`, NVTX ranges become `ranges`; no metric is computed here. Every table is optional.

Speed: a 10M-kernel export must load in seconds. Each table's integer columns are pulled in bulk
by `sqlite_columns` (group_concat chunks parsed by numpy, worker processes for big exports); the
readers only say which columns and map them. Strings stay integer ids until the end and become
categoricals, each distinct id looked up once in SQL.

This module is the entry point: it checks the file (gzip, SQLite header, an nsys export at all),
fetches the bulk columns and assembles the Timeline. What each SQLite table family holds and how
it maps to a table is in nsys_tables.py; StringIds lookups and categorical frames in nsys_names.py.
"""
from __future__ import annotations

import pickle  # noqa: F401  (tests patch pickle.load through this module; see _serve below)
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import InputError
from .input_files import gunzip_to, is_gzip, regular_file
from ..progress import NULL_PROGRESS, Progress
from ..timeline.tables import Timeline
from .nsys_host import read_host_threads
from .nsys_names import sqlite_text
from .nsys_tables import CorruptExport, ExportReader
from .sqlite_columns import (
    CHUNK_ROWS,
    MAX_WORKERS,
    PARALLEL_MIN_ROWS,
    WORKER_MAIN,
    ColumnPlan,
    CorruptColumnError,
    connect_readonly,
    cpus,
    fetch_in_pool,
    read_columns,
    serve,
)

SQLITE_MAGIC = b"SQLite format 3\x00"
# Tables whose presence marks a file as an Nsight Systems export.
NSYS_MARKERS = ("StringIds", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME")


def read_nsys_sqlite(path, progress: bool = False) -> Timeline:
    """Read an Nsight Systems SQLite export (plain or gzipped) into a validated Timeline."""
    shown = Path(path)
    regular_file(shown)
    bar = Progress(f"reading {shown.name}", unit="rows") if progress else NULL_PROGRESS
    try:
        with _plain_sqlite(shown) as db_file:
            _check_header(shown, db_file)
            conn = connect_readonly(db_file)
            try:
                return _read_timeline(shown, db_file, conn, bar)
            except sqlite3.DatabaseError as e:
                raise InputError(shown, _sqlite_problem(e)) from None
            except (CorruptExport, CorruptColumnError) as e:
                raise InputError(shown, f"corrupt Nsight Systems export ({e})") from None
            except (ValueError, OverflowError) as e:  # a text or blob where the schema has integers
                raise InputError(shown, f"corrupt Nsight Systems export (a value of the wrong type: {e})") from None
            finally:
                conn.close()
    finally:
        bar.close()


@contextmanager
def _plain_sqlite(path: Path) -> Iterator[Path]:
    """Yield a path SQLite can open: the file itself, or a temporary gunzipped copy (always removed).

    A gzipped file's first bytes are checked before anything is written to the temporary folder.
    """
    if not is_gzip(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="diagnoser-nsys-") as tmp:
        plain = Path(tmp) / (path.name[:-3] if path.name.endswith(".gz") else path.name + ".sqlite")
        gunzip_to(path, plain, check_head=lambda head: _check_head(path, head))
        yield plain


def _check_head(shown: Path, head: bytes) -> int | None:
    """The 100-byte SQLite header: magic, a valid page size and the fixed payload fractions.
    Returns the database size the header declares (None when its page count is not valid)."""
    if not head:
        raise InputError(shown, "file is empty; expected an Nsight Systems SQLite export")
    if not head.startswith(SQLITE_MAGIC) or len(head) < 100:
        raise InputError(shown, "not an SQLite database; expected an Nsight Systems SQLite export "
                                "(nsys export --type sqlite)")
    page_size = int.from_bytes(head[16:18], "big")
    if not (page_size == 1 or (512 <= page_size <= 32768 and page_size & (page_size - 1) == 0)) \
            or head[21:24] != b"\x40\x20\x20":
        raise InputError(shown, "corrupt SQLite header (invalid page size or payload fractions); "
                                "expected an Nsight Systems SQLite export")
    pages = int.from_bytes(head[28:32], "big")
    # The in-header page count is valid when the change counter equals version-valid-for.
    if head[24:28] == head[92:96] and pages:
        return pages * (65536 if page_size == 1 else page_size)
    return None


def _check_header(shown: Path, db_file: Path) -> None:
    """Reject empty, non-SQLite and visibly truncated files before SQLite sees them."""
    size = db_file.stat().st_size
    with open(db_file, "rb") as f:
        head = f.read(100)
    declared = _check_head(shown, head)
    if declared and size < declared:
        raise InputError(shown, f"truncated SQLite database ({size} of {declared} bytes)")


def _sqlite_problem(e: sqlite3.DatabaseError) -> str:
    """SQLite's message without the schema text it quotes (that can span many lines)."""
    text = str(e)
    if text.startswith("malformed database schema"):
        text = text.split(" - ", 1)[0]
    return f"corrupt or truncated SQLite database ({text})"


def _read_timeline(shown: Path, db_file: Path, conn: sqlite3.Connection, bar: Progress) -> Timeline:
    tables = {sqlite_text(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not any(t in tables for t in NSYS_MARKERS) and not any(
            t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_", "TARGET_INFO_")) for t in tables):
        raise InputError(shown, "an SQLite database, but not an Nsight Systems export "
                                "(no StringIds, CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)")
    reader = ExportReader(conn, tables)
    plans = {"kernel": reader.kernel_plan(), "memcpy": reader.memcpy_plan(),
             "memset": reader.memset_plan(), "graph": reader.graph_plan(), "host": reader.host_plan()}
    plans = {k: v for k, v in plans.items() if v is not None}
    fetched = _fetch(db_file, conn, list(plans.values()), bar)
    data = dict(zip(plans, fetched))
    del fetched  # the tables below pop their columns from `data` as they are built: no other reference
    graphs = int(data["graph"]["start_ns"].size) if "graph" in data else 0
    gpu = reader.gpu(data)
    if len(gpu) == 0 and "host" not in data:
        raise InputError(shown, "no CUDA activity: the export has no kernel, memcpy or memset rows "
                                "and no CUDA API table; profile with `nsys profile -t cuda,nvtx ...`")
    timeline = Timeline(path=str(shown), source="nsys", gpu=gpu, host=reader.host(data.get("host")),
                        ranges=reader.ranges(), devices=reader.devices(), clock_epoch_ns=reader.clock_epoch_ns(),
                        memory=reader.memory(), host_threads=read_host_threads(conn, tables),
                        notes=_graph_note(graphs) + _process_note(reader.kernel_pids))
    return timeline.validate()


def _graph_note(graphs: int) -> list[str]:
    if not graphs:
        return []
    return [f"{graphs:,} CUDA graph replays are traced whole (Nsight Systems' default --cuda-graph-trace=graph): each "
            "counts as GPU work for its span, its kernels are not listed; for per-kernel facts re-profile with "
            "`nsys profile --cuda-graph-trace=node`"]


def _process_note(pids) -> list[str]:
    if len(pids) < 2:
        return []
    shown = ", ".join(str(int(p)) for p in pids[:8]) + (", ..." if len(pids) > 8 else "")
    return [f"the export holds the GPU work of {len(pids)} processes (pids {shown}), analysed as one timeline: for the "
            "ranks of a distributed run, write one export per rank (`nsys profile -o report_%q{RANK} ...`, or one "
            "`nsys profile` per process) and pass them all"]


# -- bulk integer columns ------------------------------------------------------------------------

# The pool's tuning and seams, read from this module at each call so they can be set here
# (tests/test_nsys_reader.py forces the worker pool on small exports and breaks its workers
# through these names and `pickle`).
_cpus, _fetch_in_pool, _serve = cpus, fetch_in_pool, serve


def _fetch(db_file: Path, conn: sqlite3.Connection, plans: list[ColumnPlan], bar: Progress) -> list[dict]:
    """Every plan's columns as int64 arrays; a `dur_ns` column comes back as `end_ns`."""
    results = read_columns(db_file, conn, plans, bar, chunk_rows=CHUNK_ROWS,
                           parallel_min_rows=PARALLEL_MIN_ROWS, max_workers=min(_cpus(), MAX_WORKERS),
                           worker_main=WORKER_MAIN, pool=_fetch_in_pool)
    for cols in results:
        if "dur_ns" in cols:  # durations travel as fewer digits than end times
            dur = cols.pop("dur_ns")
            cols["end_ns"] = np.add(dur, cols["start_ns"], out=dur)
    return results

