"""Read a PyTorch profiler trace (Kineto JSON, plain or gzipped) into the normalized Timeline.

Only normalizes: GPU activity (kernel, gpu_memcpy, gpu_memset) -> gpu, CUDA runtime/driver calls ->
host, user annotations / aten ops / Python functions -> ranges. Times become integer nanoseconds on
the trace's own clock (`ts`, microseconds; baseTimeNanoseconds is not added: every table shares the
same clock without it). Computes no metrics.
"""
from __future__ import annotations

import gzip
import os
import re
import zlib
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..errors import InputError
from ..inputs import open_input
from ..progress import Progress
from ..timeline.tables import GPU_COLUMNS, HOST_COLUMNS, RANGE_COLUMNS, Timeline, empty_table

_Num = int | float | str | None


class _Args(msgspec.Struct, gc=False):
    correlation: _Num = None
    device: _Num = None
    stream: _Num = None
    bytes: _Num = None
    grid: list[int] | None = None
    block: list[int] | None = None


class _Event(msgspec.Struct, gc=False):
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = float("nan")
    dur: float = 0.0
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None
    deviceProperties: list[dict[str, Any]] | None = None
    distributedInfo: dict[str, Any] | None = None


# cat -> bucket; old Kineto spellings included
_KERNEL, _MEMCPY, _MEMSET, _RUNTIME, _ANNOTATION, _OP, _PYTHON = range(7)
_BUCKET = {
    "kernel": _KERNEL, "Kernel": _KERNEL, "gpu_memcpy": _MEMCPY, "Memcpy": _MEMCPY,
    "gpu_memset": _MEMSET, "Memset": _MEMSET, "cuda_runtime": _RUNTIME, "cuda_driver": _RUNTIME,
    "Runtime": _RUNTIME, "user_annotation": _ANNOTATION, "cpu_op": _OP, "Operator": _OP,
    "python_function": _PYTHON,
}
_GPU_KIND = {_KERNEL: "kernel", _MEMCPY: "memcpy", _MEMSET: "memset"}
_RANGE_KIND = {_ANNOTATION: "annotation", _OP: "op", _PYTHON: "python"}
# CUPTI copy kinds as Kineto prints them; array copies are folded into the device side
_COPY_KIND = {"HtoD": "HtoD", "DtoH": "DtoH", "DtoD": "DtoD", "HtoH": "HtoH", "PtoP": "PtoP",
              "HtoA": "HtoD", "AtoH": "DtoH", "AtoD": "DtoD", "DtoA": "DtoD", "AtoA": "DtoD"}
_MEMCPY_NAME = re.compile(r"Memcpy (\w+)(?: \(([^)]*)\))?")


def _as_int(v, default: int = -1) -> int:
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v == v else default
    digits = re.search(r"-?\d+", v)  # "stream 7", "7"
    return int(digits.group()) if digits else default


def _product(dims) -> int:
    if not dims:
        return 0
    n = 1
    for d in dims:
        n *= d
    return n


def _ns(ts: list[float], dur: list[float]) -> tuple[np.ndarray, np.ndarray]:
    start = np.rint(np.asarray(ts, dtype=np.float64) * 1000.0)
    length = np.rint(np.asarray(dur, dtype=np.float64) * 1000.0)
    return start, length


class _Columns:
    """Column accumulators filled one event batch at a time; names are interned into codes."""

    def __init__(self):
        self.names: dict[str, int] = {}
        self.gpu: list[tuple] = []
        self.host: dict[str, list] = {k: [] for k in ("name", "ts", "dur", "thread", "corr")}
        self.ranges: dict[str, list] = {k: [] for k in ("name", "ts", "dur", "thread", "kind")}

    def add(self, events: list[_Event]) -> None:
        buckets: list[list[_Event]] = [[] for _ in range(7)]
        get = _BUCKET.get
        for e in events:
            b = get(e.cat)
            if b is not None:
                buckets[b].append(e)
        code = self.names.setdefault
        for b in (_KERNEL, _MEMCPY, _MEMSET):
            for e in buckets[b]:
                self.gpu.append(_gpu_row(b, e, code(e.name, len(self.names))))
        for b, table, cols in ((_RUNTIME, "host", self.host),):
            evs = buckets[b]
            if evs:
                cols["name"].append(np.array([code(e.name, len(self.names)) for e in evs], np.int32))
                cols["ts"].append(np.array([e.ts for e in evs], np.float64))
                cols["dur"].append(np.array([e.dur for e in evs], np.float64))
                cols["thread"].append(_int_array([e.tid for e in evs]))
                cols["corr"].append(_int_array([e.args.correlation if e.args else None for e in evs]))
        cols = self.ranges
        for b in (_ANNOTATION, _OP, _PYTHON):
            evs = buckets[b]
            if evs:
                cols["name"].append(np.array([code(e.name, len(self.names)) for e in evs], np.int32))
                cols["ts"].append(np.array([e.ts for e in evs], np.float64))
                cols["dur"].append(np.array([e.dur for e in evs], np.float64))
                cols["thread"].append(_int_array([e.tid for e in evs]))
                cols["kind"].append(np.full(len(evs), b, np.int8))

    def tables(self, path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        uniques = np.empty(len(self.names), dtype=object)
        uniques[:] = list(self.names)
        return self._gpu_table(path, uniques), self._host_table(path, uniques), \
            self._range_table(path, uniques)

    def _gpu_table(self, path, uniques) -> pd.DataFrame:
        if not self.gpu:
            return empty_table(GPU_COLUMNS)
        kind, name, ts, dur, device, stream, corr, nbytes, copy_kind, pageable, grid, block = \
            zip(*self.gpu)
        start, length = _checked_ns(path, ts, dur)
        return _frame(GPU_COLUMNS, start, {
            "kind": np.array(kind, object), "name": uniques[np.array(name, np.int64)],
            "start_ns": start, "end_ns": start + length, "device": np.array(device, np.int64),
            "stream": np.array(stream, np.int64), "correlation": np.array(corr, np.int64),
            "bytes": np.array(nbytes, np.int64), "copy_kind": np.array(copy_kind, object),
            "pageable": np.array(pageable, bool), "grid": np.array(grid, np.int64),
            "block": np.array(block, np.int64),
        })

    def _host_table(self, path, uniques) -> pd.DataFrame:
        c = self.host
        if not c["name"]:
            return empty_table(HOST_COLUMNS)
        start, length = _checked_ns(path, np.concatenate(c["ts"]), np.concatenate(c["dur"]))
        return _frame(HOST_COLUMNS, start, {
            "name": uniques[np.concatenate(c["name"])], "start_ns": start, "end_ns": start + length,
            "thread": np.concatenate(c["thread"]), "correlation": np.concatenate(c["corr"]),
        })

    def _range_table(self, path, uniques) -> pd.DataFrame:
        c = self.ranges
        if not c["name"]:
            return empty_table(RANGE_COLUMNS)
        start, length = _checked_ns(path, np.concatenate(c["ts"]), np.concatenate(c["dur"]))
        kinds = np.array([_RANGE_KIND.get(i, "") for i in range(7)], dtype=object)
        return _frame(RANGE_COLUMNS, start, {
            "name": uniques[np.concatenate(c["name"])], "start_ns": start, "end_ns": start + length,
            "thread": np.concatenate(c["thread"]), "kind": kinds[np.concatenate(c["kind"])],
        })


def _gpu_row(bucket: int, e: _Event, name_code: int) -> tuple:
    a = e.args or _Args()
    copy_kind, pageable = "", False
    if bucket == _MEMCPY:
        m = _MEMCPY_NAME.match(e.name)
        if m:
            copy_kind = _COPY_KIND.get(m.group(1), "")
            pageable = "Pageable" in (m.group(2) or "")
    kernel = bucket == _KERNEL
    return (_GPU_KIND[bucket], name_code, e.ts, e.dur, _as_int(a.device, _as_int(e.pid)),
            _as_int(a.stream, _as_int(e.tid)), _as_int(a.correlation),
            0 if kernel else _as_int(a.bytes, 0), copy_kind, pageable,
            _product(a.grid) if kernel else 0, _product(a.block) if kernel else 0)


def _int_array(values: list) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_as_int(v) for v in values], dtype=np.int64)


def _checked_ns(path, ts, dur) -> tuple[np.ndarray, np.ndarray]:
    start, length = _ns(ts, dur)
    if np.isnan(start).any() or np.isnan(length).any():
        raise InputError(path, "a trace event of a timed category lacks its ts")
    if (length < 0).any():
        raise InputError(path, "a trace event has a negative dur")
    return start.astype(np.int64), length.astype(np.int64)


def _frame(columns: dict[str, str], start: np.ndarray, data: dict[str, np.ndarray]) -> pd.DataFrame:
    order = np.argsort(start, kind="stable")
    return pd.DataFrame({c: pd.Series(data[c][order], dtype=t, copy=False)
                         for c, t in columns.items()})


def _devices(props: list[dict] | None) -> list[dict]:
    devices = []
    for d in props or []:
        if not isinstance(d, dict):
            continue
        major, minor = d.get("computeMajor"), d.get("computeMinor")
        devices.append({
            "id": _as_int(d.get("id"), len(devices)), "name": str(d.get("name", "")),
            "sm_count": _as_int(d.get("numSms"), 0), "total_memory": _as_int(d.get("totalGlobalMem"), 0),
            "cc": f"{major}.{minor}" if major is not None and minor is not None else "",
        })
    return devices


_CHUNK_BYTES = 8 << 20  # decompressed bytes per read; tests shrink it to exercise batch edges
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{},]', re.S)
_EVENTS = msgspec.json.Decoder(list[_Event])
_TRACE = msgspec.json.Decoder(_Trace)
_EMPTY_HELP = "expected a PyTorch profiler trace (JSON with traceEvents)"


class _TraceStream:
    """Split the traceEvents array into batches at element boundaries and decode each batch.

    A cut is first guessed at the last `}, {` of the buffer; `[batch]` only decodes when the cut is a
    real boundary (a cut inside a string or a nested value leaves it unterminated), so a failed
    decode falls back to an exact scan that skips strings.
    """

    def __init__(self, path, f, columns: _Columns, progress: Progress):
        self.path, self.f, self.columns, self.progress = path, f, columns, progress
        self.raw = getattr(f, "fileobj", f)  # compressed position, for progress
        self.seen = 0  # events decoded so far, to name the bad one in errors

    def read(self) -> _Trace:
        buf, head = self._header()
        if head is None:  # a bare JSON array of events
            return self._body(buf, b"[", list_tail=True)
        return self._body(buf, b'{"traceEvents":[', list_tail=False, head=head)

    def _chunk(self) -> bytes:
        try:
            chunk = self.f.read(_CHUNK_BYTES)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise InputError(self.path, f"corrupt or truncated gzip data ({e.__class__.__name__})") from None
        except OSError as e:
            raise InputError(self.path, f"cannot read: {e}") from None
        self.progress.update(self.raw.tell() / 1e6)
        return chunk

    def _header(self) -> tuple[bytes, _Trace | None]:
        """Read up to the `[` that opens traceEvents; return what follows it and the header fields."""
        buf, pos = b"", 0
        while True:
            chunk = self._chunk()
            buf += chunk
            if not buf.strip():
                if not chunk:
                    raise InputError(self.path, "file is empty; " + _EMPTY_HELP)
                continue
            text = buf.lstrip(b"\xef\xbb\xbf \t\r\n")
            if text[:1] == b"[":
                return text[1:], None
            if text[:1] != b"{":
                raise InputError(self.path, "not JSON (does not start with { or [); " + _EMPTY_HELP)
            for m in _ARRAY_START.finditer(buf, pos):
                try:
                    head = _TRACE.decode(buf[:m.start()] + b'"traceEvents":null}')
                except msgspec.MsgspecError:
                    continue  # a nested or malformed key: keep looking
                return buf[m.end():], head
            pos = max(0, len(buf) - 64)
            if not chunk:
                self._no_events(buf)

    def _no_events(self, data: bytes):
        try:
            _TRACE.decode(data)
        except msgspec.ValidationError as e:
            raise InputError(self.path, f"not a PyTorch profiler trace ({e})") from None
        except msgspec.DecodeError as e:
            raise InputError(self.path, f"not valid JSON ({e})") from None
        raise InputError(self.path, "JSON without traceEvents; " + _EMPTY_HELP)

    def _body(self, buf: bytes, opener: bytes, list_tail: bool, head: _Trace | None = None) -> _Trace:
        while True:
            cut = self._cut(buf)
            if cut > 0:
                buf = buf[cut + 1:]
            chunk = self._chunk()
            if not chunk:
                break
            buf += chunk
        try:
            tail = (_EVENTS if list_tail else _TRACE).decode(opener + buf)
        except msgspec.MsgspecError as e:
            raise self._error(e) from None
        if list_tail:
            self._add(tail)
            return head or _Trace()
        self._add(tail.traceEvents or [])
        for name in ("deviceProperties", "distributedInfo"):
            if getattr(tail, name) is None and head is not None:
                setattr(tail, name, getattr(head, name))
        return tail

    def _cut(self, buf: bytes) -> int:
        """Decode all complete events of buf; return the index of the comma after them (or -1)."""
        last = None
        for start in (len(buf) - (1 << 16), 0):
            for last in _BOUNDARY.finditer(buf, max(0, start)):
                pass
            if last is not None or start <= 0:
                break
        if last is None:
            return -1
        cut = buf.index(b",", last.start())
        try:
            self._add(_EVENTS.decode(b"[" + buf[:cut] + b"]"))
            return cut
        except msgspec.MsgspecError:
            pass
        cut = _exact_cut(buf)
        if cut < 0:
            return -1
        try:
            self._add(_EVENTS.decode(b"[" + buf[:cut] + b"]"))
        except msgspec.MsgspecError as e:
            raise self._error(e) from None
        return cut

    def _add(self, events: list[_Event]) -> None:
        self.columns.add(events)
        self.seen += len(events)

    def _error(self, e: msgspec.MsgspecError) -> InputError:
        where = re.sub(r"\$(?:\.traceEvents)?\[(\d+)\]",
                       lambda m: f"traceEvents[{self.seen + int(m.group(1))}]", str(e))
        if isinstance(e, msgspec.ValidationError):
            return InputError(self.path, f"trace event of the wrong shape: {where}")
        if "truncated" in where:
            return InputError(self.path, "JSON ends early: the trace is truncated")
        where = re.sub(r" \(byte \d+\)", "", where)  # offsets within a batch would mislead
        return InputError(self.path, f"malformed JSON in traceEvents ({where})")


def _exact_cut(buf: bytes) -> int:
    """Index of the last comma between two top-level elements, scanning strings properly."""
    depth, cut = 0, -1
    for m in _TOKEN.finditer(buf):
        t = m.group()[0]
        if t == 0x22:  # a string, possibly cut short at the end of buf
            continue
        if t in (0x7B, 0x5B):
            depth += 1
        elif t in (0x7D, 0x5D):
            depth -= 1
            if depth < 0:  # the end of traceEvents
                break
        elif depth == 0:
            cut = m.start()
    return cut


def read_torch_trace(path, progress: bool = False) -> Timeline:
    """Read a Kineto JSON trace (`.json` or `.json.gz`) into a validated Timeline.

    Streams: the file is decoded in batches of events, so memory stays near the size of the tables.
    """
    size = os.path.getsize(path) if os.path.isfile(path) else 0
    bar = Progress(f"reading {os.path.basename(str(path))}", total=size / 1e6, enabled=progress)
    cols = _Columns()
    with open_input(path) as f:
        trace = _TraceStream(path, f, cols, bar).read()
    gpu, host, ranges = cols.tables(path)
    bar.close()
    dist = trace.distributedInfo or {}
    rank, world = dist.get("rank"), dist.get("world_size")
    return Timeline(
        path=str(path), source="torch", gpu=gpu, host=host, ranges=ranges,
        devices=_devices(trace.deviceProperties),
        rank=_as_int(rank) if rank is not None else None,
        world_size=_as_int(world) if world is not None else None,
    ).validate()
