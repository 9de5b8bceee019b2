"""Nsight Compute report reader: the binary `.ncu-rep` (optionally gzipped) into an `NcuReport`.

The file is a sequence of length-prefixed protobuf messages (layout in shared/FORMATS.md); we walk
the wire format ourselves, so no protobuf package or NVIDIA software is needed. SASS/source payloads
are skipped with a seek, never read. Values are stored as Nsight Compute stores them (base units:
ns, bytes, Hz, per second); no metric is computed here.
"""
from __future__ import annotations

import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterator, Union

from ..kernel_names import without_parameters
from ..errors import InputError
from ..inputs import GzipStream, open_input, regular_file
from ..progress import NULL_PROGRESS, Progress

MetricValue = Union[float, int, str]

MESSAGE_TYPES = {0: "none", 1: "info", 2: "warning", 3: "error", 4: "optimization"}
SPEEDUP_TYPES = {1: "local", 2: "global"}
MAGIC = b"NVR\x00"


@dataclass
class NcuRule:
    """One message of one Nsight Compute guided-analysis rule (its own verdict on a launch)."""

    identifier: str  # e.g. "SOLBottleneck", "UncoalescedGlobalAccess"
    section: str  # section identifier, e.g. "SpeedOfLight"
    type: str  # none | info | warning | error | optimization (CSV: INF, WRN, ERR, OPT)
    text: str
    speedup_type: str | None = None  # local | global
    speedup_pct: float | None = None


@dataclass
class NcuLaunch:
    """One profiled kernel launch: identity, launch configuration, every metric and rule result."""

    id: int  # 0-based launch index, equal to the "ID" column of NVIDIA's CSV export
    name: str  # demangled name (function name when the kernel has no C++ mangling)
    short_name: str  # function name without namespaces, template arguments or parameters
    mangled_name: str = ""
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    device: int = 0
    stream: int = 0
    context: int = 0
    process_id: int = 0
    nvtx: list[str] = field(default_factory=list)
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)  # only where the source stores a unit
    rules: list[NcuRule] = field(default_factory=list)


@dataclass
class NcuReport:
    """A whole Nsight Compute report, whichever form it came from (binary or CSV)."""

    path: str
    kind: str  # "ncu-rep" | "ncu-csv-raw" | "ncu-csv-details"
    launches: list[NcuLaunch] = field(default_factory=list)
    tool_version: str = ""
    versions: dict[str, str] = field(default_factory=dict)  # provider -> version
    devices: dict[int, dict[str, MetricValue]] = field(default_factory=dict)  # id -> attributes
    device_names: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- wire format

class _Corrupt(Exception):
    pass


def _varint(b: bytes, i: int) -> tuple[int, int]:
    c = b[i]
    if c < 0x80:
        return c, i + 1
    r = c & 0x7F
    s = 7
    while True:
        i += 1
        c = b[i]
        r |= (c & 0x7F) << s
        if c < 0x80:
            return r, i + 1
        s += 7
        if s > 70:
            raise _Corrupt("varint too long")


def _fields(b: bytes) -> Iterator[tuple[int, int, object]]:
    """Yield (field number, wire type, value); length-delimited values come back as bytes."""
    i, n = 0, len(b)
    while i < n:
        key, i = _varint(b, i)
        wt = key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            ln, i = _varint(b, i)
            if i + ln > n:
                raise _Corrupt("length past end of message")
            v = b[i:i + ln]
            i += ln
        elif wt == 1:
            v = b[i:i + 8]
            i += 8
        elif wt == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise _Corrupt(f"unsupported wire type {wt}")
        if i > n:
            raise _Corrupt("field past end of message")
        yield key >> 3, wt, v


_unpack_f = struct.Struct("<f").unpack_from
_unpack_d = struct.Struct("<d").unpack_from


def _value(b: bytes) -> MetricValue | None:
    """Decode a value message: 1 string, 2 float, 3 double, 4 uint32, 5 uint64 (others: int64-ish)."""
    if not b:
        return None
    key = b[0]
    if key == 0x1D:  # field 2, fixed32 float
        return float(_unpack_f(b, 1)[0])
    if key == 0x19:  # field 3, fixed64 double
        return _unpack_d(b, 1)[0]
    if key in (0x20, 0x28, 0x30, 0x38):  # uint32 / uint64 / int32 / int64 varints
        v = _varint(b, 1)[0]
        if key in (0x30, 0x38) and v >= 1 << 63:
            v -= 1 << 64
        return v
    for f, wt, v in _fields(b):
        if f == 1 and wt == 2:
            return v.decode("utf-8", "replace")
        if wt == 0:
            return v
        if wt == 1:
            return _unpack_d(v)[0]
        if wt == 5:
            return float(_unpack_f(v)[0])
    return None


def _text(b) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


def _dim3(b: bytes) -> tuple[int, int, int]:
    d = [1, 1, 1]
    for f, wt, v in _fields(b):
        if wt == 0 and 1 <= f <= 3:
            d[f - 1] = v
    return d[0], d[1], d[2]


def _metrics(res_fields: list[bytes], strings: list[str]) -> dict[str, MetricValue]:
    """MetricResult {1 NameId, 2 value, 3 repeated instance values (skipped), 4 category}."""
    out: dict[str, MetricValue] = {}
    nstr = len(strings)
    for b in res_fields:
        # fast path: "08 <nameid> 12 <len> <value>" as every writer seen so far lays it out
        if b[0] == 0x08:
            nid, i = _varint(b, 1)
            if i < len(b) and b[i] == 0x12:
                ln, i = _varint(b, i + 1)
                if nid < nstr:
                    v = _value(b[i:i + ln])
                    if v is not None:
                        out[strings[nid]] = v
                continue
        nid, val = None, None
        for f, wt, v in _fields(b):
            if f == 1 and wt == 0:
                nid = v
            elif f == 2 and wt == 2:
                val = _value(v)
        if nid is not None and nid < nstr and val is not None:
            out[strings[nid]] = val
    return out


def _rule(b: bytes) -> list[NcuRule]:
    ident, section, items = "", "", []
    for f, wt, v in _fields(b):
        if f == 1 and wt == 2:
            ident = _text(v)
        elif f == 4 and wt == 2:
            section = _text(v)
        elif f == 3 and wt == 2:
            items.append(v)
    rules = []
    for body in items:
        for f, wt, item in _fields(body):
            if f != 1 or wt != 2:
                continue
            text, mtype, sp_type, sp_val = "", 0, None, None
            for g, wt2, v in _fields(item):
                if g == 1 and wt2 == 2:
                    for h, wt3, x in _fields(v):
                        if h == 1 and wt3 == 2:
                            text = _text(x)
                        elif h == 2 and wt3 == 0:
                            mtype = x
                elif g == 10 and wt2 == 2:
                    for h, wt3, x in _fields(v):
                        if h == 1 and wt3 == 0:
                            sp_type = SPEEDUP_TYPES.get(x)
                        elif h == 2 and wt3 == 1:
                            sp_val = _unpack_d(x)[0]
                        elif h == 2 and wt3 == 5:
                            sp_val = float(_unpack_f(x)[0])
            if text:
                rules.append(NcuRule(ident, section, MESSAGE_TYPES.get(mtype, "none"), text,
                                     sp_type if sp_val is not None else None, sp_val))
    return rules


def _nvtx_strings(b: bytes, depth: int = 0) -> list[str]:
    """NVTX state has no documented layout here: collect its printable strings in order."""
    out: list[str] = []
    try:
        for f, wt, v in _fields(b):
            if wt != 2 or not v:
                continue
            if depth < 6:
                try:
                    inner = _nvtx_strings(v, depth + 1)
                except _Corrupt:
                    inner = None
                if inner:
                    out.extend(inner)
                    continue
            s = v.decode("utf-8", "ignore")
            if s.isprintable() and len(s) == len(v):
                out.append(s)
    except (_Corrupt, IndexError):
        raise _Corrupt("bad nvtx")
    return out


_SHORT_RE = re.compile(r"[A-Za-z_~][A-Za-z0-9_~]*")


def short_kernel_name(name: str) -> str:
    """Function name alone: `void ns::f<int>(float*)` -> `f`; `nvjet_x` stays `nvjet_x`."""
    s = without_parameters(name.strip())
    out, depth = [], 0  # drop template arguments
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    last = s.split("::")[-1].split()
    m = _SHORT_RE.search(last[-1]) if last else None
    return m.group(0) if m else name


def _launch(idx: int, b: bytes, strings: list[str]) -> NcuLaunch:
    mangled = func = demangled = renamed = ""
    grid = block = (0, 0, 0)
    context = stream = pid = 0
    metric_fields: list[bytes] = []
    rules: list[NcuRule] = []
    nvtx: list[str] = []
    for f, wt, v in _fields(b):
        if f == 13:
            metric_fields.append(v)
        elif f == 17 or f == 15:
            continue  # sections (display layout) and source: not needed
        elif f == 19 and wt == 2:
            rules.extend(_rule(v))
        elif f == 5 and wt == 2:
            mangled = _text(v)
        elif f == 6 and wt == 2:
            func = _text(v)
        elif f == 7 and wt == 2:
            demangled = _text(v)
        elif f == 31 and wt == 2:
            renamed = _text(v)
        elif f == 10 and wt == 2:
            grid = _dim3(v)
        elif f == 11 and wt == 2:
            block = _dim3(v)
        elif f == 1 and wt == 0:
            pid = v
        elif f == 22 and wt == 0:
            context = v
        elif f == 23 and wt == 0:
            stream = v
        elif f == 21 and wt == 2:
            nvtx = _nvtx_strings(v)
    metrics = _metrics(metric_fields, strings)
    name = renamed or demangled or func or mangled
    dev = metrics.get("launch__device_id", 0)
    return NcuLaunch(
        id=idx, name=name, short_name=func if func and "(" not in func else short_kernel_name(name),
        mangled_name=mangled, grid=grid, block=block,
        device=int(dev) if isinstance(dev, (int, float)) else 0, stream=int(stream),
        context=int(context), process_id=int(pid), nvtx=nvtx, metrics=metrics, rules=rules)


def _session(b: bytes, report: NcuReport) -> None:
    for f, wt, v in _fields(b):
        if f == 6 and wt == 2:  # DeviceAttributes {1 ID, 2 Name, 3 repeated {1 Name, 2 value}}
            dev_id, dev_name, attrs = 0, "", {}
            for g, wt2, x in _fields(v):
                if g == 1 and wt2 == 0:
                    dev_id = x
                elif g == 2 and wt2 == 2:
                    dev_name = _text(x)
                elif g == 3 and wt2 == 2:
                    key, val = "", None
                    for h, wt3, y in _fields(x):
                        if h == 1 and wt3 == 2:
                            key = _text(y)
                        elif h == 2 and wt3 == 2:
                            val = _value(y)
                    if key and val is not None:
                        attrs[key] = val
            report.devices.setdefault(dev_id, {}).update(attrs)
            if dev_name:
                report.device_names[dev_id] = dev_name
        elif f == 8 and wt == 2:  # VersionInfo {1 Provider, 2 Version}
            prov = ver = ""
            for g, wt2, x in _fields(v):
                if g == 1 and wt2 == 2:
                    prov = _text(x)
                elif g == 2 and wt2 == 2:
                    ver = _text(x)
            if prov:
                report.versions[prov] = ver
                if "Nsight Compute" in prov and not report.tool_version:
                    report.tool_version = ver


# ---------------------------------------------------------------- file walk

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
        raise _Corrupt(f"{what} claims {n:,} bytes, the file has {left:,} left")
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
        raise _Corrupt(f"file ends inside {what} ({len(b)} of {n} bytes)")
    return b


_PIECE = 16 << 20


def _u32(f, what: str) -> int | None:
    b = f.read(4)
    if not b:
        return None
    if len(b) != 4:
        raise _Corrupt(f"file ends inside the length of {what}")
    return struct.unpack("<I", b)[0]


def _skip(f, n: int, what: str) -> None:
    """Seek past n bytes (a SASS/source payload) without keeping them."""
    if n <= 0:
        return
    left = _remaining(f)
    if left is not None and n > left:
        raise _Corrupt(f"file ends inside {what} (it claims {n:,} bytes, {left:,} are left)")
    try:
        pos = f.tell()
        f.seek(n, os.SEEK_CUR)
        ok = f.tell() == pos + n
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise _Corrupt(f"file ends inside {what}")


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
    except _Corrupt as e:
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
        raise _Corrupt("missing NVR header; not an .ncu-rep file")
    n = _u32(f, "file header")
    if n is None:
        raise _Corrupt("no file header")
    _fields(_read_exact(f, n, "file header"))  # version only; nothing we need
    strings: list[str] = []
    while True:
        n = _u32(f, "block header")
        if n is None:
            break
        if n == 0:
            raise _Corrupt(f"empty block header at byte {f.tell() - 4:,} (every block declares its payload size)")
        head = _read_exact(f, n, "block header")
        counts = {1: 0, 2: 0, 7: 0, 8: 0, 9: 0}
        payload = None
        for fno, wt, v in _fields(head):
            if wt == 0 and fno in counts:
                counts[fno] = v
            elif fno == 5 and wt == 0:
                payload = v
            elif fno == 4 and wt == 2 and v:
                strings.extend(_text(s) for g, w, s in _fields(v) if g == 1 and w == 2)
            elif fno == 3 and wt == 2:
                _session(v, report)
        if payload is None:
            raise _Corrupt("a block header without its payload size")
        left = _remaining(f)
        if left is not None and payload > left:
            raise _Corrupt(f"a block claims {payload:,} bytes of payload, the file has {left:,} left")
        start = f.tell()
        for what, count in (("a source payload", counts[1]), ("a profile result", counts[2])):
            for _ in range(count):
                ln = _u32(f, what)
                if ln is None:
                    raise _Corrupt(f"file ends inside {what}")
                if ln == 0 or f.tell() - start + ln > payload:
                    raise _Corrupt(f"{what} of {ln:,} bytes does not fit its block's {payload:,}-byte payload")
                if what == "a source payload":
                    _skip(f, ln, what)
                else:
                    res = _read_exact(f, ln, what)
                    report.launches.append(_launch(len(report.launches), res, strings))
        used = f.tell() - start
        if used > payload:
            raise _Corrupt(f"block payload overruns its declared size ({used} > {payload})")
        _skip(f, payload - used, "a range/graph result")  # newer result kinds: not kernel launches
        if raw is not None:
            prog.update(raw.tell() / 1e6)
        else:
            prog.update(f.tell() / 1e6)
