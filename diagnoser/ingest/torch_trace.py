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
This module holds that stream scan and the entry point; the event schema and its Kineto vintages
are in kineto_events.py, the columns and frames built from the decoded events in torch_tables.py.
"""
from __future__ import annotations

import gc
import gzip
import os
import re
import zlib

import msgspec
import numpy as np

from ..errors import InputError
from .input_files import open_input
from ..progress import Progress
from ..identity import is_unix_ns
from ..timeline.tables import Timeline
from .kineto_events import KinetoEvent, KinetoTrace, as_int
from .torch_tables import TraceColumns, devices_from_properties, process_groups


# decompressed bytes per read; tests shrink it to exercise batch edges. A batch's decoded events take ~4x its
# bytes: at 2 MiB (was 8) the reader of a 0.5 GB trace peaks 16 MiB lower and is no slower (fewer cache misses)
_CHUNK_BYTES = 2 << 20
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb'\}\s*,\s*\{\s*["}]')  # `}, {"`: seldom inside a string or a value
_EVENTS = msgspec.json.Decoder(list[KinetoEvent])
_TRACE = msgspec.json.Decoder(KinetoTrace)
_SYNTAX = msgspec.json.Decoder()  # untyped: a syntax check of a partial buffer
_EMPTY_HELP = "expected a PyTorch profiler trace (JSON with traceEvents)"
# Bounds from the data: Kineto writes its header (device properties, ids) in a few KB before
# traceEvents, and each event in well under a KB (a long Python stack: a few KB).
MAX_HEADER_BYTES = 64 << 20
_NON_SPACE = re.compile(rb"[^ \t\r\n]")
_NOT_BLANK = re.compile(rb"[^ \t\n\r\x0b\x0c]")  # a byte bytes.strip() keeps
_LEAD = re.compile(rb"[^\xef\xbb\xbf \t\r\n]")  # the first byte past a byte-order mark and whitespace
_ENDS_ELEMENT = re.compile(rb"[}\]]")
_TOKEN_TAIL = frozenset(b"0123456789+-.eEtrufalsn")  # bytes a number or true/false/null ends in
MAX_EVENT_BYTES = 64 << 20
# msgspec raises RecursionError past its nesting limit (~1000 levels): malformed input, not a crash
_DECODE_ERRORS = (msgspec.MsgspecError, RecursionError)
_TOO_DEEP = "values nested deeper than any trace's"


class _TraceStream:
    """Split the traceEvents array into batches at element boundaries and decode each batch.

    A cut is first guessed at the last `}, {` of the buffer; `[batch]` only decodes when the cut is a
    real boundary (a cut inside a string or a nested value leaves it unterminated), so a failed
    decode falls back to an exact scan that skips strings.
    """

    def __init__(self, path, f, columns: TraceColumns, progress: Progress):
        self.path, self.f, self.columns, self.progress = path, f, columns, progress
        self.raw = getattr(f, "fileobj", f)  # compressed position, for progress
        self.seen = 0  # events decoded so far, to name the bad one in errors

    def read(self) -> KinetoTrace:
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

    def _chunk(self) -> bytearray:
        free = bytearray(_CHUNK_BYTES)
        with memoryview(free) as view:
            got = self._readinto(view)
        del free[got:]
        return free

    def _header(self) -> tuple[bytearray, KinetoTrace | None]:
        """Read up to the `[` that opens traceEvents; return the buffer from that `[` on (the body's buffer: the
        first read is not copied) and the header fields."""
        buf, pos = bytearray(), 0
        while True:
            chunk = self._chunk()
            if buf:
                buf += chunk
            else:
                buf = chunk
            if _NOT_BLANK.search(buf) is None:  # nothing but whitespace yet
                if not chunk:
                    raise InputError(self.path, "file is empty; " + _EMPTY_HELP)
                continue
            lead = _LEAD.search(buf)  # past a byte-order mark and whitespace
            at = -1 if lead is None else lead.start()
            del lead
            if at >= 0 and buf[at] == 0x5B:  # "["
                del buf[:at]  # (in place: a bytearray drops its front without a copy)
                return buf, None
            if at < 0 or buf[at] != 0x7B:  # "{"
                raise InputError(self.path, "not JSON (does not start with { or [); " + _EMPTY_HELP)
            head, at = None, -1
            for m in _ARRAY_START.finditer(buf, pos):  # (the iterator holds the buffer: resized only after it)
                try:
                    head = _TRACE.decode(buf[:m.start()] + b'"traceEvents":null}')
                except _DECODE_ERRORS:
                    continue  # a nested or malformed key: keep looking
                at = m.end() - 1
                break
            if at >= 0:
                del buf[:at]  # from the array's `[` on
                return buf, head
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
        except RecursionError:
            raise InputError(self.path, f"not valid JSON ({_TOO_DEEP})") from None
        raise InputError(self.path, "JSON without traceEvents; " + _EMPTY_HELP)

    def _body(self, buf: bytearray, opener: bytes, list_tail: bool, head: KinetoTrace | None = None) -> KinetoTrace:
        # One reused buffer (the header's, from the array's "[" on): "[" + unfinished events; a batch is decoded
        # in place by turning the comma after its last event into "]", so no batch is copied and no page is
        # faulted twice.
        n = len(buf)
        pending = n > 1  # the header's read may hold the whole trace: its events are cut into a batch first
        while True:
            if pending:
                pending, got = False, n - 1
            else:
                if len(buf) < n + _CHUNK_BYTES:
                    buf.extend(bytes(n + _CHUNK_BYTES - len(buf)))
                with memoryview(buf) as view, view[n:n + _CHUNK_BYTES] as free:
                    got = self._readinto(free)
                if not got:
                    break  # the rest, with whatever follows the array, is decoded whole below
                n += got
            lead = _NON_SPACE.search(buf, 1, n)  # whitespace before the next event is dropped, never kept
            if lead is None or lead.start() > 1:
                start = n if lead is None else lead.start()
                del lead
                buf[1:n - start + 1] = buf[start:n]
                n -= start - 1
                if n == 1:
                    continue
            else:
                del lead
            if not _ENDS_ELEMENT.search(buf, max(1, n - got), n):
                self._unfinished(buf, n)  # no } or ] read: no element can have ended
                continue
            cut = self._cut(buf, n)
            if cut > 0:  # keep the unfinished event, in place, without the whitespace before it (else the whole
                # next read would be moved to drop it: the copy of a batch per batch, where events are pretty-printed)
                lead = _NON_SPACE.search(buf, cut + 1, n)
                start = n if lead is None else lead.start()
                del lead
                buf[1:1 + n - start] = buf[start:n]
                n -= start - 1
        try:
            if list_tail:
                with memoryview(buf) as view, view[:n] as events:
                    self._add(_EVENTS.decode(bytes(events)))  # a copy: see _decode_batch
                return head or KinetoTrace()
            tail = _TRACE.decode(opener + buf[1:n])
        except _DECODE_ERRORS as e:
            raise self._error(e) from None
        self._add(tail.traceEvents or [])
        tail.traceEvents = None
        for name in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds"):
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
        if cut < 0:
            self._unfinished(buf, n)
            return -1
        self._decode_batch(buf, cut, final=True)
        return cut

    def _unfinished(self, buf: bytearray, n: int) -> None:
        """No whole event in buf[1:n] yet: malformed bytes are refused now, not at the end of the file."""
        self._check_partial(buf, n, "traceEvents")
        if n > MAX_EVENT_BYTES:
            raise InputError(self.path, f"a trace event longer than {MAX_EVENT_BYTES >> 20} MiB: "
                                        "the traceEvents array is corrupt")

    def _decode_batch(self, buf: bytearray, cut: int, final: bool) -> bool:
        buf[cut] = 0x5D  # "]"
        failed = None
        with memoryview(buf) as view, view[:cut + 1] as batch:
            try:
                taken = self.columns.add_batch(batch)  # the native scanner, where it reads the whole batch
            except BaseException as e:
                raise e.with_traceback(None)  # its frames would hold views of the buffer
            if taken is not None:
                self.seen += taken
                return True
            # decoded in place: the events' raw op arguments (msgspec.Raw) hold the buffer, so every
            # event is dropped before the view is released and the buffer cut and refilled
            try:
                events = _EVENTS.decode(batch)
            except _DECODE_ERRORS as e:
                failed = e
            else:
                try:
                    self._add(events)
                except BaseException as e:
                    del events
                    raise e.with_traceback(None)  # its frames would hold the events, and so the buffer
                del events
        if failed is not None:
            buf[cut] = 0x2C  # ","
            if final:
                raise self._error(failed) from None
            return False
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
        except RecursionError:
            raise InputError(self.path, f"malformed JSON in {where} ({_TOO_DEEP})") from None
        except msgspec.DecodeError as e:
            if "truncated" not in str(e) and "trailing characters" not in str(e):
                detail = re.sub(r" \(byte \d+\)", "", str(e))
                raise InputError(self.path, f"malformed JSON in {where} ({detail})") from None

    def _add(self, events: list[KinetoEvent]) -> None:
        self.columns.add(events)
        self.seen += len(events)

    def _error(self, e: msgspec.MsgspecError | RecursionError) -> InputError:
        if isinstance(e, RecursionError):
            return InputError(self.path, f"malformed JSON in traceEvents ({_TOO_DEEP})")
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


def read_torch_trace(path: str | os.PathLike, progress: bool = False, native: bool = True) -> Timeline:
    """Read a Kineto JSON trace (`.json` or `.json.gz`) into a validated Timeline.

    Streams: the file is decoded in batches of events, so memory stays near the size of the tables.
    native=False decodes every batch with msgspec (kineto_scan.py: the same Timeline either way).
    """
    size = os.path.getsize(path) if os.path.isfile(path) else 0
    bar = Progress(f"reading {os.path.basename(str(path))}", total=size / 1e6, enabled=progress)
    cols = TraceColumns(native)
    # Nothing decoded here forms reference cycles (the event Structs are gc=False), yet the lists
    # of a big trace would trigger collection passes over the whole heap: pause the collector.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with open_input(path) as f:
            trace = _TraceStream(path, f, cols, bar).read()
        gpu, host, ranges = cols.tables(path)
        memory = cols.memory_table(path)
        op_shapes = cols.op_shapes_table(path)
    finally:
        if collecting:
            gc.enable()
        bar.close()
    dist = trace.distributedInfo or {}
    rank, world = dist.get("rank"), dist.get("world_size")
    return Timeline(
        path=str(path), source="torch", gpu=gpu, host=host, ranges=ranges,
        devices=devices_from_properties(trace.deviceProperties),
        rank=as_int(rank) if rank is not None else None,
        world_size=as_int(world) if world is not None else None,
        process_groups=process_groups(dist.get("pg_config")),
        memory=memory,
        clock_epoch_ns=_clock_epoch_ns(trace.baseTimeNanoseconds, gpu, host),
        op_shapes=op_shapes,
    ).validate()


def _clock_epoch_ns(base, gpu, host) -> int | None:
    """The offset from the trace's clock to Unix time: baseTimeNanoseconds (newer Kineto writes ts relative
    to it); 0 when there is none and the times themselves are Unix times (older Kineto); else unknown."""
    first = min((int(t["start_ns"].iloc[0]) for t in (gpu, host) if len(t)), default=None)
    if first is not None and is_unix_ns(first):
        return 0  # the times are Unix times already (adding a base as well would put them decades ahead)
    if is_unix_ns(base):
        return int(base)
    return None

