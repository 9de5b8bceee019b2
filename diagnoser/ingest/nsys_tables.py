"""The per-table-family readers of an Nsight Systems export, and what each export version holds.

CUPTI_ACTIVITY_KIND_KERNEL/MEMCPY/MEMSET (and GRAPH_TRACE: whole-graph replays) -> `gpu`,
CUPTI_ACTIVITY_KIND_RUNTIME -> `host`,
NVTX_EVENTS -> `ranges`, TARGET_INFO_GPU/TARGET_INFO_CUDA_DEVICE -> devices. Columns and enum
tables vary between nsys versions (optional columns, ENUM_* tables that renumber ids): every
difference is resolved here, through `PRAGMA table_info` and the ENUM tables, so the Timeline
is the same whichever version wrote the file. The bulk activity tables are described as
`ColumnPlan`s (fetched by nsys_sqlite.py through sqlite_columns) and turned into frames once
fetched; the small ones are read directly.
"""
from __future__ import annotations

import re
import sqlite3

import numpy as np
import pandas as pd

from ..identity import is_unix_ns
from ..timeline.tables import (
    GPU_COLUMNS,
    GPU_KINDS,
    HOST_COLUMNS,
    MEMORY_COLUMNS,
    NARROWABLE,
    RANGE_COLUMNS,
    RANGE_KINDS,
    as_int32,
    empty_table,
    narrowed,
    narrowest,
)
from .nsys_names import categorical_frame, codes_of_ids, distinct_ids, lookup_strings, sqlite_text
from .sqlite_columns import ColumnPlan

TID_MOD = 0x1000000  # globalTid = ... | pid << 24 | tid
GPU_TABLES = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
              "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}
# Nsight Systems' default `--cuda-graph-trace=graph`: one row per graph replay, its kernels not traced
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_NAME = "CUDA graph {} (traced whole)"
# `nsys profile --cuda-memory-usage=true`: every device allocation and free of the process, with bytes
MEMORY_TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
DEVICE_MEM_KINDS = {"DEVICE": 2, "DEVICE_STATIC": 5, "ARRAY": 3}  # ENUM_CUDA_MEM_KIND (stable ids as fallback)
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
PAGEABLE_MEM_KIND = 0  # ENUM_CUDA_MEM_KIND CUDA_MEMOPR_MEMORY_KIND_PAGEABLE
NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}
NVTX_DOMAIN_CREATE = 75
API_VERSION_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel
ID_COLUMNS = frozenset({"device", "stream", "correlation"})  # fetched as int32 (the Timeline's type for them)


class CorruptExport(Exception):
    """Data that SQLite accepted but that cannot be a valid export (a required column missing);
    misaligned or non-integer columns raise sqlite_columns.CorruptColumnError."""


def _integer(table: str, column: str, value) -> int:
    if type(value) is not int:
        raise CorruptExport(f"{table}.{column} holds {_what(value)} where the schema has an integer")
    return value


def _integers(table: str, column: str, values: list) -> np.ndarray:
    """An integer column read row by row, as int64; text, blobs or reals in it make the export corrupt."""
    if not set(map(type, values)) <= {int}:
        _integer(table, column, next(v for v in values if type(v) is not int))
    try:
        return np.array(values, np.int64) if values else np.zeros(0, np.int64)
    except OverflowError:
        raise CorruptExport(f"{table}.{column} holds an integer beyond 64 bits") from None


def _what(value) -> str:
    return {bytes: "text", str: "text", float: "a real number"}.get(type(value), type(value).__name__)


class ExportReader:
    """Per-table-family readers over one open export (each table is optional)."""

    def __init__(self, conn: sqlite3.Connection, tables: set[str]):
        self.conn, self.tables = conn, tables
        self._columns: dict[str, set[str]] = {}
        self.kernel_pids = np.empty(0, np.int64)  # the processes whose kernels the export holds (after gpu())

    # -- helpers ---------------------------------------------------------------------------
    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            rows = self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            self._columns[table] = {sqlite_text(r[1]) for r in rows}
        return self._columns[table]

    def col(self, table: str, name: str, default: str = "-1") -> str:
        """SQL for a column that may be absent or NULL in some versions."""
        return f"coalesce({name}, {default})" if name in self.columns(table) else default

    def require(self, table: str, *names: str) -> None:
        missing = [n for n in names if n not in self.columns(table)]
        if missing:
            raise CorruptExport(f"table {table} lacks column(s) {', '.join(missing)}")

    def strings(self, ids: np.ndarray) -> dict[int, str]:
        """StringIds values for the given distinct ids (each looked up once, in SQL)."""
        return lookup_strings(self.conn, self.tables, ids)

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
                         "block": block, "pid": f"({self.col(t, 'globalPid', '0')} >> 24) & {TID_MOD - 1}"},
                          int32=ID_COLUMNS | {"block", "pid"})

    def memcpy_plan(self) -> ColumnPlan | None:
        t = GPU_TABLES["memcpy"]
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        return ColumnPlan(t, {**self._common(t), "bytes": self.col(t, "bytes", "0"),
                         "copy": self.col(t, "copyKind", "0"), "src": self.col(t, "srcKind"),
                         "dst": self.col(t, "dstKind")}, int32=ID_COLUMNS)

    def memset_plan(self) -> ColumnPlan | None:
        t = GPU_TABLES["memset"]
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        return ColumnPlan(t, {**self._common(t), "bytes": self.col(t, "bytes", "0")}, int32=ID_COLUMNS)

    def graph_plan(self) -> ColumnPlan | None:
        """Whole-graph replays (an export made with --cuda-graph-trace=graph, the default): each is one
        GPU row of kind kernel spanning the graph's execution, launched by its cudaGraphLaunch."""
        t = GRAPH_TABLE
        if t not in self.tables:
            return None
        self.require(t, "start", "end")
        return ColumnPlan(t, {**self._common(t), "graph_id": self.col(t, "graphId", "0")}, int32=ID_COLUMNS)

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
            kernel_ids = distinct_ids(data["kernel"]["name"])
            strings = self.strings(kernel_ids)
            kernel_names = [strings[int(i)] for i in kernel_ids]
        graph_ids = np.unique(data["graph"]["graph_id"]) if "graph" in data else np.empty(0, np.int64)
        graph_names = [GRAPH_NAME.format(int(g)) for g in graph_ids]
        names = sorted({*kernel_names, *copy_names, "Memset", *graph_names})
        position = {name: k for k, name in enumerate(names)}
        if "kernel" in data:
            a = data.pop("kernel")
            self.kernel_pids = np.unique(a.pop("pid")) if "pid" in a else np.empty(0, np.int64)
            a["name"] = codes_of_ids(a["name"], kernel_ids, [position[n] for n in kernel_names])
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
        if "graph" in data:
            a = data.pop("graph")
            a["name"] = np.array([position[n] for n in graph_names], np.int32)[np.searchsorted(graph_ids, a.pop("graph_id"))]
            parts.append({**blank, **a, "kind": GPU_KINDS.index("kernel")})
        if "memset" in data:
            a = data.pop("memset")
            parts.append({**blank, **a, "name": position["Memset"], "kind": GPU_KINDS.index("memset")})
        if not parts:
            return empty_table(GPU_COLUMNS)
        a = None  # the parts hold the columns alone: categorical_frame frees each as it is placed
        cats = {"kind": list(GPU_KINDS), "copy_kind": COPY_CATEGORIES, "name": names}
        narrow = {c: t for c in NARROWABLE["gpu"] for t in [narrowest("gpu", c, [p[c] for p in parts])] if t}
        return categorical_frame(parts, narrowed(GPU_COLUMNS, narrow), cats)

    def copy_kinds(self) -> dict[int, str]:
        """copyKind id -> normalized label, from ENUM_CUDA_MEMCPY_OPER when the export has it."""
        if "ENUM_CUDA_MEMCPY_OPER" not in self.tables:
            return dict(COPY_KIND_BY_ID)
        kinds = {}
        for i, name in self.conn.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER"):
            suffix = sqlite_text(name).removeprefix("CUDA_MEMCPY_KIND_")
            if suffix in COPY_KIND_BY_ENUM_NAME:
                kinds[i] = COPY_KIND_BY_ENUM_NAME[suffix]
        return kinds or dict(COPY_KIND_BY_ID)

    def pageable_kind(self) -> int:
        if "ENUM_CUDA_MEM_KIND" in self.tables:
            for i, name in self.conn.execute("SELECT id, name FROM ENUM_CUDA_MEM_KIND"):
                if sqlite_text(name).endswith("_PAGEABLE"):
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
                         "correlation": self.col(t, "correlationId"), "name": self.col(t, "nameId")},
                          int32=frozenset({"correlation", "thread"}))  # (thread ids: 24 bits, as TID_MOD keeps them)

    def host(self, data: dict | None) -> pd.DataFrame:
        if data is None:
            return empty_table(HOST_COLUMNS)
        ids = distinct_ids(data["name"])
        strings = self.strings(ids)
        labels = [API_VERSION_SUFFIX.sub("", strings[int(i)]) for i in ids]
        names = sorted(set(labels))
        position = {name: k for k, name in enumerate(names)}
        data["name"] = codes_of_ids(data["name"], ids, [position[n] for n in labels])
        return categorical_frame([data], narrowed(HOST_COLUMNS, {"thread": "int32"}), {"name": names})  # (24-bit ids)

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
                    domains[(_integer(t, "globalTid", gtid) // TID_MOD, dom)] = sqlite_text(name)
        n = len(rows)
        start = _integers(t, "start", [r[0] for r in rows])
        end = _integers(t, "end", [r[1] for r in rows])
        gtids = _integers(t, "globalTid", [r[2] for r in rows])
        names = []
        for (_, _, gtid, name, dom), g in zip(rows, gtids.tolist()):
            name = sqlite_text(name)
            prefix = domains.get((g // TID_MOD, dom)) if dom else None
            names.append(f"{prefix}:{name}" if prefix else name)
        categories = sorted(set(names))
        position = {name: k for k, name in enumerate(categories)}
        data = {
            "name": np.array([position[name] for name in names], np.int32),
            "start_ns": start,
            "end_ns": end,
            "thread": np.where(gtids >= 0, gtids % TID_MOD, -1) if n else np.zeros(0, np.int64),
            "kind": RANGE_CATEGORIES.index("nvtx"),
        }
        return categorical_frame([data], RANGE_COLUMNS, {"name": categories, "kind": RANGE_CATEGORIES})

    def nvtx_range_types(self) -> list[int]:
        if "ENUM_NSYS_EVENT_TYPE" in self.tables:
            found = [i for i, name in self.conn.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE")
                     if sqlite_text(name) in NVTX_RANGE_TYPES]
            if found:
                return sorted(found)
        return sorted(NVTX_RANGE_TYPES.values())

    def clock_epoch_ns(self) -> int | None:
        """Unix time (ns) of the session start, the origin of the export's timestamps; None if absent."""
        t = "TARGET_INFO_SESSION_START_TIME"
        if t not in self.tables or "utcEpochNs" not in self.columns(t):
            return None
        row = self.conn.execute(f"SELECT utcEpochNs FROM {t} LIMIT 1").fetchone()
        value = row[0] if row else None
        return int(value) if isinstance(value, int) and is_unix_ns(value) else None

    def memory(self) -> pd.DataFrame:
        """Device memory the process holds over time, from --cuda-memory-usage's allocation events: the
        driver-level view (what the caching allocator reserves, plus other libraries' allocations);
        what PyTorch has allocated inside it is unknown here (total_allocated -1)."""
        t = MEMORY_TABLE
        if t not in self.tables or not {"start", "bytes", "memKind", "memoryOperationType"} <= self.columns(t):
            return empty_table(MEMORY_COLUMNS)
        kinds = dict(DEVICE_MEM_KINDS)
        if "ENUM_CUDA_MEM_KIND" in self.tables:
            named = {sqlite_text(n).removeprefix("CUDA_MEMOPR_MEMORY_KIND_"): i
                     for i, n in self.conn.execute("SELECT id, name FROM ENUM_CUDA_MEM_KIND")}
            kinds = {k: named[k] for k in kinds if k in named} or kinds
        free_op = 1  # ENUM_CUDA_DEV_MEM_EVENT_OPER: 0 allocation, 1 deallocation
        if "ENUM_CUDA_DEV_MEM_EVENT_OPER" in self.tables:
            for i, n in self.conn.execute("SELECT id, name FROM ENUM_CUDA_DEV_MEM_EVENT_OPER"):
                if sqlite_text(n).endswith("DEALLOCATION"):
                    free_op = int(i)
        marks = ", ".join(str(int(k)) for k in sorted(set(kinds.values())))
        rows = self.conn.execute(
            f"SELECT start, {self.col(t, 'deviceId', '0')}, bytes, memoryOperationType FROM {t} "
            f"WHERE memKind IN ({marks}) AND start IS NOT NULL AND bytes IS NOT NULL ORDER BY start").fetchall()
        if not rows:
            return empty_table(MEMORY_COLUMNS)
        a = np.array(rows, dtype=np.int64)
        signed = np.where(a[:, 3] == free_op, -a[:, 2], a[:, 2])
        held = np.zeros(a.shape[0], np.int64)
        for dev in np.unique(a[:, 1]):
            on = a[:, 1] == dev
            held[on] = np.cumsum(signed[on])
        return pd.DataFrame({"start_ns": a[:, 0], "bytes": signed, "total_allocated": np.full(a.shape[0], -1, np.int64),
                             "total_reserved": held, "device": as_int32(a[:, 1])}).astype(MEMORY_COLUMNS)

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
            sms, mem, major, minor = (None if v is None else _integer(t, c, v) for c, v in
                                      zip(("smCount", "totalMemory", "computeMajor", "computeMinor"), (sms, mem, major, minor)))
            devices.append({
                "id": int(cuda_id), "name": sqlite_text(name) if name is not None else "",
                "sm_count": sms, "total_memory": mem,
                "cc": f"{major}.{minor}" if major is not None and minor is not None else None,
            })
        return devices
