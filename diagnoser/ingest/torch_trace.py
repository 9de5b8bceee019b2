"""Read a PyTorch profiler trace (Kineto JSON, plain or gzipped) into the normalized Timeline.

Only normalizes, computes no metrics. Events by `cat`:
  kernel, gpu_memcpy, gpu_memset -> gpu: name as recorded (copies keep Kineto's label, e.g.
    "Memcpy HtoD (Pageable -> Device)"); device/stream/correlation from args (else pid/tid/-1);
    bytes from args (0 for kernels); copy_kind and pageable parsed from the copy's name (array
    copies fold into the device side); grid/block = product of args grid/block (0 when absent).
  cuda_runtime, cuda_driver -> host (thread = tid, correlation from args, else -1).
  user_annotation -> ranges "annotation" (ProfilerStep#N, DataLoader, Optimizer.step#...),
  cpu_op -> "op", python_function -> "python"; thread = tid.
  [memory] instants of Device Type 1 (CUDA, HIP) -> memory (bytes, totals, device = Device Id).
Not kept (no place in the schema): gpu_user_annotation, ac2g flows (args carry the correlation),
CPU [memory] instants, thread-name metadata. Times: start_ns = rint(ts * 1000), end_ns = start_ns +
rint(dur * 1000), on the trace's own clock (baseTimeNanoseconds is not added: every table already
shares one clock); rows sorted by start_ns, ties in file order.

The file is streamed: the traceEvents array is cut into batches of whole events, each decoded by
msgspec into small Structs and appended to numpy columns, so memory follows the tables, not the file.
"""
from __future__ import annotations

import functools
import gc
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
from ..timeline.tables import GPU_COLUMNS, HOST_COLUMNS, MEMORY_COLUMNS, RANGE_COLUMNS, Timeline, empty_table

_Num = int | float | str | None


class _Args(msgspec.Struct, gc=False):
    # Any: a field of an unexpected type (Triton's string `grid`, a list where a number was
    # expected) is read as whatever it is and then ignored where it cannot be used, never fatal
    correlation: Any = None
    device: Any = None
    stream: Any = None
    bytes: Any = None
    grid: Any = None
    block: Any = None
    # allocator events ([memory] instants, profile_memory=True)
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")


class _Event(msgspec.Struct, gc=False):
    cat: str | None = ""
    name: str = ""
    pid: _Num = None
    tid: _Num = None
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
# Kineto before 1.8 recorded the profiler's own annotations under cat "Operator", beside the aten
# ops: these names are annotations whatever their category says.
_ANNOTATION_NAME = re.compile(r"^(?:ProfilerStep#\d|enumerate\(DataLoader\)#|Optimizer\.(?:step|zero_grad)#)")
_RANGE_KIND = {_ANNOTATION: "annotation", _OP: "op", _PYTHON: "python"}
# CUPTI copy kinds as Kineto prints them; array copies are folded into the device side
_COPY_KIND = {"HtoD": "HtoD", "DtoH": "DtoH", "DtoD": "DtoD", "HtoH": "HtoH", "PtoP": "PtoP",
              "HtoA": "HtoD", "AtoH": "DtoH", "AtoD": "DtoD", "DtoA": "DtoD", "AtoA": "DtoD"}
_MEMCPY_NAME = re.compile(r"Memcpy (\w+)(?: \(([^)]*)\))?")


_INT64 = 1 << 63


def _as_int(v, default: int = -1) -> int:
    """An integer from a number or a string like "stream 7"; `default` for anything else."""
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, float):
        v = int(v) if v == v and abs(v) < _INT64 else default
    elif isinstance(v, str):
        digits = re.search(r"-?\d{1,18}", v)
        v = int(digits.group()) if digits else default
    elif not isinstance(v, int):
        return default  # a list, an object: not a number
    return v if -_INT64 <= v < _INT64 else default


def _ns(ts: list[float], dur: list[float]) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore"):  # out-of-range values are checked after
        start = np.rint(np.asarray(ts, dtype=np.float64) * 1000.0)
        length = np.rint(np.asarray(dur, dtype=np.float64) * 1000.0)
    return start, length


MAX_NS = float(1 << 62)  # ~146 years: a time beyond it is corrupt (and start + dur still fits int64)


class _Columns:
    """Column accumulators filled one event batch at a time (numpy arrays per batch, no per-row
    dicts); names are interned into integer codes, so each distinct name is stored once."""

    def __init__(self):
        self.names: dict[str, int] = {}
        self.gpu: dict[str, list[np.ndarray]] = {}
        self.host: dict[str, list[np.ndarray]] = {}
        self.ranges: dict[str, list[np.ndarray]] = {}
        self.memory: list[tuple] = []  # (ts, bytes, total allocated, total reserved, device) per device event

    def add(self, events: list[_Event]) -> None:
        buckets: list[list[_Event]] = [[] for _ in range(7)]
        get = _BUCKET.get
        for e in events:
            b = get(e.cat)
            if b is not None:
                buckets[b].append(e)
            elif e.name == "[memory]" and e.args is not None and _as_int(e.args.device_type) == 1:
                a = e.args
                self.memory.append((e.ts, _as_int(a.mem_bytes, 0), _as_int(a.total_allocated, 0),
                                    _as_int(a.total_reserved, 0), _as_int(a.device_id)))
        for b, evs in enumerate(buckets):
            if not evs:
                continue
            table = self.gpu if b <= _MEMSET else self.host if b == _RUNTIME else self.ranges
            cols = self._common(b, evs)
            if b <= _MEMSET:
                cols.update(_gpu_columns(b, evs))
            else:
                cols["thread"] = _int_array([e.tid for e in evs])
                if b == _RUNTIME:
                    cols["correlation"] = _int_array([e.args and e.args.correlation for e in evs])
            for name, values in cols.items():
                table.setdefault(name, []).append(values)

    def _common(self, bucket: int, evs: list[_Event]) -> dict[str, np.ndarray]:
        code, names = self.names.setdefault, self.names
        return {
            "code": np.array([code(e.name, len(names)) for e in evs], np.int32),
            "ts": np.array([e.ts for e in evs], np.float64),
            "dur": np.array([e.dur for e in evs], np.float64),
            "bucket": np.full(len(evs), bucket, np.int8),
        }

    def tables(self, path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        uniques = np.empty(len(self.names), dtype=object)
        uniques[:] = list(self.names)
        kinds = np.array([_GPU_KIND.get(i, _RANGE_KIND.get(i, "")) for i in range(7)], object)
        out = []
        for parts, columns in ((self.gpu, GPU_COLUMNS), (self.host, HOST_COLUMNS),
                               (self.ranges, RANGE_COLUMNS)):
            if not parts:
                out.append(empty_table(columns))
                continue
            cols = {name: np.concatenate(arrays) for name, arrays in parts.items()}
            start, length = _checked_ns(path, cols.pop("ts"), cols.pop("dur"))
            codes, bucket = cols.pop("code"), cols.pop("bucket")
            if parts is self.ranges:
                bucket = np.where((bucket == _OP) & _annotation_names(uniques)[codes], _ANNOTATION, bucket)
            cols.update(name=uniques[codes], kind=kinds[bucket], start_ns=start, end_ns=start + length)
            if "copy_kind" in cols:
                cols["copy_kind"] = np.array(_COPY_KIND_CODES, object)[cols["copy_kind"]]
            out.append(_frame(columns, start, cols))
        return out[0], out[1], out[2]

    def memory_table(self, path) -> pd.DataFrame:
        if not self.memory:
            return empty_table(MEMORY_COLUMNS)
        ts, nbytes, alloc, reserved, device = zip(*self.memory)
        start, _ = _checked_ns(path, np.asarray(ts, np.float64), np.zeros(len(ts)))
        return _frame(MEMORY_COLUMNS, start, {"start_ns": start, "bytes": np.asarray(nbytes, np.int64),
                                              "total_allocated": np.asarray(alloc, np.int64),
                                              "total_reserved": np.asarray(reserved, np.int64),
                                              "device": np.asarray(device, np.int64)})


def _annotation_names(uniques: np.ndarray) -> np.ndarray:
    return np.array([bool(_ANNOTATION_NAME.match(n)) for n in uniques], dtype=bool)


_NO_ARGS = _Args()
_COPY_KIND_CODES = ("", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP")


@functools.lru_cache(maxsize=4096)
def _copy_kind(name: str) -> tuple[int, bool]:
    """("Memcpy HtoD (Pageable -> Device)") -> (code of "HtoD", pageable True)."""
    m = _MEMCPY_NAME.match(name)
    if not m:
        return 0, False
    kind = _COPY_KIND.get(m.group(1), "")
    return _COPY_KIND_CODES.index(kind), "Pageable" in (m.group(2) or "")


def _gpu_columns(bucket: int, evs: list[_Event]) -> dict[str, np.ndarray]:
    args = [e.args or _NO_ARGS for e in evs]
    n = len(evs)
    kernel = bucket == _KERNEL
    cols = {
        "device": _int_array([a.device for a in args], fallback=[e.pid for e in evs]),
        "stream": _int_array([a.stream for a in args], fallback=[e.tid for e in evs]),
        "correlation": _int_array([a.correlation for a in args]),
        "bytes": np.zeros(n, np.int64) if kernel else _int_array([a.bytes for a in args], 0),
        "grid": _dims([a.grid for a in args]) if kernel else np.zeros(n, np.int64),
        "block": _dims([a.block for a in args]) if kernel else np.zeros(n, np.int64),
        "copy_kind": np.zeros(n, np.int8), "pageable": np.zeros(n, bool),
    }
    if bucket == _MEMCPY:
        kinds = [_copy_kind(e.name) for e in evs]
        cols["copy_kind"] = np.array([k for k, _ in kinds], np.int8)
        cols["pageable"] = np.array([p for _, p in kinds], bool)
    return cols


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
    floats, huge numbers, lists) go through _as_int one by one."""
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
            picked = np.array([_as_int(v, int(d)) for v, d in zip(objs[given].tolist(), out[given].tolist())],
                              np.int64)
        out[given] = picked
    return out


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
_BOUNDARY = re.compile(rb'\}\s*,\s*\{\s*["}]')  # `}, {"`: seldom inside a string or a value
_EVENTS = msgspec.json.Decoder(list[_Event])
_TRACE = msgspec.json.Decoder(_Trace)
_SYNTAX = msgspec.json.Decoder()  # untyped: a syntax check of a partial buffer
_EMPTY_HELP = "expected a PyTorch profiler trace (JSON with traceEvents)"
# Bounds from the data: Kineto writes its header (device properties, ids) in a few KB before
# traceEvents, and each event in well under a KB (a long Python stack: a few KB).
MAX_HEADER_BYTES = 64 << 20
_TOKEN_TAIL = frozenset(b"0123456789+-.eEtrufalsn")  # bytes a number or true/false/null ends in
MAX_EVENT_BYTES = 64 << 20


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

    def _readinto(self, free: memoryview) -> int:
        try:
            got = self.f.readinto(free)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise InputError(self.path, f"corrupt or truncated gzip data ({e.__class__.__name__})") from None
        except OSError as e:
            raise InputError(self.path, f"cannot read: {e}") from None
        self.progress.update(self.raw.tell() / 1e6)
        return got

    def _chunk(self) -> bytes:
        free = bytearray(_CHUNK_BYTES)
        with memoryview(free) as view:
            got = self._readinto(view)
        return bytes(free[:got])

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
            self._check_partial(buf, len(buf), "the header before traceEvents")
            if len(buf) > MAX_HEADER_BYTES:
                raise InputError(self.path, f"no traceEvents array in the first {MAX_HEADER_BYTES >> 20} MiB; "
                                 + _EMPTY_HELP)

    def _no_events(self, data: bytes):
        try:
            _TRACE.decode(data)
        except msgspec.ValidationError as e:
            raise InputError(self.path, f"not a PyTorch profiler trace ({e})") from None
        except msgspec.DecodeError as e:
            raise InputError(self.path, f"not valid JSON ({e})") from None
        raise InputError(self.path, "JSON without traceEvents; " + _EMPTY_HELP)

    def _body(self, rest: bytes, opener: bytes, list_tail: bool, head: _Trace | None = None) -> _Trace:
        # One reused buffer: "[" + unfinished events; a batch is decoded in place by turning the
        # comma after its last event into "]", so no batch is copied and no page is faulted twice.
        buf = bytearray(b"[")
        buf += rest
        n = len(buf)
        while True:
            if len(buf) < n + _CHUNK_BYTES:
                buf.extend(bytes(n + _CHUNK_BYTES - len(buf)))
            with memoryview(buf) as view, view[n:n + _CHUNK_BYTES] as free:
                got = self._readinto(free)
            if not got:
                break  # the rest, with whatever follows the array, is decoded whole below
            n += got
            cut = self._cut(buf, n)
            if cut > 0:
                buf[1:n - cut] = buf[cut + 1:n]  # keep the unfinished event, in place
                n -= cut
        try:
            if list_tail:
                with memoryview(buf) as view, view[:n] as events:
                    self._add(_EVENTS.decode(events))
                return head or _Trace()
            tail = _TRACE.decode(opener + buf[1:n])
        except msgspec.MsgspecError as e:
            raise self._error(e) from None
        self._add(tail.traceEvents or [])
        for name in ("deviceProperties", "distributedInfo"):
            if getattr(tail, name) is None and head is not None:
                setattr(tail, name, getattr(head, name))
        return tail

    def _cut(self, buf: bytearray, n: int) -> int:
        """Decode the complete events in buf[1:n]; return the index of the comma after them, or -1."""
        guess = None
        for guess in _BOUNDARY.finditer(buf, max(1, n - (1 << 16)), n):
            pass
        if guess is not None:
            cut = buf.index(b",", guess.start())
            del guess  # a match holds the buffer; it must not outlive this batch
            if self._decode_batch(buf, cut, final=False):
                return cut
        cut = _exact_cut(buf, n)
        if cut < 0:  # no whole event yet: malformed bytes are refused now, not at the end of the file
            self._check_partial(buf, n, "traceEvents")
            if n > MAX_EVENT_BYTES:
                raise InputError(self.path, f"a trace event longer than {MAX_EVENT_BYTES >> 20} MiB: "
                                            "the traceEvents array is corrupt")
            return -1
        self._decode_batch(buf, cut, final=True)
        return cut

    def _decode_batch(self, buf: bytearray, cut: int, final: bool) -> bool:
        buf[cut] = 0x5D  # "]"
        try:
            with memoryview(buf) as view, view[:cut + 1] as batch:
                events = _EVENTS.decode(batch)
        except msgspec.MsgspecError as e:
            buf[cut] = 0x2C  # ","
            if final:
                raise self._error(e) from None
            return False
        self._add(events)
        return True

    def _check_partial(self, data: bytes | bytearray, end: int, where: str) -> None:
        """Raise if data[:end], the start of a JSON value, is malformed (not merely unfinished).

        A number or literal cut by the buffer's end would read as malformed: it is left out (a cut
        string reads as unfinished)."""
        while end > 0 and data[end - 1] in _TOKEN_TAIL:
            end -= 1
        try:
            with memoryview(data) as view, view[:end] as head:
                _SYNTAX.decode(head)
        except msgspec.DecodeError as e:
            if "truncated" not in str(e) and "trailing characters" not in str(e):
                detail = re.sub(r" \(byte \d+\)", "", str(e))
                raise InputError(self.path, f"malformed JSON in {where} ({detail})") from None

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


def _exact_cut(buf: bytearray, n: int) -> int:
    """Index of the last comma between two elements of the array in buf[1:n], strings skipped.

    Vectorized (a few bytes of scratch per input byte): a quote counts unless an odd run of
    backslashes precedes it; bytes between counted quotes are inside strings; depth is the running
    sum of the brackets outside them.
    """
    b = np.frombuffer(buf, np.uint8, n - 1, 1)
    quotes = np.flatnonzero(b == 0x22)
    after_bs = np.flatnonzero(b[np.maximum(quotes - 1, 0)] == 0x5C)  # few: check them one by one
    quotes = np.delete(quotes, [i for i in after_bs.tolist() if _odd_backslashes(b, int(quotes[i]))])
    toggle = np.zeros(len(b), np.uint8)
    toggle[quotes] = 1
    inside = np.bitwise_xor.accumulate(toggle).view(bool)
    del toggle
    marks = np.flatnonzero(((b == 0x7B) | (b == 0x5B) | (b == 0x7D) | (b == 0x5D) | (b == 0x2C)) & ~inside)
    del inside
    kinds = b[marks]
    step = np.where((kinds == 0x7B) | (kinds == 0x5B), 1, np.where(kinds == 0x2C, 0, -1))
    depth = np.cumsum(step)
    closed = np.flatnonzero(depth < 0)  # the end of traceEvents
    end = closed[0] if len(closed) else len(marks)
    commas = marks[:end][(kinds[:end] == 0x2C) & (depth[:end] == 0)]
    return int(commas[-1]) + 1 if len(commas) else -1


def _odd_backslashes(b: np.ndarray, q: int) -> bool:
    run = 0
    while q - run - 1 >= 0 and b[q - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1


def read_torch_trace(path: str | os.PathLike, progress: bool = False) -> Timeline:
    """Read a Kineto JSON trace (`.json` or `.json.gz`) into a validated Timeline.

    Streams: the file is decoded in batches of events, so memory stays near the size of the tables.
    """
    size = os.path.getsize(path) if os.path.isfile(path) else 0
    bar = Progress(f"reading {os.path.basename(str(path))}", total=size / 1e6, enabled=progress)
    cols = _Columns()
    # Nothing decoded here forms reference cycles (the event Structs are gc=False), yet the lists
    # of a big trace would trigger collection passes over the whole heap: pause the collector.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with open_input(path) as f:
            trace = _TraceStream(path, f, cols, bar).read()
        gpu, host, ranges = cols.tables(path)
        memory = cols.memory_table(path)
    finally:
        if collecting:
            gc.enable()
        bar.close()
    dist = trace.distributedInfo or {}
    rank, world = dist.get("rank"), dist.get("world_size")
    return Timeline(
        path=str(path), source="torch", gpu=gpu, host=host, ranges=ranges,
        devices=_devices(trace.deviceProperties),
        rank=_as_int(rank) if rank is not None else None,
        world_size=_as_int(world) if world is not None else None,
        process_groups=_process_groups(dist.get("pg_config")),
        memory=memory,
    ).validate()


def _process_groups(pgs, limit: int = 1024) -> list[dict]:
    """distributedInfo.pg_config as [{name, desc, size}] (entries of another shape are left out)."""
    if not isinstance(pgs, list):
        return []
    return [{"name": str(pg.get("pg_name", ""))[:200], "desc": str(pg.get("pg_desc", ""))[:200],
             "size": pg["pg_size"] if isinstance(pg.get("pg_size"), int) else None}
            for pg in pgs[:limit] if isinstance(pg, dict)]
