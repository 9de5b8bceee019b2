"""Reader for CUDA memory snapshots (`torch.cuda.memory._dump_snapshot`, a pickle, maybe gzipped).

The pickle is loaded by an Unpickler that refuses every global, so a hostile file cannot run code:
a real snapshot holds plain builtins only. It fills the memory family's model (diagnoser/memory/model.py:
the allocator's own records and a deduplicated table of allocation stacks) and computes no metrics.
"""
from __future__ import annotations

import os
import pickle
import zlib
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..limits import process_owned
from .input_files import GZIP_MAX_RATIO, open_input
from ..memory.model import (ACTION_CODE, UNKNOWN_ACTION, Annotation, Block, Frame, MemorySnapshot, OomEvent, Segment,
                            TraceTable)
from ..progress import Progress
from .snapshot_child import read_in_child

class SafeUnpickler(pickle.Unpickler):
    """Unpickler for plain builtins only: any global (class, function) is refused before lookup."""

    def __init__(self, file, path):
        super().__init__(file)
        self._path = path

    def find_class(self, module, name):  # noqa: D401 - pickle API
        raise InputError(self._path, f"refuses to load pickle globals ({module}.{name} would execute code); "
                                     "a CUDA memory snapshot holds plain data only")

    def persistent_load(self, pid):
        raise InputError(self._path, "refuses pickle persistent ids; not a CUDA memory snapshot")


# Unpickled real snapshots take 3-6x their pickled size in memory (fixtures, corpus, external
# files measured); an opcode bomb takes ~72x (EMPTY_LIST). Growth past HEAP_RATIO x the bytes
# consumed (and past HEAP_FLOOR) is refused as a bomb, checked at every read of the unpickler.
HEAP_RATIO = 32
HEAP_FLOOR = 256 << 20
_PIECE = 16 << 20


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _GuardedReader:
    """The unpickler's file: length claims are checked against what the file holds, heap growth
    against the bytes consumed; compressed progress goes to a Progress."""

    def __init__(self, f, path, progress: Progress | None):
        self._f, self._path, self._progress = f, path, progress
        self._raw = getattr(f, "fileobj", f)
        self._plain = self._raw is f
        self._size = os.fstat(self._raw.fileno()).st_size
        self._base = _rss()
        self._consumed = 0

    def _check(self, n: int) -> None:
        if self._plain and n > self._size - self._f.tell():
            raise InputError(self._path, f"pickle claims a {n:,}-byte object, the file has "
                                         f"{max(self._size - self._f.tell(), 0):,} bytes left: not a CUDA memory snapshot")

    def _tick(self, got: int) -> None:
        self._consumed += got
        grown = _rss() - self._base if self._base else 0
        if grown > max(HEAP_FLOOR, HEAP_RATIO * self._consumed):
            raise InputError(self._path, f"pickle bomb: {self._consumed / 1e6:.1f} MB of pickle grew "
                                         f"{grown / 1e6:.0f} MB of objects (a real snapshot takes under "
                                         "6x its size); not a CUDA memory snapshot")
        if self._progress is not None and self._progress.enabled:
            self._progress.update(self._raw.tell() / 1e6)

    def read(self, n=-1):
        if n is None or n < 0:
            n = self._size - self._f.tell() if self._plain else _PIECE
        self._check(n)
        if n <= _PIECE:
            data = self._f.read(n)
        else:  # a gzip stream: memory follows the data, not the claim
            parts, got = [], 0
            while got < n:
                part = self._f.read(min(_PIECE, n - got))
                if not part:
                    break
                parts.append(part)
                got += len(part)
                self._tick(len(part))
            data = b"".join(parts)
            self._consumed -= len(data)
        self._tick(len(data))
        return data

    def readinto(self, b):
        self._check(len(b))
        n = self._f.readinto(b)
        self._tick(n or 0)
        return n

    def peek(self, n=0):
        data = self._f.peek(n)
        self._tick(0)
        return data

    def readline(self, *a):
        line = self._f.readline(*a)
        self._tick(len(line))
        return line


class _AddressCeiling:
    """During the load, RLIMIT_AS at what the process maps now plus `extra`: one giant
    allocation a length field asks for (BYTEARRAY8 of 64 GiB) fails at once as a MemoryError.
    Process-wide: used only in a process diagnoser owns (load_snapshot)."""

    def __init__(self, extra: int):
        self.extra, self.saved = extra, None

    def __enter__(self):
        try:
            import resource
            with open("/proc/self/statm", "rb") as f:
                mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            want = mapped + self.extra
            if soft == resource.RLIM_INFINITY or want < soft:
                resource.setrlimit(resource.RLIMIT_AS, (want, hard))
                self.saved = (resource, soft, hard)
        except (ImportError, OSError, ValueError, IndexError):
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            resource, soft, hard = self.saved
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def load_raw(path: str | os.PathLike, progress: Progress | None = None):
    """Unpickle `path` safely; InputError for anything that is not a readable plain-data pickle."""
    stream = open_input(path)
    if progress is not None and progress.enabled:
        progress.total = os.path.getsize(path) / 1e6
    try:
        with stream:
            if hasattr(stream, "peek") and not stream.peek(1):
                raise InputError(path, "file is empty; expected a CUDA memory snapshot pickle")
            src = _GuardedReader(stream, path, progress)
            plausible = src._size * (1 if src._plain else GZIP_MAX_RATIO)
            with _AddressCeiling(max(2 * HEAP_FLOOR, 2 * HEAP_RATIO * plausible)):
                return SafeUnpickler(src, str(path)).load()
    except InputError:
        raise
    except MemoryError:
        raise InputError(path, "pickle asks for more memory than its data can fill (a pickle bomb, "
                               "not a CUDA memory snapshot)") from None
    except (EOFError, zlib.error) as e:
        raise InputError(path, f"truncated or corrupt snapshot ({e.__class__.__name__})") from None
    except (pickle.UnpicklingError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            OverflowError, UnicodeDecodeError, RecursionError, OSError, SystemError) as e:
        raise InputError(path, f"not a readable CUDA memory snapshot pickle ({e.__class__.__name__})") from None
    finally:
        if progress is not None:
            progress.close()


def load_snapshot(path: str | os.PathLike, progress: Progress | None = None) -> MemorySnapshot:
    """Read a CUDA memory snapshot into a MemorySnapshot (see module docstring). The load caps the
    address space (_AddressCeiling), a process-wide limit: where diagnoser does not own the process
    (the Python API), it runs in a child process that does (snapshot_child)."""
    if not process_owned():
        return read_in_child(path, progress)
    data = load_raw(path, progress)
    if isinstance(data, list):  # torch.cuda.memory_snapshot(): segments only
        data = {"segments": data, "device_traces": []}
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise InputError(path, "pickle is not a CUDA memory snapshot (no 'segments' list); dump one with "
                               "torch.cuda.memory._dump_snapshot(\"snap.pickle\")")
    try:
        return _build(str(path), data)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise InputError(path, f"malformed CUDA memory snapshot ({e.__class__.__name__}: {e})") from None


class _StackTable:
    """Deduplicates frame lists by content; real snapshots share frame dicts, so an id cache is fast."""

    def __init__(self):
        self.stacks: list[tuple[Frame, ...]] = []
        self._by_content: dict[tuple[Frame, ...], int] = {}
        self._by_list_id: dict[int, int] = {}
        self._frame_by_id: dict[int, Frame] = {}
        self._keep = []  # keeps cached-id objects alive so ids stay unique

    def index(self, frames) -> int:
        if not frames:
            return -1
        key = id(frames)
        hit = self._by_list_id.get(key)
        if hit is not None:
            return hit
        fcache = self._frame_by_id
        out = []
        for f in frames:
            fr = fcache.get(id(f))
            if fr is None:
                fr = Frame(str(f.get("filename", "")), int(f.get("line", 0) or 0), str(f.get("name", "")))
                fcache[id(f)] = fr
                self._keep.append(f)
            out.append(fr)
        stack = tuple(out)
        idx = self._by_content.get(stack)
        if idx is None:
            idx = len(self.stacks)
            self.stacks.append(stack)
            self._by_content[stack] = idx
        self._by_list_id[key] = idx
        self._keep.append(frames)
        return idx


def _build(path: str, data: dict) -> MemorySnapshot:
    table = _StackTable()
    segments = []
    for s in data["segments"]:
        blocks = tuple(Block(int(b["address"]), int(b["size"]), int(b.get("requested_size", b["size"])),
                             str(b.get("state", "")), table.index(b.get("frames") or ()))
                       for b in s.get("blocks", ()))
        segments.append(Segment(int(s.get("device", 0)), int(s["address"]), int(s["total_size"]),
                                int(s.get("allocated_size", 0)), int(s.get("active_size", 0)),
                                int(s.get("requested_size", 0)), int(s.get("stream", 0)),
                                str(s.get("segment_type", "")), bool(s.get("is_expandable", False)), blocks))
    traces, ooms = {}, []
    for device, entries in enumerate(data.get("device_traces") or []):
        if not entries:
            continue
        n = len(entries)
        action = np.empty(n, np.int8)
        addr = np.empty(n, np.int64)
        size = np.empty(n, np.int64)
        time_us = np.empty(n, np.int64)
        stream = np.empty(n, np.int64)
        stack = np.empty(n, np.int32)
        code, index = ACTION_CODE.get, table.index
        for i, e in enumerate(entries):
            a = code(e["action"], UNKNOWN_ACTION)
            action[i] = a
            addr[i] = e.get("addr", 0)
            size[i] = e.get("size", 0)
            time_us[i] = e.get("time_us", 0)
            stream[i] = e.get("stream", 0)
            stack[i] = index(e.get("frames") or ())
            if a == 7:  # oom
                ooms.append(OomEvent(device, i, int(e.get("time_us", 0)), int(e.get("size", 0)),
                                     int(e.get("device_free", -1))))
        traces[device] = TraceTable(device, action, addr, size, time_us, stream, stack)
    annotations = [Annotation(str(a.get("stage", "")), str(a.get("name", "")), int(a.get("device", 0)),
                              int(a.get("time_us", 0)))
                   for a in data.get("external_annotations") or () if isinstance(a, dict)]
    settings = data.get("allocator_settings") or {}
    return MemorySnapshot(path, segments, traces, table.stacks, ooms,
                          dict(settings) if isinstance(settings, dict) else {}, annotations)


def read_snapshot(path: str | os.PathLike, progress: bool | Progress = False) -> MemorySnapshot:
    """Pipeline entry point: `progress` True shows 'reading snapshot: N/M MB' on stderr."""
    if isinstance(progress, bool):
        progress = Progress(f"reading {Path(path).name}", unit="MB", enabled=progress)
    return load_snapshot(path, progress)
