"""Bulk integer columns out of SQLite, in rowid chunks, optionally over worker processes.

Python's sqlite3 cursor costs one tuple plus one object per value, too slow for tens of millions
of rows. So each chunk of CHUNK_ROWS rows comes back as one `group_concat` text per column
(SQLite does the int->text work in C), parsed by numpy. Big tables spread the chunks over worker
processes: SQLite's per-value work dominates and threads contend inside it.

Workers run `python -c WORKER_MAIN` and import only this module (numpy, no pandas), so keep it
free of heavier imports.
"""
from __future__ import annotations

import mmap
import os
import pickle
import queue
import sqlite3
import subprocess
import sys
import warnings
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..progress import Progress

CHUNK_ROWS = 250_000           # rows per group_concat query
PARALLEL_MIN_ROWS = 3_000_000  # below this, worker start-up costs more than it saves
MAX_WORKERS = 16
WORKER_MAIN = "import sys; from diagnoser.ingest.sqlite_columns import serve; serve(sys.argv[1])"


class CorruptColumnError(Exception):
    """SQLite returned something that cannot be the integer column asked for (text, misaligned)."""


class _PoolFailed(Exception):
    """A worker process could not start or died; the caller reads the rest itself."""


@dataclass
class ColumnPlan:
    """Integer columns to pull from one table: output name -> NOT NULL SQL expression."""

    table: str
    exprs: dict[str, str]
    lo: int = 0   # rowid range, inclusive; empty when hi < lo
    hi: int = -1
    int32: frozenset = frozenset()  # ids stored as int32 as each chunk arrives (timeline.tables.as_int32)

    @property
    def sql(self) -> str:
        select = ", ".join(f"group_concat({e})" for e in self.exprs.values())
        return f'SELECT count(*), {select} FROM "{self.table}" WHERE rowid >= ? AND rowid < ?'


def connect_readonly(db_file: Path) -> sqlite3.Connection:
    """Open read-only and immutable: no journal, no lock, the input is never written."""
    conn = sqlite3.connect(f"{db_file.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    conn.text_factory = bytes  # decoded explicitly where text is wanted
    return conn


def read_columns(db_file: Path, conn: sqlite3.Connection, plans: list[ColumnPlan], bar: Progress, *,
                 chunk_rows: int = CHUNK_ROWS, parallel_min_rows: int = PARALLEL_MIN_ROWS,
                 max_workers: int | None = None, worker_main: str = WORKER_MAIN,
                 pool: Callable[..., int] | None = None) -> list[dict[str, np.ndarray]]:
    """Run every plan in rowid chunks (over worker processes for big tables) into int64 arrays (int32
    for a plan's `int32` columns: an id never exists whole as int64).

    One dict of columns per plan, in plan order. `pool` runs chunks over workers (default
    `fetch_in_pool`, called positionally); `max_workers` defaults to min(cpus(), MAX_WORKERS).
    """
    if max_workers is None:
        max_workers = min(cpus(), MAX_WORKERS)
    for plan in plans:  # two subqueries: SQLite answers a lone min() or max() from the b-tree
        lo, hi = conn.execute(f'SELECT (SELECT min(rowid) FROM "{plan.table}"), '
                              f'(SELECT max(rowid) FROM "{plan.table}")').fetchone()
        plan.lo, plan.hi = (lo, hi) if lo is not None else (0, -1)
    spans = [plan.hi - plan.lo + 1 for plan in plans]
    size = db_file.stat().st_size
    for plan, span in zip(plans, spans):  # arrays are sized by the rowid range: check that claim first
        if span > size:
            raise CorruptColumnError(f"table {plan.table} has rowids {plan.lo}..{plan.hi}, more rows than "
                                     f"its {size:,}-byte file can hold")
    from ..timeline.tables import as_int32  # (here: a worker imports this module without pandas)
    out = [{name: empty_column(span, np.int32 if name in plan.int32 else np.int64) for name in plan.exprs}
           for plan, span in zip(plans, spans)]
    filled = [0] * len(plans)
    tasks = [(k, first, min(first + chunk_rows, plan.hi + 1))
             for k, plan in enumerate(plans) for first in range(plan.lo, plan.hi + 1, chunk_rows)]
    bar.total = sum(spans)

    def store(k: int, count: int, arrays: list[np.ndarray]) -> None:
        for name, values in zip(plans[k].exprs, arrays):
            out[k][name][filled[k]:filled[k] + count] = as_int32(values) if name in plans[k].int32 else values
        filled[k] += count
        bar.update(sum(filled))

    workers = min(max_workers, len(tasks)) if sum(spans) >= parallel_min_rows else 1
    done = 0
    if workers > 1:
        done = (pool or fetch_in_pool)(str(db_file), plans, tasks, workers, store, worker_main)
    for k, first, stop in tasks[done:]:
        store(k, *_query_chunk(conn, plans[k].sql, first, stop))
    return [{name: a[:n] if n < len(a) else a for name, a in cols.items()}  # rowid gaps
            for cols, n in zip(out, filled)]


def fetch_in_pool(db: str, plans: list[ColumnPlan], tasks: list, workers: int, store,
                  worker_main: str = WORKER_MAIN) -> int:
    """Run tasks over worker processes, stored in order with a bounded number in flight.

    Returns how many tasks were stored; a pool that cannot start or loses a worker leaves the
    rest to the caller. Workers are fresh interpreters (`python -c`), not multiprocessing's:
    fork is unsafe in a threaded process and spawn would re-run the caller's __main__ script.
    """
    done, finished, threads = 0, False, None
    idle: queue.Queue = queue.Queue()
    procs = []
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")) if p))
        for _ in range(workers):
            procs.append(subprocess.Popen([sys.executable, "-c", worker_main, db], env=env,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL))
            idle.put(procs[-1])

        failed = []

        def run(k: int, first: int, stop: int):
            proc = idle.get()
            try:
                if failed:
                    raise _PoolFailed()
                pickle.dump((plans[k].sql, first, stop), proc.stdin)
                proc.stdin.flush()
                reply = pickle.load(proc.stdout)
            except (OSError, EOFError, pickle.UnpicklingError):
                failed.append(proc)
                raise _PoolFailed() from None
            finally:
                idle.put(proc)  # back even if dead, so no other task waits for it forever
            if reply[0] == "sqlite":
                raise sqlite3.DatabaseError(reply[1])
            if reply[0] == "corrupt":
                raise CorruptColumnError(reply[1])
            return reply[1:]

        threads = ThreadPoolExecutor(workers)
        pending: deque = deque()
        for k, first, stop in tasks:
            pending.append((k, threads.submit(run, k, first, stop)))
            while pending and (len(pending) > 2 * workers or pending[0][1].done()):
                k0, future = pending.popleft()
                store(k0, *future.result())
                done += 1
        while pending:
            k0, future = pending.popleft()
            store(k0, *future.result())
            done += 1
        finished = True
    except (OSError, _PoolFailed):
        pass
    finally:
        for proc in procs:
            if not finished:  # an error or an interrupt: stop the workers now
                proc.kill()
            try:
                proc.stdin.close()
            except OSError:
                pass
        if threads is not None:
            threads.shutdown(wait=True, cancel_futures=True)
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return done


def serve(db: str) -> None:
    """Worker loop: read (sql, first, stop) from stdin, answer with the narrowed column arrays."""
    conn = connect_readonly(Path(db))
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            sql, first, stop = pickle.load(source)
        except EOFError:
            return
        try:
            count, arrays = _query_chunk(conn, sql, first, stop)
            reply = ("ok", count, [_narrowest(a) for a in arrays])
        except sqlite3.DatabaseError as e:
            reply = ("sqlite", str(e))
        except CorruptColumnError as e:
            reply = ("corrupt", str(e))
        pickle.dump(reply, sink, protocol=pickle.HIGHEST_PROTOCOL)
        sink.flush()


def _narrowest(values: np.ndarray) -> np.ndarray:
    """The smallest integer dtype holding `values` (results cross a pipe: fewer bytes)."""
    if len(values) == 0:
        return values
    lo, hi = values.min(), values.max()
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return values.astype(dtype)
    return values


def _query_chunk(conn: sqlite3.Connection, sql: str, first: int, stop: int) -> tuple[int, list[np.ndarray]]:
    """Rows first <= rowid < stop: one group_concat text per column, parsed by numpy.

    group_concat skips NULLs, so every expression is NOT NULL; the row count checks alignment.
    """
    count, *texts = conn.execute(sql, (first, stop)).fetchone()
    arrays = []
    for text in texts:
        try:
            with warnings.catch_warnings():  # numpy < 2.3 warns on unparsable text, later raises
                warnings.simplefilter("ignore", DeprecationWarning)
                values = np.fromstring(text, dtype=np.int64, sep=",") if count else np.empty(0, np.int64)
        except ValueError:
            values = None
        if values is None or len(values) != count:
            raise CorruptColumnError(f"a column holds something other than {count} integers")
        arrays.append(values)
    return count, arrays


def cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def empty_column(n: int, dtype) -> np.ndarray:
    """np.empty for the big columns, on an anonymous mmap: numpy advises transparent huge pages
    for large arrays, and on the VMs measured the first touch of those pages (compaction) made
    filling 1.5 GB of columns take 2.9 s instead of 0.5 s (benchmarks/bench_nsys.py)."""
    dtype = np.dtype(dtype)
    if n * dtype.itemsize < 1 << 22:
        return np.empty(n, dtype)
    return np.frombuffer(mmap.mmap(-1, n * dtype.itemsize), dtype=dtype, count=n)
