"""Nsight Compute report reader: the binary `.ncu-rep` (optionally gzipped) into an `NcuReport`.

The file is a sequence of length-prefixed protobuf messages (layout in shared/FORMATS.md): a magic
number, a file header, then blocks, each a header (string table, session, counts) and a payload of
length-prefixed results. This module walks that framing, with every length checked against what
the file holds before it is read, and skips SASS/source payloads with a seek, never reading them.
The messages themselves are decoded by ncu_messages.py (over the wire format in ncu_wire.py) into
the family's model, diagnoser/ncu/model.py.
"""
from __future__ import annotations

import os
import struct
import zlib

from ..errors import InputError
from .input_files import GzipStream, open_input, regular_file
from ..progress import NULL_PROGRESS, Progress
from ..ncu.model import NcuReport
from .ncu_messages import launch_from_result, read_session
from .ncu_wire import CorruptReport, as_text, fields

MAGIC = b"NVR\x00"
_fields = fields  # benchmarks/fuzz.py reads protobuf fields through this name


def _remaining(f) -> int | None:
    """Bytes left in a plain file (None for a gzip stream, whose length is unknown)."""
    if isinstance(f, GzipStream):
        return None
    try:
        return max(_size(f) - f.tell(), 0)
    except (OSError, ValueError):
        return None


def _read_exact(f, n: int, what: str) -> bytes:
    """n bytes, after checking that a plain file holds them (a length field is a claim)."""
    left = _remaining(f)
    if left is not None and n > left:
        raise CorruptReport(f"{what} claims {n:,} bytes, the file has {left:,} left")
    if n <= _PIECE:
        b = f.read(n)
    else:  # a gzip stream: read in pieces so memory follows the data, not the claim
        parts, got = [], 0
        while got < n:
            part = f.read(min(_PIECE, n - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
        b = b"".join(parts)
    if len(b) != n:
        raise CorruptReport(f"file ends inside {what} ({len(b)} of {n} bytes)")
    return b


_PIECE = 16 << 20


def _u32(f, what: str) -> int | None:
    b = f.read(4)
    if not b:
        return None
    if len(b) != 4:
        raise CorruptReport(f"file ends inside the length of {what}")
    return struct.unpack("<I", b)[0]


def _skip(f, n: int, what: str) -> None:
    """Seek past n bytes (a SASS/source payload) without keeping them."""
    if n <= 0:
        return
    left = _remaining(f)
    if left is not None and n > left:
        raise CorruptReport(f"file ends inside {what} (it claims {n:,} bytes, {left:,} are left)")
    try:
        pos = f.tell()
        f.seek(n, os.SEEK_CUR)
        ok = f.tell() == pos + n
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise CorruptReport(f"file ends inside {what}")


def _size(f) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except (OSError, AttributeError, ValueError):
        return 1 << 62


def read_ncu_report(path: str | os.PathLike, progress: bool = False) -> NcuReport:
    """Read a binary Nsight Compute report; raise InputError when it is truncated or corrupt."""
    report = NcuReport(path=str(path), kind="ncu-rep")
    disk_size = regular_file(path).st_size
    prog = Progress(f"reading {os.path.basename(str(path))}", total=disk_size / 1e6, unit="MB",
                    enabled=progress and disk_size > (16 << 20)) if progress else NULL_PROGRESS
    try:
        with open_input(path) as f:
            raw = getattr(f, "fileobj", None)
            _walk(f, report, prog, raw)
    except CorruptReport as e:
        raise InputError(path, f"corrupt or truncated Nsight Compute report: {e}") from None
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise InputError(path, f"corrupt Nsight Compute report ({e.__class__.__name__} while decoding)") from None
    except (EOFError, zlib.error) as e:
        raise InputError(path, f"corrupt or truncated gzip data ({e.__class__.__name__})") from None
    finally:
        prog.close()
    if not report.launches:
        report.notes.append("the report holds no kernel launches")
    return report


def _walk(f, report: NcuReport, prog: Progress, raw) -> None:
    if f.read(4) != MAGIC:
        raise CorruptReport("missing NVR header; not an .ncu-rep file")
    n = _u32(f, "file header")
    if n is None:
        raise CorruptReport("no file header")
    fields(_read_exact(f, n, "file header"))  # version only; nothing we need
    strings: list[str] = []
    while True:
        n = _u32(f, "block header")
        if n is None:
            break
        if n == 0:
            raise CorruptReport(f"empty block header at byte {f.tell() - 4:,} (every block declares its payload size)")
        head = _read_exact(f, n, "block header")
        counts = {1: 0, 2: 0, 7: 0, 8: 0, 9: 0}
        payload = None
        for fno, wt, v in fields(head):
            if wt == 0 and fno in counts:
                counts[fno] = v
            elif fno == 5 and wt == 0:
                payload = v
            elif fno == 4 and wt == 2 and v:
                strings.extend(as_text(s) for g, w, s in fields(v) if g == 1 and w == 2)
            elif fno == 3 and wt == 2:
                read_session(v, report)
        if payload is None:
            raise CorruptReport("a block header without its payload size")
        left = _remaining(f)
        if left is not None and payload > left:
            raise CorruptReport(f"a block claims {payload:,} bytes of payload, the file has {left:,} left")
        start = f.tell()
        for what, count in (("a source payload", counts[1]), ("a profile result", counts[2])):
            for _ in range(count):
                ln = _u32(f, what)
                if ln is None:
                    raise CorruptReport(f"file ends inside {what}")
                if ln == 0 or f.tell() - start + ln > payload:
                    raise CorruptReport(f"{what} of {ln:,} bytes does not fit its block's {payload:,}-byte payload")
                if what == "a source payload":
                    _skip(f, ln, what)
                else:
                    res = _read_exact(f, ln, what)
                    report.launches.append(launch_from_result(len(report.launches), res, strings))
        used = f.tell() - start
        if used > payload:
            raise CorruptReport(f"block payload overruns its declared size ({used} > {payload})")
        _skip(f, payload - used, "a range/graph result")  # newer result kinds: not kernel launches
        if raw is not None:
            prog.update(raw.tell() / 1e6)
        else:
            prog.update(f.tell() / 1e6)
