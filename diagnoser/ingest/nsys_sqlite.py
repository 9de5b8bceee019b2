"""Nsight Systems SQLite export (`nsys export --type sqlite`) -> normalized `Timeline`.

Only normalizes: CUPTI kernel/memcpy/memset rows become `gpu`, CUDA runtime/driver API calls
become `host`, NVTX ranges become `ranges`; no metric is computed here. Every table is optional.

Speed: a 10M-kernel export must load in seconds. Each table's integer columns are pulled in bulk
by `sqlite_columns` (group_concat chunks parsed by numpy, worker processes for big exports); this
module only says which columns and maps them. Strings stay integer ids until the end and become
categoricals, each distinct id looked up once in SQL.
"""
from __future__ import annotations

import pickle  # noqa: F401  (tests patch pickle.load through this module; see _serve below)
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..inputs import gunzip_to, is_gzip, regular_file
from ..progress import NULL_PROGRESS, Progress
from ..timeline.tables import (
    GPU_COLUMNS,
    GPU_KINDS,
    HOST_COLUMNS,
    RANGE_COLUMNS,
    RANGE_KINDS,
    Timeline,
    empty_table,
)
from .sqlite_columns import (
    CHUNK_ROWS,
    MAX_WORKERS,
    PARALLEL_MIN_ROWS,
    WORKER_MAIN,
    ColumnPlan,
    CorruptColumnError,
    connect_readonly,
    cpus,
    empty_column,
    fetch_in_pool,
    read_columns,
    serve,
)

SQLITE_MAGIC = b"SQLite format 3\x00"
TID_MOD = 0x1000000  # globalTid = ... | pid << 24 | tid
# Tables whose presence marks a file as an Nsight Systems export.
NSYS_MARKERS = ("StringIds", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME")
GPU_TABLES = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
              "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
# ENUM_CUDA_MEMCPY_OPER ids (stable since CUPTI's CUpti_ActivityMemcpyKind); arrays count as device.
COPY_KIND_BY_ID = {1: "HtoD", 2: "DtoH", 3: "HtoD", 4: "DtoH", 5: "DtoD", 6: "DtoD", 7: "DtoD",
                   8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
COPY_KIND_BY_ENUM_NAME = {"HTOD": "HtoD", "DTOH": "DtoH", "HTOA": "HtoD", "ATOH": "DtoH",
                          "ATOA": "DtoD", "ATOD": "DtoD", "DTOA": "DtoD", "DTOD": "DtoD",
                          "HTOH": "HtoH", "PTOP": "PtoP", "UVM_HTOD": "HtoD", "UVM_DTOH": "DtoH",
                          "UVM_DTOD": "DtoD"}
COPY_CATEGORIES = sorted(("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", ""))
RANGE_CATEGORIES = sorted(RANGE_KINDS)
SMALL_IDS = 1 << 24  # string ids below this are mapped through a lookup table
PAGEABLE_MEM_KIND = 0  # ENUM_CUDA_MEM_KIND CUDA_MEMOPR_MEMORY_KIND_PAGEABLE
NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}
NVTX_DOMAIN_CREATE = 75
API_VERSION_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel


class _Corrupt(Exception):
    """Data that SQLite accepted but that cannot be a valid export (a required column missing);
    misaligned or non-integer columns raise sqlite_columns.CorruptColumnError."""


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
            except (_Corrupt, CorruptColumnError) as e:
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
    tables = {_text(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not any(t in tables for t in NSYS_MARKERS) and not any(
            t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_", "TARGET_INFO_")) for t in tables):
        raise InputError(shown, "an SQLite database, but not an Nsight Systems export "
                                "(no StringIds, CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)")
    reader = _Reader(conn, tables)
    plans = {"kernel": reader.kernel_plan(), "memcpy": reader.memcpy_plan(),
             "memset": reader.memset_plan(), "host": reader.host_plan()}
    plans = {k: v for k, v in plans.items() if v is not None}
    fetched = _fetch(db_file, conn, list(plans.values()), bar)
    data = dict(zip(plans, fetched))
    gpu = reader.gpu(data)
    if len(gpu) == 0 and "host" not in data:
        raise InputError(shown, "no CUDA activity: the export has no kernel, memcpy or memset rows "
                                "and no CUDA API table; profile with `nsys profile -t cuda,nvtx ...`")
    timeline = Timeline(path=str(shown), source="nsys", gpu=gpu, host=reader.host(data.get("host")),
                        ranges=reader.ranges(), devices=reader.devices())
    return timeline.validate()


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


class _Reader:
    """Per-table readers over one open export."""

    def __init__(self, conn: sqlite3.Connection, tables: set[str]):
        self.conn, self.tables = conn, tables
        self._columns: dict[str, set[str]] = {}

    # -- helpers ---------------------------------------------------------------------------
    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            rows = self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            self._columns[table] = {_text(r[1]) for r in rows}
        return self._columns[table]

    def col(self, table: str, name: str, default: str = "-1") -> str:
        """SQL for a column that may be absent or NULL in some versions."""
        return f"coalesce({name}, {default})" if name in self.columns(table) else default

    def require(self, table: str, *names: str) -> None:
        missing = [n for n in names if n not in self.columns(table)]
        if missing:
            raise _Corrupt(f"table {table} lacks column(s) {', '.join(missing)}")

    def strings(self, ids: np.ndarray) -> dict[int, str]:
        """StringIds values for the given distinct ids (each looked up once, in SQL)."""
        wanted = [int(i) for i in ids]
        found: dict[int, str] = {}
        if "StringIds" in self.tables:
            for k in range(0, len(wanted), 500):
                batch = wanted[k:k + 500]
                marks = ",".join("?" * len(batch))
                for i, value in self.conn.execute(
                        f"SELECT id, value FROM StringIds WHERE id IN ({marks})", batch):
                    found[i] = _text(value)
        return {i: found.get(i, f"<unknown string {i}>") for i in wanted}

    # -- gpu -------------------------------------------------------------------------------
    def kernel_plan(self) -> ColumnPlan | None:
        t = GPU_TABLES["kernel"]
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        name_col = "demangledName" if "demangledName" in self.columns(t) else "shortName"
        self.require(t, name_col)
        grid = " * ".join(self.col(t, c, "0") for c in ("gridX", "gridY", "gridZ"))
        block = " * ".join(self.col(t, c, "0") for c in ("blockX", "blockY", "blockZ"))
        return ColumnPlan(t, {**self._common(t), "name": self.col(t, name_col), "grid": grid,
                         "block": block})

    def memcpy_plan(self) -> ColumnPlan | None:
        t = GPU_TABLES["memcpy"]
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        return ColumnPlan(t, {**self._common(t), "bytes": self.col(t, "bytes", "0"),
                         "copy": self.col(t, "copyKind", "0"), "src": self.col(t, "srcKind"),
                         "dst": self.col(t, "dstKind")})

    def memset_plan(self) -> ColumnPlan | None:
        t = GPU_TABLES["memset"]
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        return ColumnPlan(t, {**self._common(t), "bytes": self.col(t, "bytes", "0")})

    def _common(self, t: str) -> dict[str, str]:
        return {"start_ns": "start", "dur_ns": "coalesce(end - start, 0)", "device": self.col(t, "deviceId"),
                "stream": self.col(t, "streamId"), "correlation": self.col(t, "correlationId")}

    def gpu(self, data: dict[str, dict]) -> pd.DataFrame:
        """Kernels, copies and sets in one table; names and enums as categorical codes."""
        parts = []  # columns a kind does not record are scalars: 0 / "" / False
        blank = {"bytes": 0, "copy_kind": COPY_CATEGORIES.index(""), "pageable": False, "grid": 0,
                 "block": 0}
        copy_names = [f"Memcpy {k}" if k else "Memcpy" for k in COPY_CATEGORIES]
        kernel_ids, kernel_names = np.empty(0, np.int64), []
        if "kernel" in data:
            kernel_ids = _distinct(data["kernel"]["name"])
            strings = self.strings(kernel_ids)
            kernel_names = [strings[int(i)] for i in kernel_ids]
        names = sorted({*kernel_names, *copy_names, "Memset"})
        position = {name: k for k, name in enumerate(names)}
        if "kernel" in data:
            a = data.pop("kernel")
            a["name"] = _codes(a["name"], kernel_ids, [position[n] for n in kernel_names])
            parts.append({**blank, **a, "kind": GPU_KINDS.index("kernel")})
        if "memcpy" in data:
            a = data.pop("memcpy")
            kind_by_id = self.copy_kinds()
            lookup = np.array([COPY_CATEGORIES.index(kind_by_id.get(i, "")) for i in range(256)], np.int8)
            a["copy_kind"] = lookup[np.clip(a.pop("copy"), 0, 255)]
            a["name"] = np.array([position[n] for n in copy_names], np.int32)[a["copy_kind"]]
            pageable = self.pageable_kind()
            a["pageable"] = (a.pop("src") == pageable) | (a.pop("dst") == pageable)
            parts.append({**blank, **a, "kind": GPU_KINDS.index("memcpy")})
        if "memset" in data:
            a = data.pop("memset")
            parts.append({**blank, **a, "name": position["Memset"], "kind": GPU_KINDS.index("memset")})
        if not parts:
            return empty_table(GPU_COLUMNS)
        cats = {"kind": list(GPU_KINDS), "copy_kind": COPY_CATEGORIES, "name": names}
        return _frame(parts, GPU_COLUMNS, cats)

    def copy_kinds(self) -> dict[int, str]:
        """copyKind id -> normalized label, from ENUM_CUDA_MEMCPY_OPER when the export has it."""
        if "ENUM_CUDA_MEMCPY_OPER" not in self.tables:
            return dict(COPY_KIND_BY_ID)
        kinds = {}
        for i, name in self.conn.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER"):
            suffix = _text(name).removeprefix("CUDA_MEMCPY_KIND_")
            if suffix in COPY_KIND_BY_ENUM_NAME:
                kinds[i] = COPY_KIND_BY_ENUM_NAME[suffix]
        return kinds or dict(COPY_KIND_BY_ID)

    def pageable_kind(self) -> int:
        if "ENUM_CUDA_MEM_KIND" in self.tables:
            for i, name in self.conn.execute("SELECT id, name FROM ENUM_CUDA_MEM_KIND"):
                if _text(name).endswith("_PAGEABLE"):
                    return i
        return PAGEABLE_MEM_KIND

    # -- host ------------------------------------------------------------------------------
    def host_plan(self) -> ColumnPlan | None:
        t = RUNTIME_TABLE
        if t not in self.tables:
            return None
        self.require(t, "start", "end", "nameId")
        thread = f"coalesce(globalTid % {TID_MOD}, -1)" if "globalTid" in self.columns(t) else "-1"
        return ColumnPlan(t, {"start_ns": "start", "dur_ns": "coalesce(end - start, 0)", "thread": thread,
                         "correlation": self.col(t, "correlationId"), "name": self.col(t, "nameId")})

    def host(self, data: dict | None) -> pd.DataFrame:
        if data is None:
            return empty_table(HOST_COLUMNS)
        ids = _distinct(data["name"])
        strings = self.strings(ids)
        labels = [API_VERSION_SUFFIX.sub("", strings[int(i)]) for i in ids]
        names = sorted(set(labels))
        position = {name: k for k, name in enumerate(names)}
        data["name"] = _codes(data["name"], ids, [position[n] for n in labels])
        return _frame([data], HOST_COLUMNS, {"name": names})

    def ranges(self) -> pd.DataFrame:
        """NVTX push/pop and start/end ranges; names of non-default domains get `Domain:`."""
        t = NVTX_TABLE
        if t not in self.tables:
            return empty_table(RANGE_COLUMNS)
        self.require(t, "start", "end", "eventType")
        cols = self.columns(t)
        text = "n.text" if "text" in cols else "NULL"
        if "textId" in cols and "StringIds" in self.tables:
            text_sql, join = f"coalesce({text}, s.value, '')", "LEFT JOIN StringIds s ON s.id = n.textId"
        else:
            text_sql, join = f"coalesce({text}, '')", ""
        tid = "coalesce(n.globalTid, -1)" if "globalTid" in cols else "-1"
        domain = "coalesce(n.domainId, 0)" if "domainId" in cols else "0"
        types = self.nvtx_range_types()
        rows = self.conn.execute(
            f"SELECT n.start, n.end, {tid}, {text_sql}, {domain} FROM {t} n {join} "
            f"WHERE n.eventType IN ({','.join('?' * len(types))}) AND n.end IS NOT NULL "
            f"ORDER BY n.start, n.end DESC, n.rowid", types).fetchall()
        domains = {}
        if "domainId" in cols:
            for gtid, dom, name in self.conn.execute(
                    f"SELECT {tid}, {domain}, {text} FROM {t} n WHERE n.eventType = ?",
                    (NVTX_DOMAIN_CREATE,)):
                if name is not None:
                    domains[(gtid // TID_MOD, dom)] = _text(name)
        names = []
        for _, _, gtid, name, dom in rows:
            name = _text(name)
            prefix = domains.get((gtid // TID_MOD, dom)) if dom else None
            names.append(f"{prefix}:{name}" if prefix else name)
        n = len(rows)
        categories = sorted(set(names))
        position = {name: k for k, name in enumerate(categories)}
        data = {
            "name": np.array([position[name] for name in names], np.int32),
            "start_ns": np.fromiter((r[0] for r in rows), np.int64, n),
            "end_ns": np.fromiter((r[1] for r in rows), np.int64, n),
            "thread": np.fromiter((r[2] % TID_MOD if r[2] >= 0 else -1 for r in rows), np.int64, n),
            "kind": RANGE_CATEGORIES.index("nvtx"),
        }
        return _frame([data], RANGE_COLUMNS, {"name": categories, "kind": RANGE_CATEGORIES})

    def nvtx_range_types(self) -> list[int]:
        if "ENUM_NSYS_EVENT_TYPE" in self.tables:
            found = [i for i, name in self.conn.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE")
                     if _text(name) in NVTX_RANGE_TYPES]
            if found:
                return sorted(found)
        return sorted(NVTX_RANGE_TYPES.values())

    def devices(self) -> list[dict]:
        """One dict per CUDA device index: id, name, sm_count, total_memory, cc."""
        t = "TARGET_INFO_GPU"
        if t not in self.tables or "id" not in self.columns(t):
            return []
        sel = ", ".join(self.col(t, c, "NULL") for c in
                        ("name", "smCount", "totalMemory", "computeMajor", "computeMinor", "cuDevice"))
        gpus = {row[0]: row[1:] for row in self.conn.execute(f"SELECT id, {sel} FROM {t} ORDER BY id")}
        # CUDA device index -> GPU row: TARGET_INFO_CUDA_DEVICE maps them (per process).
        cuda_ids: dict[int, int] = {}
        m = "TARGET_INFO_CUDA_DEVICE"
        if m in self.tables and {"gpuId", "cudaId"} <= self.columns(m):
            for gpu_id, cuda_id in self.conn.execute(
                    f"SELECT gpuId, cudaId FROM {m} ORDER BY cudaId, gpuId"):
                if gpu_id in gpus:
                    cuda_ids.setdefault(cuda_id, gpu_id)
        if not cuda_ids:
            for gpu_id, row in gpus.items():
                cuda_ids.setdefault(row[5] if row[5] is not None else gpu_id, gpu_id)
        devices = []
        for cuda_id in sorted(cuda_ids):
            name, sms, mem, major, minor, _ = gpus[cuda_ids[cuda_id]]
            devices.append({
                "id": int(cuda_id), "name": _text(name) if name is not None else "",
                "sm_count": sms, "total_memory": mem,
                "cc": f"{major}.{minor}" if major is not None and minor is not None else None,
            })
        return devices


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _distinct(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct ids (a bitmap when ids are small, as StringIds ids are)."""
    if len(ids) and ids.min() >= 0 and ids.max() < SMALL_IDS:
        return np.flatnonzero(np.bincount(ids))
    return np.unique(ids)


def _codes(ids: np.ndarray, distinct: np.ndarray, code_of_distinct: list[int]) -> np.ndarray:
    """Per row, the code given to its id (distinct[k] -> code_of_distinct[k]), as int32."""
    codes = np.array(code_of_distinct, np.int32)
    if len(distinct) and distinct[0] >= 0 and distinct[-1] < SMALL_IDS:
        lookup = np.zeros(int(distinct[-1]) + 1, np.int32)
        lookup[distinct] = codes
        return lookup[ids]
    return codes[np.searchsorted(distinct, ids)]


def _frame(parts: list[dict], schema: dict[str, str], categories: dict[str, list[str]]) -> pd.DataFrame:
    """One schema-ordered frame from row groups, sorted by start_ns (stable: ties keep order).

    A part's column is an array or one scalar for all its rows; each column is written once,
    straight to its sorted place, and dropped from the parts as it goes (peak memory). Columns in
    `categories` hold codes into that sorted list and become Categoricals, which compare and sort
    like the strings they stand for.
    """
    sizes = [len(p["start_ns"]) for p in parts]
    bounds = np.cumsum([0] + sizes)
    n = int(bounds[-1])
    start = np.concatenate([p["start_ns"] for p in parts]) if len(parts) > 1 else parts[0]["start_ns"]
    dest = None  # row i of the concatenated parts goes to dest[i]
    if n > 1 and not bool(np.all(start[1:] >= start[:-1])):
        order = np.argsort(start, kind="stable")
        dest = np.empty(n, np.int64)
        dest[order] = np.arange(n, dtype=np.int64)
    data = {}
    for c, dtype in schema.items():
        dtype = np.dtype(np.int32 if c in categories else dtype)
        first = parts[0][c]
        if len(parts) == 1 and dest is None and isinstance(first, np.ndarray) and first.dtype == dtype:
            out = parts[0].pop(c)  # already in place
        else:
            out = empty_column(n, dtype)
            for p, lo, hi in zip(parts, bounds[:-1], bounds[1:]):
                if dest is None:
                    out[lo:hi] = p.pop(c)
                else:
                    out[dest[lo:hi]] = p.pop(c)
        if c in categories:
            assert categories[c] == sorted(categories[c]), c
            out = pd.Categorical.from_codes(out, categories=categories[c])
        data[c] = out
    return pd.DataFrame(data, copy=False)
