"""Decoded Kineto events -> the Timeline's gpu, host, ranges and memory tables (and device list).

`TraceColumns` takes event batches as the stream scan (torch_trace.py) decodes them and keeps
numpy columns per table, not per-row dicts, so memory follows the tables rather than the file.
Which event lands where is decided by kineto_events.py; this module only converts loosely typed
values (ids written as text, grids as lists), checks the times and builds the sorted frames.
"""
from __future__ import annotations

import itertools
import operator
import sys

import msgspec
import numpy as np
import pandas as pd

from ..errors import InputError
from ..heap import heap_release_for
from ..timeline.perf_model import is_modeled
from ..timeline.tables import (GPU_COLUMNS, GPU_KINDS, HOST_COLUMNS, MEMORY_COLUMNS, RANGE_COLUMNS, RANGE_KINDS, as_int32,
                               empty_table)
from .kineto_events import (
    ANNOTATION,
    BUCKET_OF_CAT,
    COPY_KIND_CODES,
    GPU_KIND,
    KERNEL,
    MEMCPY,
    MEMSET,
    NO_ARGS,
    OP,
    RANGE_KIND,
    RUNTIME,
    KinetoEvent,
    annotation_names,
    as_int,
    as_ints,
    copy_kind,
)
from .kineto_scan import (S_BLOCK, S_BYTES, S_CORRELATION, S_DEVICE, S_DEVICE_ID, S_DEVICE_TYPE, S_GRID, S_MEM_BYTES, S_PID,
                          S_STREAM, S_TID, S_TOTAL_ALLOCATED, S_TOTAL_RESERVED, SCANNED_INTS, SCANNED_MEMORY, SCANNED_NONE,
                          new_scanner)

MAX_NS = float(1 << 62)  # ~146 years: a time beyond it is corrupt (and start + dur still fits int64)


class _Codes(dict):
    """A dict that gives each new key the next integer: `map(codes.__getitem__, keys)` interns a whole
    column at C speed (the Python `__missing__` runs once per distinct key)."""

    def __missing__(self, key) -> int:
        code = self[key] = len(self)
        return code


N_BUCKETS = 7  # kineto_events' buckets: kernel .. python


class TraceColumns:
    """Column accumulators filled one event batch at a time (numpy arrays per batch, no per-row
    dicts); names are interned into integer codes, so each distinct name is stored once.

    Nothing decoded outlives its batch: the modelled ops' recorded arguments are interned too, per op
    a code of its distinct (name, dims, types, concrete, strides) raw JSON, each distinct value kept
    once (the events' msgspec.Raw values hold the stream's buffer, which is reused for the next batch).

    What a batch costs past the decode is mostly the cache misses of each pass over the freshly
    decoded events (a pass per column), not the Python loop: measured on the corpus decode trace and
    a 1.78M-event replica, folding columns into one pass with tuples (`attrgetter("ts", "dur")` into
    a 2-wide fromiter) or reading the columns of all buckets at once was slower, not faster."""

    def __init__(self, native: bool = True):
        self.scanner = new_scanner(native)  # None: every batch decoded by msgspec
        self.names: dict[str, int] = _Codes()
        self.gpu: dict[str, list[np.ndarray]] = {}
        self.host: dict[str, list[np.ndarray]] = {}
        self.ranges: dict[str, list[np.ndarray]] = {}
        self.memory: list[tuple] = []  # per batch: (ts, bytes, total allocated, total reserved, device) of device events
        self.op_rows: list[tuple] = []  # per batch: (ts, dur, thread, argument code) of the ops the perf model covers
        self.op_keys: dict[tuple, int] = _Codes()  # (name, the four arguments' raw JSON joined by NUL) -> code
        self.shapes_recorded = False  # some op carried Input Dims (record_shapes=True)
        self._modeled = np.zeros(0, bool)  # per name code: whether the perf model covers the name
        self._names_by_code: list[str] = []
        self._scanned_codes = np.zeros(0, np.int32)  # the native scanner's name codes -> codes of `names`
        self._scanned_args: list[bytes] = []  # the scanner's argument keys by its code
        self._scanned_arg_codes = np.zeros(0, np.int32)  # -> codes of `op_keys` (-1 until a modelled op uses one)

    def add(self, events: list[KinetoEvent]) -> None:
        # one pass over the events, then one per column of each bucket: each pass over freshly decoded
        # events costs their cache misses, more than the Python loop itself
        buckets: list[list[KinetoEvent]] = [[] for _ in range(N_BUCKETS)]
        append = [bucket.append for bucket in buckets]
        get = BUCKET_OF_CAT.get
        memory = []
        for e in events:
            b = get(e.cat)
            if b is not None:
                append[b](e)
            elif e.name == "[memory]" and e.args is not None:
                memory.append(e)
        if memory:
            self._add_memory(memory)
        for b, evs in enumerate(buckets):
            if not evs:
                continue
            n = len(evs)
            cols = {"code": np.fromiter(map(self.names.__getitem__, map(_NAME, evs)), np.int32, n),
                    "ts": np.fromiter(map(_TS, evs), np.float64, n),  # (map + attrgetter: half a listcomp's time)
                    "dur": np.fromiter(map(_DUR, evs), np.float64, n),
                    "bucket": np.full(n, b, np.int8)}
            if b <= MEMSET:
                cols.update(_gpu_columns(b, evs))
            else:
                cols["thread"] = _int_array(list(map(_TID, evs)))
                if b == RUNTIME:
                    cols["correlation"] = _int_array([e.args and e.args.correlation for e in evs])
                elif b == OP:
                    self._keep_op_args(evs, cols)
            self._append(b, cols)

    def _append(self, bucket: int, cols: dict[str, np.ndarray]) -> None:
        table = self.gpu if bucket <= MEMSET else self.host if bucket == RUNTIME else self.ranges
        for name, values in cols.items():
            table.setdefault(name, []).append(values)

    def add_batch(self, batch: memoryview) -> int | None:
        """Read a batch ("[" events "]") with the native scanner; the number of its events, or None when it is
        to be decoded by msgspec and given to `add` (no scanner here, or a shape the scanner leaves to msgspec)."""
        scan = self.scanner.scan(batch) if self.scanner is not None else None
        return None if scan is None else self.add_scanned(scan)

    def add_scanned(self, scan: tuple) -> int:
        """A batch the native scanner read (kineto_scan.py): the same columns `add` builds from decoded events,
        with the same meanings (absent values, fallbacks to pid and tid, which events are kept). Returns the
        number of events in the batch."""
        elements, new_names, new_args, has_dims, kind, name, ts, dur, ints, args = scan
        if new_names:
            self._scanned_codes = np.concatenate([self._scanned_codes, np.fromiter(
                map(self.names.__getitem__, map(_scanned_name, new_names)), np.int32, len(new_names))])
        if new_args:  # coded as op_keys when a modelled op first uses them
            self._scanned_args.extend(new_args)
            self._scanned_arg_codes = np.concatenate([self._scanned_arg_codes, np.full(len(new_args), -1, np.int32)])
        kinds = np.frombuffer(kind, np.int8)
        if not kinds.size:
            return elements
        codes = self._scanned_codes[np.frombuffer(name, np.int32)]
        ts, dur = np.frombuffer(ts, np.float64), np.frombuffer(dur, np.float64)
        ints = np.frombuffer(ints, np.int64).reshape(-1, SCANNED_INTS)
        counts = np.bincount(kinds, minlength=SCANNED_MEMORY + 1)
        if counts[SCANNED_MEMORY]:
            self._add_scanned_memory(ts, ints, kinds == SCANNED_MEMORY)
        order = np.argsort(kinds, kind="stable")  # bucket by bucket, each in file order, as `add` appends them
        ends = np.cumsum(counts)
        for b in np.flatnonzero(counts[:N_BUCKETS]).tolist():
            rows = order[ends[b] - counts[b]:ends[b]]
            n = rows.size
            cols = {"code": codes[rows], "ts": ts[rows], "dur": dur[rows], "bucket": np.full(n, b, np.int8)}
            at = ints[rows]
            if b <= MEMSET:
                cols.update(_scanned_gpu_columns(b, at, cols["code"], self._name_strings()))
            else:
                cols["thread"] = _given(at[:, S_TID], -1)
                if b == RUNTIME:
                    cols["correlation"] = _given(at[:, S_CORRELATION], -1)
                elif b == OP:
                    self._keep_scanned_op_args(np.frombuffer(args, np.int32), has_dims, cols)
            self._append(b, cols)
        return elements

    def _add_memory(self, events: list[KinetoEvent]) -> None:
        """The allocator instants of CUDA devices (Device Type 1)."""
        args = [e.args for e in events]
        device = as_ints([a.device_type for a in args]) == 1
        if device.any():
            self.memory.append(tuple(col[device] for col in (
                np.array([e.ts for e in events], np.float64), as_ints([a.mem_bytes for a in args], 0),
                as_ints([a.total_allocated for a in args], 0), as_ints([a.total_reserved for a in args], 0),
                as_ints([a.device_id for a in args]))))

    def _add_scanned_memory(self, ts: np.ndarray, ints: np.ndarray, memory: np.ndarray) -> None:
        """`_add_memory` of the scanned allocator instants."""
        at = ints[memory]
        device = _given(at[:, S_DEVICE_TYPE], -1) == 1
        if device.any():
            at = at[device]
            self.memory.append((ts[memory][device], _given(at[:, S_MEM_BYTES], 0), _given(at[:, S_TOTAL_ALLOCATED], 0),
                                _given(at[:, S_TOTAL_RESERVED], 0), _given(at[:, S_DEVICE_ID], -1)))

    def _keep_scanned_op_args(self, args: np.ndarray, has_dims: bool, cols: dict[str, np.ndarray]) -> None:
        """`_keep_op_args` of scanned ops: per op the scanner's code of its recorded arguments (-1: none)."""
        if not self.shapes_recorded:
            if not has_dims:
                return
            self.shapes_recorded = True
        rows = np.flatnonzero(self._modeled_names()[cols["code"]] & (args >= 0))
        if not rows.size:
            return
        scanned = args[rows]
        codes = self._scanned_arg_codes[scanned]
        missing = np.unique(scanned[codes < 0])  # the first modelled op of each distinct arguments
        if missing.size:
            names, keys = self._name_strings(), self.op_keys
            for a in missing.tolist():
                key = self._scanned_args[a]  # the native name code (4 bytes), then the arguments joined
                name = names[self._scanned_codes[int.from_bytes(key[:4], sys.byteorder, signed=True)]]
                self._scanned_arg_codes[a] = keys[(name, key[4:])]
            codes = self._scanned_arg_codes[scanned]
        self.op_rows.append((cols["ts"][rows], cols["dur"][rows], cols["thread"][rows], codes))

    def _name_strings(self) -> list[str]:
        """The names by code (extended as names are added)."""
        if len(self._names_by_code) < len(self.names):
            self._names_by_code.extend(itertools.islice(self.names, len(self._names_by_code), None))
        return self._names_by_code

    def _keep_op_args(self, ops: list[KinetoEvent], cols: dict[str, np.ndarray]) -> None:
        """The modelled ops' arguments, as codes of their distinct raw JSON (the roofline decodes each
        distinct value once): per op only numbers, each distinct value copied out of the batch once.
        Only the modelled ops are visited (picked by name code in numpy): the others' events are not
        touched again (on the corpus decode trace a quarter of the ops are modelled)."""
        recorded = self.shapes_recorded
        if not recorded:  # any op with Input Dims (modelled or not) says the trace records shapes
            for e in ops:
                a = e.args
                if a is not None and a.input_dims and bytes(a.input_dims) != b"null":
                    recorded = self.shapes_recorded = True
                    break
            else:
                return  # no op of this batch has shapes: none is kept
        keys = self.op_keys
        rows, codes = [], []
        for i in np.flatnonzero(self._modeled_names()[cols["code"]]).tolist():
            e = ops[i]
            a = e.args
            if a is None or not a.input_dims:
                continue
            if a.input_dims != _NULL:  # one copy of the four raw values per op, joined (JSON holds no NUL byte)
                rows.append(i)
                codes.append(keys[(e.name, _NUL.join((a.input_dims, a.input_type, a.concrete_inputs,
                                                      a.input_strides)))])
        if rows:
            self.op_rows.append((cols["ts"][rows], cols["dur"][rows], cols["thread"][rows], np.array(codes, np.int32)))

    def _modeled_names(self) -> np.ndarray:
        """Per name code, whether the perf model covers the name (extended as names are added)."""
        known = self._modeled.size
        if len(self.names) > known:
            fresh = [is_modeled(n) for n in self._name_strings()[known:]]
            self._modeled = np.concatenate([self._modeled, np.array(fresh, bool)])
        return self._modeled

    def op_shapes_table(self, path) -> pd.DataFrame | None:
        """The modelled ops' ranges with their recorded arguments; None when no op recorded shapes."""
        if not self.shapes_recorded:
            return None
        cols = ("start_ns", "end_ns", "thread", "name", "dims", "types", "concrete", "strides")
        if not self.op_rows:
            return pd.DataFrame({c: [] for c in cols})
        ts, dur, thread, codes = (np.concatenate(col) for col in zip(*self.op_rows))
        start, length = _checked_ns(path, ts, dur)
        distinct = list(zip(*((name, *joined.split(_NUL)) for name, joined in self.op_keys)))  # per field, per code
        data = {"start_ns": start, "end_ns": start + length, "thread": thread}
        for c, values in zip(cols[3:], distinct):
            column = np.empty(len(values), object)
            column[:] = values  # one shared object per distinct value: no copy per op
            data[c] = column[codes]
        return _frame(dict.fromkeys(cols, "object") | {"start_ns": "int64", "end_ns": "int64", "thread": "int64"},
                      start, data)

    def tables(self, path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """The gpu, host and ranges frames. Names, kinds and copy kinds are Categoricals (as the Nsight Systems
        reader gives them): a few thousand strings, not one per row, and codes the analyses group on."""
        uniques = np.empty(len(self.names), dtype=object)
        uniques[:] = list(self.names)
        # each table's joined batches are freed in the middle of the C heap: their pages go back before the next
        release = heap_release_for(sum(a.size for parts in (self.gpu, self.host, self.ranges) for a in parts.get("code", ())))
        out = []
        for parts, columns, kinds in ((self.gpu, GPU_COLUMNS, GPU_KINDS), (self.host, HOST_COLUMNS, None),
                                      (self.ranges, RANGE_COLUMNS, RANGE_KINDS)):
            if not parts:
                out.append(empty_table(columns))
                continue
            cols = {}
            for name in list(parts):  # each column's batches freed as it is joined: one column doubled at a time
                arrays = parts.pop(name)
                cols[name] = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
                del arrays
            start, length = _checked_ns(path, cols.pop("ts"), cols.pop("dur"))
            codes, bucket = cols.pop("code"), cols.pop("bucket")
            if parts is self.ranges:
                bucket = np.where((bucket == OP) & annotation_names(uniques)[codes], ANNOTATION, bucket)
            present = np.flatnonzero(np.bincount(codes, minlength=len(uniques)))
            by_text = present[np.argsort(uniques[present].astype(str), kind="stable")]
            rank = np.zeros(len(uniques), np.int32)
            rank[by_text] = np.arange(by_text.size, dtype=np.int32)
            categories = {"name": list(uniques[by_text])}
            cols.update(name=rank[codes], start_ns=start, end_ns=start + length)
            if kinds is not None:  # every kind of the schema a category, as in the Nsight Systems reader
                kind_names = sorted(kinds)
                of_bucket = {**GPU_KIND, **RANGE_KIND}
                cols["kind"] = np.array([kind_names.index(of_bucket[b]) if of_bucket.get(b) in kind_names else 0 for b in range(7)],
                                        np.int8)[bucket]
                categories["kind"] = kind_names
            if "copy_kind" in cols:
                copy_names = sorted(COPY_KIND_CODES)
                cols["copy_kind"] = np.array([copy_names.index(k) for k in COPY_KIND_CODES], np.int8)[cols["copy_kind"]]
                categories["copy_kind"] = copy_names
            del codes, bucket, length
            out.append(_frame(columns, start, cols, categories))
            release()
        return out[0], out[1], out[2]

    def memory_table(self, path) -> pd.DataFrame:
        if not self.memory:
            return empty_table(MEMORY_COLUMNS)
        ts, nbytes, alloc, reserved, device = (np.concatenate(col) for col in zip(*self.memory))
        start, _ = _checked_ns(path, ts, np.zeros(len(ts)))
        return _frame(MEMORY_COLUMNS, start, {"start_ns": start, "bytes": nbytes, "total_allocated": alloc,
                                              "total_reserved": reserved, "device": device})


_NAME, _TS, _DUR, _TID = (operator.attrgetter(a) for a in ("name", "ts", "dur", "tid"))
_STRING = msgspec.json.Decoder(str)
_NUL, _NULL = b"\0", msgspec.Raw(b"null")


def _gpu_columns(bucket: int, evs: list[KinetoEvent]) -> dict[str, np.ndarray]:
    args = [e.args or NO_ARGS for e in evs]
    n = len(evs)
    kernel = bucket == KERNEL
    cols = {
        "device": _int_array([a.device for a in args], fallback=[e.pid for e in evs]),
        "stream": _int_array([a.stream for a in args], fallback=[e.tid for e in evs]),
        "correlation": _int_array([a.correlation for a in args]),
        "bytes": np.zeros(n, np.int64) if kernel else _int_array([a.bytes for a in args], 0),
        "grid": _dims([a.grid for a in args]) if kernel else np.zeros(n, np.int64),
        "block": _dims([a.block for a in args]) if kernel else np.zeros(n, np.int64),
        "copy_kind": np.zeros(n, np.int8), "pageable": np.zeros(n, bool),
    }
    if bucket == MEMCPY:
        kinds = [copy_kind(e.name) for e in evs]
        cols["copy_kind"] = np.array([k for k, _ in kinds], np.int8)
        cols["pageable"] = np.array([p for _, p in kinds], bool)
    return cols


def _scanned_gpu_columns(bucket: int, ints: np.ndarray, codes: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """`_gpu_columns` of scanned events."""
    n = len(ints)
    kernel = bucket == KERNEL
    cols = {
        "device": _given(ints[:, S_DEVICE], _given(ints[:, S_PID], -1)),
        "stream": _given(ints[:, S_STREAM], _given(ints[:, S_TID], -1)),
        "correlation": _given(ints[:, S_CORRELATION], -1),
        "bytes": np.zeros(n, np.int64) if kernel else _given(ints[:, S_BYTES], 0),
        "grid": _given(ints[:, S_GRID], 0) if kernel else np.zeros(n, np.int64),
        "block": _given(ints[:, S_BLOCK], 0) if kernel else np.zeros(n, np.int64),
        "copy_kind": np.zeros(n, np.int8), "pageable": np.zeros(n, bool),
    }
    if bucket == MEMCPY:
        distinct, at = np.unique(codes, return_inverse=True)
        kinds = [copy_kind(names[c]) for c in distinct.tolist()]
        cols["copy_kind"] = np.array([k for k, _ in kinds], np.int8)[at]
        cols["pageable"] = np.array([p for _, p in kinds], bool)[at]
    return cols


def _given(values: np.ndarray, default) -> np.ndarray:
    """A scanned int64 column with the absent values (NONE) replaced by `default` (a number or a column)."""
    return np.where(values == SCANNED_NONE, default, values)


def _scanned_name(raw: bytes) -> str:
    """A name as the scanner gives it (the JSON string's contents, escapes as written) decoded as msgspec does."""
    return _STRING.decode(b'"' + raw + b'"') if b"\\" in raw else raw.decode()


def _dims(values: list) -> np.ndarray:
    """Threads or blocks from [x, y, z] lists (0 when absent or not a list of integers)."""
    try:
        dims = np.array(values, np.int64)
        if dims.ndim == 2 and dims.shape[1] == 3 and ((dims >= 0) & (dims < 1 << 20)).all():
            return dims.prod(axis=1)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.zeros(len(values), np.int64)
    given = [i for i, v in enumerate(values) if v]  # events without a grid stay 0 (no per-event call)
    if given:
        out[given] = [_product(values[i]) for i in given]
    return out


def _product(dims) -> int:
    if not isinstance(dims, (list, tuple)) or not dims:
        return 0
    n = 1
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            return 0
        n *= d
    return n if n < 1 << 62 else 0


def _int_array(values: list, default: int = -1, fallback: list | None = None) -> np.ndarray:
    """int64 array of values; None/odd ones become `default`, or the fallback list's value.

    Absent values (None: an event without args) are filled in numpy; only the odd ones (text,
    floats, huge numbers, lists) go through as_int one by one."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    objs = np.fromiter(values, dtype=object, count=len(values))  # never broadcast a list value
    out = _int_array(fallback, default) if fallback is not None else np.full(len(values), default, np.int64)
    given = np.flatnonzero(~np.equal(objs, None))
    if len(given):
        try:
            picked = np.array(objs[given].tolist(), dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            picked = np.array([as_int(v, int(d)) for v, d in zip(objs[given].tolist(), out[given].tolist())],
                              np.int64)
        out[given] = picked
    return out


def _ns(ts: list[float], dur: list[float]) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore"):  # out-of-range values are checked after
        start = np.rint(np.asarray(ts, dtype=np.float64) * 1000.0)
        length = np.rint(np.asarray(dur, dtype=np.float64) * 1000.0)
    return start, length


def _checked_ns(path, ts, dur) -> tuple[np.ndarray, np.ndarray]:
    start, length = _ns(ts, dur)
    if np.isnan(start).any():
        raise InputError(path, "a trace event of a timed category lacks its ts")
    if np.isnan(length).any():
        raise InputError(path, "a trace event's dur is not a number")
    if (np.abs(start) >= MAX_NS).any():
        raise InputError(path, f"a trace event's ts ({_first(ts, np.abs(start) >= MAX_NS)} us) is out of range "
                               "(beyond 146 years): not a profiler timestamp")
    bad = (length < 0) | (length >= MAX_NS)
    if bad.any():  # the first bad event in file order decides the words
        first = float(dur[np.flatnonzero(bad)[0]])
        if first < 0:
            raise InputError(path, f"a trace event has a negative dur ({first:g} us)")
        raise InputError(path, f"a trace event's dur ({first:g} us) is out of range (longer than 146 years): "
                               "not a profiled duration")
    return start.astype(np.int64), length.astype(np.int64)


def _first(values: np.ndarray, bad: np.ndarray) -> str:
    return f"{float(values[np.flatnonzero(bad)[0]]):g}"


def _frame(columns: dict[str, str], start: np.ndarray, data: dict[str, np.ndarray],
           categories: dict[str, list] | None = None) -> pd.DataFrame:
    """The columns in schema order, rows sorted by start (stable); a column in `categories` holds codes
    into that sorted list and becomes a Categorical."""
    order = None if (start[1:] >= start[:-1]).all() else np.argsort(start, kind="stable")
    categories = categories or {}
    frame = {}
    for c, t in columns.items():  # each column sorted and the unsorted one dropped, one at a time
        values = data.pop(c)
        if order is not None:
            values = values[order]
        frame[c] = (pd.Series(pd.Categorical.from_codes(values, categories=categories[c])) if c in categories
                    else pd.Series(as_int32(values) if t == "int32" else values, dtype=t, copy=False))
        del values
    return pd.DataFrame(frame, copy=False)  # the columns as they are: no consolidating copy


def devices_from_properties(props: list[dict] | None) -> list[dict]:
    """deviceProperties as the Timeline's device dicts (entries that are not objects are left out)."""
    devices = []
    for d in props or []:
        if not isinstance(d, dict):
            continue
        major, minor = d.get("computeMajor"), d.get("computeMinor")
        devices.append({
            "id": as_int(d.get("id"), len(devices)), "name": str(d.get("name", "")),
            "sm_count": as_int(d.get("numSms"), 0), "total_memory": as_int(d.get("totalGlobalMem"), 0),
            "cc": f"{major}.{minor}" if major is not None and minor is not None else "",
        })
    return devices


def process_groups(pgs, limit: int = 1024) -> list[dict]:
    """distributedInfo.pg_config as [{name, desc, size}] (entries of another shape are left out)."""
    if not isinstance(pgs, list):
        return []
    return [{"name": str(pg.get("pg_name", ""))[:200], "desc": str(pg.get("pg_desc", ""))[:200],
             "size": pg["pg_size"] if isinstance(pg.get("pg_size"), int) else None}
            for pg in pgs[:limit] if isinstance(pg, dict)]
