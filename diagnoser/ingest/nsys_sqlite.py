"""Nsight Systems SQLite export (`nsys export --type sqlite`) -> normalized `Timeline`.

Only normalizes: CUPTI kernel/memcpy/memset rows become `gpu`, CUDA runtime/driver API calls
become `host`, NVTX ranges become `ranges`; no metric is computed here. Every table is optional.

Speed: a 10M-kernel export must load in seconds, and the cost of Python's sqlite3 cursor is one
tuple plus one object per value. So numeric columns are pulled a million rows at a time as one
`group_concat` string per column (SQLite does the int->text work in C) and parsed by numpy.
Strings stay as integer ids until the end and become categoricals, looked up once per distinct id.
"""
from __future__ import annotations

import gzip
import re
import shutil
import sqlite3
import tempfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from ..errors import InputError
from ..progress import NULL_PROGRESS, Progress
from ..timeline.tables import (GPU_COLUMNS, HOST_COLUMNS, RANGE_COLUMNS, Timeline,
                               empty_table)

SQLITE_MAGIC = b"SQLite format 3\x00"
CHUNK_ROWS = 1_000_000
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
COPY_LABELS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "")
PAGEABLE_MEM_KIND = 0  # ENUM_CUDA_MEM_KIND CUDA_MEMOPR_MEMORY_KIND_PAGEABLE
NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}
NVTX_DOMAIN_CREATE = 75
API_VERSION_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel


class _Corrupt(Exception):
    """Data that SQLite accepted but that cannot be a valid export (misaligned columns...)."""


def read_nsys_sqlite(path, progress: bool = False) -> Timeline:
    """Read an Nsight Systems SQLite export (plain or gzipped) into a validated Timeline."""
    shown = Path(path)
    if not shown.exists():
        raise InputError(shown, "no such file")
    if shown.is_dir():
        raise InputError(shown, "is a directory, expected an Nsight Systems SQLite export")
    bar = Progress(f"reading {shown.name}", unit="rows") if progress else NULL_PROGRESS
    try:
        with _plain_sqlite(shown) as db_file:
            _check_header(shown, db_file)
            conn = _connect(db_file)
            try:
                return _read_timeline(shown, conn, bar)
            except sqlite3.DatabaseError as e:
                raise InputError(shown, f"corrupt or truncated SQLite database ({e})") from None
            except _Corrupt as e:
                raise InputError(shown, f"corrupt Nsight Systems export ({e})") from None
            finally:
                conn.close()
    finally:
        bar.close()


@contextmanager
def _plain_sqlite(path: Path) -> Iterator[Path]:
    """Yield a path SQLite can open: the file itself, or a temporary gunzipped copy (always removed)."""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if not gzipped:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="diagnoser-nsys-") as tmp:
        plain = Path(tmp) / (path.name[:-3] if path.name.endswith(".gz") else path.name + ".sqlite")
        try:
            with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst, 4 << 20)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise InputError(path, f"corrupt or truncated gzip data ({e.__class__.__name__})") from None
        yield plain


def _check_header(shown: Path, db_file: Path) -> None:
    """Reject empty, non-SQLite and visibly truncated files before SQLite sees them."""
    size = db_file.stat().st_size
    with open(db_file, "rb") as f:
        head = f.read(100)
    if not head:
        raise InputError(shown, "file is empty; expected an Nsight Systems SQLite export")
    if not head.startswith(SQLITE_MAGIC) or len(head) < 100:
        raise InputError(shown, "not an SQLite database; expected an Nsight Systems SQLite export "
                                "(nsys export --type sqlite)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # The in-header page count is valid when the change counter equals version-valid-for.
    if head[24:28] == head[92:96] and pages and size < pages * page_size:
        raise InputError(shown, f"truncated SQLite database ({size} of {pages * page_size} bytes)")


def _connect(db_file: Path) -> sqlite3.Connection:
    """Open read-only and immutable: no journal, no lock, the input is never written."""
    conn = sqlite3.connect(f"{db_file.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    conn.text_factory = bytes  # decoded explicitly where text is wanted
    return conn


def _read_timeline(shown: Path, conn: sqlite3.Connection, bar: Progress) -> Timeline:
    tables = {_text(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not any(t in tables for t in NSYS_MARKERS) and not any(
            t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_", "TARGET_INFO_")) for t in tables):
        raise InputError(shown, "an SQLite database, but not an Nsight Systems export "
                                "(no StringIds, CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)")
    reader = _Reader(conn, tables, bar)
    bar.total = sum(reader.row_span(t) for t in (*GPU_TABLES.values(), RUNTIME_TABLE))
    gpu = reader.gpu()
    if len(gpu) == 0 and RUNTIME_TABLE not in tables:
        raise InputError(shown, "no CUDA activity: the export has no kernel, memcpy or memset rows "
                                "and no CUDA API table; profile with `nsys profile -t cuda,nvtx ...`")
    timeline = Timeline(path=str(shown), source="nsys", gpu=gpu, host=reader.host(),
                        ranges=reader.ranges(), devices=reader.devices())
    return timeline.validate()


class _Reader:
    """Per-table readers over one open export."""

    def __init__(self, conn: sqlite3.Connection, tables: set[str], bar: Progress):
        self.conn, self.tables, self.bar = conn, tables, bar
        self.done = 0
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

    def row_span(self, table: str) -> int:
        if table not in self.tables:
            return 0
        lo, hi = self.conn.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
        return 0 if lo is None else hi - lo + 1

    def int_columns(self, table: str, exprs: dict[str, str], where: str = "") -> dict[str, np.ndarray]:
        """Stream integer SQL expressions of `table` into int64 arrays, CHUNK_ROWS rows per query.

        Every expression must be NOT NULL (group_concat skips NULLs); each chunk's row count
        checks that the parsed columns line up.
        """
        names = list(exprs)
        parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
        lo, hi = self.conn.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
        select = ", ".join(f"group_concat({exprs[n]})" for n in names)
        cond = f" AND ({where})" if where else ""
        sql = f'SELECT count(*), {select} FROM "{table}" WHERE rowid >= ? AND rowid < ?{cond}'
        for first in range(lo if lo is not None else 0, (hi if hi is not None else -1) + 1, CHUNK_ROWS):
            count, *texts = self.conn.execute(sql, (first, first + CHUNK_ROWS)).fetchone()
            for name, text in zip(names, texts):
                values = np.fromstring(text, dtype=np.int64, sep=",") if count else np.empty(0, np.int64)
                if len(values) != count:
                    raise _Corrupt(f"{table}: column {exprs[name]} has {len(values)} of {count} values")
                parts[name].append(values)
            self.done += min(CHUNK_ROWS, hi - first + 1)
            self.bar.update(self.done)
        return {n: np.concatenate(p) if p else np.empty(0, np.int64) for n, p in parts.items()}

    def strings(self, ids: np.ndarray) -> dict[int, str]:
        """StringIds values for the distinct ids given (looked up once each, in SQL)."""
        wanted = [int(i) for i in pd.unique(ids)]
        found: dict[int, str] = {}
        if "StringIds" in self.tables:
            for k in range(0, len(wanted), 500):
                batch = wanted[k:k + 500]
                marks = ",".join("?" * len(batch))
                for i, value in self.conn.execute(
                        f"SELECT id, value FROM StringIds WHERE id IN ({marks})", batch):
                    found[i] = _text(value)
        return {i: found.get(i, f"<unknown string {i}>") for i in wanted}

    # -- tables ----------------------------------------------------------------------------
    def gpu(self) -> pd.DataFrame:
        parts = [p for p in (self.kernels(), self.memcpys(), self.memsets()) if p is not None]
        if not parts:
            return empty_table(GPU_COLUMNS)
        cols = {c: _concat([p[c] for p in parts]) for c in GPU_COLUMNS}
        return _frame(cols, GPU_COLUMNS)

    def kernels(self) -> dict | None:
        t = GPU_TABLES["kernel"]
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        name_col = "demangledName" if "demangledName" in self.columns(t) else "shortName"
        self.require(t, name_col)
        grid = " * ".join(self.col(t, c, "0") for c in ("gridX", "gridY", "gridZ"))
        block = " * ".join(self.col(t, c, "0") for c in ("blockX", "blockY", "blockZ"))
        a = self.int_columns(t, {
            "start_ns": "start", "end_ns": "end", "device": self.col(t, "deviceId"),
            "stream": self.col(t, "streamId"), "correlation": self.col(t, "correlationId"),
            "name": name_col, "grid": grid, "block": block})
        n = len(a["start_ns"])
        names = self.strings(a["name"])
        a["name"] = _categorical(a["name"], names)
        a["kind"] = _constant_categorical("kernel", n)
        a["bytes"] = np.zeros(n, np.int64)
        a["copy_kind"] = _constant_categorical("", n)
        a["pageable"] = np.zeros(n, bool)
        return a

    def memcpys(self) -> dict | None:
        t = GPU_TABLES["memcpy"]
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        a = self.int_columns(t, {
            "start_ns": "start", "end_ns": "end", "device": self.col(t, "deviceId"),
            "stream": self.col(t, "streamId"), "correlation": self.col(t, "correlationId"),
            "bytes": self.col(t, "bytes", "0"), "copy": self.col(t, "copyKind", "0"),
            "src": self.col(t, "srcKind"), "dst": self.col(t, "dstKind")})
        n = len(a["start_ns"])
        kind_by_id = self.copy_kinds()
        lookup = np.array([COPY_LABELS.index(kind_by_id.get(i, "")) for i in range(256)], np.int8)
        codes = lookup[np.clip(a.pop("copy"), 0, 255)]
        a["copy_kind"] = pd.Categorical.from_codes(codes, categories=list(COPY_LABELS))
        labels = [f"Memcpy {k}" if k else "Memcpy" for k in COPY_LABELS]
        a["name"] = pd.Categorical.from_codes(codes, categories=labels)
        pageable = self.pageable_kind()
        a["pageable"] = (a.pop("src") == pageable) | (a.pop("dst") == pageable)
        a["kind"] = _constant_categorical("memcpy", n)
        a["grid"] = np.zeros(n, np.int64)
        a["block"] = np.zeros(n, np.int64)
        return a

    def memsets(self) -> dict | None:
        t = GPU_TABLES["memset"]
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        a = self.int_columns(t, {
            "start_ns": "start", "end_ns": "end", "device": self.col(t, "deviceId"),
            "stream": self.col(t, "streamId"), "correlation": self.col(t, "correlationId"),
            "bytes": self.col(t, "bytes", "0")})
        n = len(a["start_ns"])
        a["name"] = _constant_categorical("Memset", n)
        a["kind"] = _constant_categorical("memset", n)
        a["copy_kind"] = _constant_categorical("", n)
        a["pageable"] = np.zeros(n, bool)
        a["grid"] = np.zeros(n, np.int64)
        a["block"] = np.zeros(n, np.int64)
        return a

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

    def host(self) -> pd.DataFrame:
        t = RUNTIME_TABLE
        if t not in self.tables:
            return empty_table(HOST_COLUMNS)
        self.require(t, "start", "end", "nameId")
        a = self.int_columns(t, {
            "start_ns": "start", "end_ns": "end",
            "thread": f"coalesce(globalTid % {TID_MOD}, -1)" if "globalTid" in self.columns(t) else "-1",
            "correlation": self.col(t, "correlationId"), "name": "nameId"})
        names = {i: API_VERSION_SUFFIX.sub("", s) for i, s in self.strings(a["name"]).items()}
        a["name"] = _categorical(a["name"], names)
        return _frame(a, HOST_COLUMNS)

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
        data = {
            "name": pd.Categorical(names, categories=sorted(set(names))),
            "start_ns": np.fromiter((r[0] for r in rows), np.int64, n),
            "end_ns": np.fromiter((r[1] for r in rows), np.int64, n),
            "thread": np.fromiter((r[2] % TID_MOD if r[2] >= 0 else -1 for r in rows), np.int64, n),
            "kind": _constant_categorical("nvtx", n),
        }
        return _frame(data, RANGE_COLUMNS)

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


def _categorical(ids: np.ndarray, names: dict[int, str]) -> pd.Categorical:
    """Integer string ids -> Categorical with lexically sorted categories (sorts like str)."""
    codes, uniques = pd.factorize(ids)
    labels = [names[int(i)] for i in uniques]
    categories = sorted(set(labels))
    position = {c: k for k, c in enumerate(categories)}
    remap = np.array([position[s] for s in labels], dtype=np.int32)
    return pd.Categorical.from_codes(remap[codes] if len(codes) else codes.astype(np.int32),
                                     categories=categories)


def _constant_categorical(value: str, n: int) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, np.int8), categories=[value])


def _concat(parts: list) -> np.ndarray | pd.Categorical:
    if isinstance(parts[0], pd.Categorical):
        from pandas.api.types import union_categoricals
        return union_categoricals(parts, sort_categories=True)
    return np.concatenate(parts)


def _frame(cols: dict, schema: dict[str, str]) -> pd.DataFrame:
    """Build a schema-ordered frame sorted by start_ns (stable, so ties keep table order)."""
    start = cols["start_ns"]
    if len(start) > 1 and not bool(np.all(start[1:] >= start[:-1])):
        order = np.argsort(start, kind="stable")
        cols = {c: v[order] for c, v in cols.items()}
    frame = pd.DataFrame({c: cols[c] for c in schema}, copy=False)
    for c, dtype in schema.items():
        if dtype in ("int64", "bool") and str(frame[c].dtype) != dtype:
            frame[c] = frame[c].astype(dtype)
    return frame
