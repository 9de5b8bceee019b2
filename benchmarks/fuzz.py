"""Fuzz `diagnose` with mutated real inputs, as an attacker would; print the counts tables.

Every case is a real fixture (trimmed where it is big) run through one mutation family, then in a
forked child with its own TMPDIR, one of four ways in turn (issue 31):

- `cli`: the command piped (`diagnoser.cli.main`), `--format` md, json, html or junit in turn, `-o`;
- `tty`: the command on a pseudo-terminal (stdin, stdout, stderr), `--progress`: the terminal report
  and the progress lines as a user sees them;
- `api`: `diagnoser.diagnose` in a process that does other work (a thread mapping 256 MiB at a time
  meanwhile), then all five formats (md, terminal, html, json, junit) rendered; the address-space
  limit must stay as it was and the thread never fail;
- `ranks` (torch): the mutated trace as rank 1 beside the real one as rank 0, through the command.

A case passes when it either reports (exit 0/3, nothing on stderr, every report complete) or
refuses with exactly one line `diagnose: error: <file>: ...` and exit 1; always in bounded time and
memory, never a traceback, never a temp file left (after a SIGTERM mid-run too), never the input
modified, never a pickle payload run. Every report is checked: no raw control, bidi or
non-character (U+FFFE/U+FFFF, surrogates) in any format (the terminal's own colours aside), JSON
parses, JUnit is well-formed XML.

    python benchmarks/fuzz.py                    # full run: 1,000 cases per reader
    python benchmarks/fuzz.py --cases 50 --jobs 2 --readers torch,nsys --seed 7

Families per reader: truncation, byte flips, chunk edits and gzip damage (all readers); structural
JSON edits (torch, mem-stats); SQLite page, header and schema damage plus hostile rows (nsys);
ncu-rep header and length fields (ncu-rep); column/line edits (ncu-csv); pickle opcode bombs and
hostile payloads (mem-snapshot). tests/fuzz/ runs a fixed-seed slice of the same cases in CI.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import pty
import random
import re
import resource
import select
import shutil
import signal
import sqlite3
import struct
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "fixtures"
READERS = ("torch", "nsys", "ncu-rep", "ncu-csv", "mem-snapshot", "mem-stats")
HANG_S = 30.0
BIG_RSS = 1 << 30
SMALL_INPUT = 10 << 20
MARKER = "PAYLOAD_RAN"
WAYS = ("cli", "tty", "api")
RANK_READERS = ("torch",)  # readers of per-rank traces: they also run the `ranks` way
CLI_FORMATS = ("json", "md", "html", "junit")
EXT = {"md": "md", "json": "json", "html": "html", "junit": "xml", "terminal": "txt"}
# what must never reach an output raw: C0 (tab and newline aside), DEL, C1, bidi and zero-width
# format characters, BOM, U+FFFE/U+FFFF, lone surrogates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffe\uffff"
                 "\ud800-\udfff]")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the terminal report's own colours
FILE_NAME_TAIL = "\x01\x1b]52;c;aWQ=\x07\x1b[2J\u202e\ufffe<b>"


# ---------------------------------------------------------------- seeds (real fixtures)

def _gunzip(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


def torch_seed(events: int = 800) -> bytes:
    """A real H200 PyTorch trace (fixtures/torch/x_infer_fp32), its first `events` events in time (the file
    lists CPU ops before the GPU's events: its first events alone hold no kernel, which is refused)."""
    trace = json.loads(_gunzip(FIX / "torch" / "x_infer_fp32.pt.trace.json.gz"))
    trace["traceEvents"] = sorted(trace["traceEvents"], key=lambda e: float(e.get("ts", 0)))[:events]
    return json.dumps(trace).encode()


def nsys_seed() -> bytes:
    """A real Nsight Systems export (fixtures/nsys/sdpa_attention, 1.2 MB)."""
    return _gunzip(FIX / "nsys" / "sdpa_attention.sqlite.gz")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _pb_fields(b: bytes):
    from diagnoser.ingest.ncu_report import _fields
    return list(_fields(b))


def _pb_encode(fields) -> bytes:
    out = bytearray()
    for fno, wt, v in fields:
        out += _varint(fno << 3 | wt)
        if wt == 0:
            out += _varint(v)
        elif wt == 2:
            out += _varint(len(v)) + v
        else:
            out += v
    return bytes(out)


def ncu_seed() -> bytes:
    """A real Nsight Compute report (fixtures/ncu/small_kernels) with its source/SASS payloads
    dropped (30 MB -> a few hundred KB; the launches, metrics and rules are untouched)."""
    data = _gunzip(FIX / "ncu" / "small_kernels.ncu-rep.gz")
    out = bytearray(data[:4])
    i = 4
    n = struct.unpack_from("<I", data, i)[0]
    out += data[i:i + 4 + n]
    i += 4 + n
    while i < len(data):
        n = struct.unpack_from("<I", data, i)[0]
        head = data[i + 4:i + 4 + n]
        i += 4 + n
        fields = _pb_fields(head)
        d = {f: v for f, wt, v in fields if wt == 0}
        payload = d.get(5, 0)
        body = data[i:i + payload]
        i += payload
        j, kept = 0, bytearray()
        for _ in range(d.get(1, 0)):  # sources: dropped
            j += 4 + struct.unpack_from("<I", body, j)[0]
        kept += body[j:]
        fields = [(f, wt, 0 if f == 1 else len(kept) if f == 5 else v) if wt == 0 else (f, wt, v)
                  for f, wt, v in fields]
        head = _pb_encode(fields)
        out += struct.pack("<I", len(head)) + head + kept
    return bytes(out)


def csv_seed(page: str) -> bytes:
    return (FIX / "ncu" / f"small_kernels.{page}.csv").read_bytes()


def snapshot_seed() -> bytes:
    """A real CUDA memory snapshot (fixtures/mem/activations, 176 KB pickle)."""
    return _gunzip(FIX / "mem" / "activations.snapshot.pickle.gz")


def seeds() -> dict[str, list[tuple[str, bytes]]]:
    """reader -> [(file suffix, plain bytes)]."""
    return {
        "torch": [(".pt.trace.json", torch_seed())],
        "nsys": [(".sqlite", nsys_seed())],
        "ncu-rep": [(".ncu-rep", ncu_seed())],
        "ncu-csv": [(".raw.csv", csv_seed("raw")), (".details.csv", csv_seed("details"))],
        "mem-snapshot": [(".snapshot.pickle", snapshot_seed())],
        "mem-stats": [(".memory_stats.json", (FIX / "mem" / "leak.memory_stats.json").read_bytes()),
                      (".memory_summary.txt", (FIX / "mem" / "leak.memory_summary.txt").read_bytes())],
    }


# ---------------------------------------------------------------- mutation families

def m_truncate(rng: random.Random, b: bytes) -> bytes:
    cut = rng.choice([0, 1, 2, 4, 16, 100, rng.randrange(len(b) + 1), len(b) - 1, len(b) // 2])
    return b[:max(cut, 0)]


def m_flip(rng: random.Random, b: bytes) -> bytes:
    a = bytearray(b)
    if not a:
        return b"\xff"
    for _ in range(rng.choice([1, 2, 8, 64, 512])):
        k = rng.randrange(len(a)) if rng.random() < 0.7 else rng.randrange(min(len(a), 128))
        a[k] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256), a[k] ^ (1 << rng.randrange(8))])
    return bytes(a)


def m_chunk(rng: random.Random, b: bytes) -> bytes:
    """Delete, duplicate, zero or splice a chunk; append garbage."""
    if len(b) < 4:
        return b + rng.randbytes(8)
    i = rng.randrange(len(b))
    n = rng.choice([1, 8, 100, 4096, len(b) // 3])
    op = rng.randrange(5)
    if op == 0:
        return b[:i] + b[i + n:]
    if op == 1:
        return b[:i] + b[i:i + n] * rng.choice([2, 10, 200]) + b[i + n:]
    if op == 2:
        return b[:i] + bytes(n) + b[i + n:]
    if op == 3:
        return b + rng.choice([b"\x00" * 1000, rng.randbytes(100), b"\n" * 50, b"}]}" * 3])
    j = rng.randrange(len(b))
    return b[:i] + b[j:j + n] + b[i:]


HOSTILE_VALUES = [None, True, -1, 0, 2 ** 63, 2 ** 64 + 1, -(2 ** 63) - 1, 10 ** 400, 1e308, -1e308,
                  1e300, "1e300", "", "x" * 10000, "NaN", [], {}, [[[[[]]]]], {"a": {"b": {"c": 1}}},
                  3.5, "\u0000", "\ud800"[:0] + "\u202e", 30000000, 2 ** 31]


def _walk_nodes(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            yield from _walk_nodes(v, path + (k,))
    elif isinstance(obj, list):
        for k, v in enumerate(obj[:50]):
            yield from _walk_nodes(v, path + (k,))


def _set(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def m_json(rng: random.Random, b: bytes) -> bytes:
    """Structural edits: a value replaced by a hostile one, a key deleted, a node duplicated or
    deeply nested; distributedInfo claims; huge ts/dur."""
    try:
        obj = json.loads(b)
    except ValueError:
        return m_flip(rng, b)
    nodes = [p for p, _ in _walk_nodes(obj) if p]
    for _ in range(rng.choice([1, 1, 2, 5])):
        op = rng.randrange(8)
        if not nodes or op == 0:
            if isinstance(obj, dict):
                obj["distributedInfo"] = {"rank": rng.choice([0, 3, -1, 2 ** 40, "0"]),
                                          "world_size": rng.choice([1, 2, 30000000, 10 ** 8, 0, -4, 2 ** 62, "8", 1.5])}
            continue
        p = rng.choice(nodes)
        try:
            if op in (1, 2, 3):
                _set(obj, p, rng.choice(HOSTILE_VALUES))
            elif op == 4:
                parent = obj
                for k in p[:-1]:
                    parent = parent[k]
                del parent[p[-1]]
                nodes = [p for p, _ in _walk_nodes(obj) if p]
            elif op == 5:
                v = obj
                for k in p:
                    v = v[k]
                _set(obj, p, [v] * rng.choice([2, 100]))
            elif op == 6:
                deep: object = 1
                for _ in range(rng.choice([100, 5000, 100000])):
                    deep = [deep]
                _set(obj, p, deep)
                break  # nothing walks a 100,000-deep value: this edit is the last
            else:
                events = obj.get("traceEvents") if isinstance(obj, dict) else None
                if isinstance(events, list) and events:
                    e = rng.choice(events)
                    if isinstance(e, dict):
                        e[rng.choice(["ts", "dur", "pid", "tid", "args", "cat", "name"])] = rng.choice(
                            [1e300, -1e300, 9.3e18, -5, "7", None, 2 ** 70, [1, 2], {"grid": "1,2,3"}])
        except (KeyError, IndexError, TypeError):
            continue
    try:
        return json.dumps(obj, allow_nan=True).encode()
    except (ValueError, RecursionError):
        return m_flip(rng, b)


def _sqlite_edit(b: bytes, edit) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "x.sqlite"
        p.write_bytes(b)
        conn = sqlite3.connect(p)
        try:
            edit(conn)
            conn.commit()
        except sqlite3.Error:
            pass
        finally:
            conn.close()
        return p.read_bytes()


def m_sqlite(rng: random.Random, b: bytes) -> bytes:
    """SQLite page damage, header fields, schema text damage, and hostile rows."""
    a = bytearray(b)
    page = int.from_bytes(a[16:18], "big") or 4096
    page = 65536 if page == 1 else page
    pages = max(len(a) // page, 1)
    op = rng.randrange(7)
    if op == 0:  # scribble over whole pages
        for _ in range(rng.choice([1, 3, 20])):
            k = rng.randrange(pages)
            a[k * page:(k + 1) * page] = rng.choice([bytes(page), b"\xff" * page, rng.randbytes(page)])
        return bytes(a)
    if op == 1:  # header fields: page size, counts, freelist, schema cookie, encoding
        off = rng.choice([16, 18, 19, 20, 21, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 92, 96])
        width = 1 if off in (18, 19, 20, 21) else 2 if off == 16 else 4
        a[off:off + width] = rng.choice([bytes(width), b"\xff" * width, rng.randbytes(width)])
        return bytes(a)
    if op == 2:  # schema text (page 1 holds sqlite_master): damage a byte of a CREATE statement
        first = bytes(a[:page])
        hits = [i for i in range(len(first)) if first.startswith(b"CREATE", i)]
        if hits:
            i = rng.choice(hits) + rng.randrange(6, 60)
            if i < len(a):
                a[i] = rng.choice(b"`'\"(),;\n\x00-")
        return bytes(a)
    if op == 3:  # b-tree page header of one page
        k = rng.randrange(1, pages)
        o = k * page
        a[o:o + 12] = rng.randbytes(12)
        return bytes(a)
    tables = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMSET",
              "StringIds", "TARGET_INFO_GPU", "NVTX_EVENTS", "ENUM_NSYS_EVENT_TYPE"]
    t = rng.choice(tables)

    def edit(conn):
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
        if op == 4 and cols:  # hostile values in a column
            c = rng.choice(cols)
            v = rng.choice([None, "text", 2 ** 63 - 1, -(2 ** 63), 1e308, b"\x00\xff", "1,2,3"])
            conn.execute(f'UPDATE "{t}" SET "{c}" = ? WHERE rowid % ? = 0', (v, rng.choice([1, 2, 7])))
        elif op == 5:  # a table or column gone
            if cols and rng.random() < 0.5:
                conn.execute(f'ALTER TABLE "{t}" DROP COLUMN "{rng.choice(cols)}"')
            else:
                conn.execute(f'DROP TABLE "{t}"')
        elif cols:  # huge or sparse rowids, end before start
            conn.execute(f'UPDATE "{t}" SET rowid = rowid + ? WHERE rowid = (SELECT max(rowid) FROM "{t}")',
                         (rng.choice([2 ** 62, 10 ** 12, 5 * 10 ** 6]),))
            if "end" in cols and "start" in cols:
                conn.execute(f'UPDATE "{t}" SET "end" = "start" - ? WHERE rowid % 5 = 0',
                             (rng.choice([1, 2 ** 62]),))
    return _sqlite_edit(b, edit)


def _ncu_offsets(b: bytes) -> list[tuple[int, str]]:
    """(offset, what) of every u32 length field of an .ncu-rep, and of block-header varints."""
    out = []
    i = 4
    if len(b) < 8:
        return out
    n = struct.unpack_from("<I", b, i)[0]
    out.append((i, "u32"))
    i += 4 + n
    while i + 4 <= len(b):
        out.append((i, "u32"))
        n = struct.unpack_from("<I", b, i)[0]
        head = b[i + 4:i + 4 + n]
        try:
            fields = _pb_fields(head)
        except Exception:  # noqa: BLE001 - a damaged seed: stop here
            break
        d = {f: v for f, wt, v in fields if wt == 0}
        j = 0
        for f, wt, v in fields:
            if wt == 0 and f in (1, 2, 5):
                out.append((i + 4 + head.find(_varint(f << 3 | wt) + _varint(v), j), f"varint{f}"))
        start = i + 4 + n
        k = start
        for _ in range(d.get(1, 0) + d.get(2, 0)):
            if k + 4 > len(b):
                break
            out.append((k, "u32"))
            k += 4 + struct.unpack_from("<I", b, k)[0]
        i = start + d.get(5, 0)
    return out


def m_ncu(rng: random.Random, b: bytes) -> bytes:
    """ncu-rep header and length fields: a u32 length or a block-header count set to 0, 1, off by
    one, huge; the magic damaged; a block repeated."""
    a = bytearray(b)
    offs = _ncu_offsets(b)
    op = rng.randrange(5)
    if op == 0 or not offs:
        a[rng.randrange(4)] ^= 0xFF
        return bytes(a)
    for _ in range(rng.choice([1, 1, 3])):
        off, what = rng.choice(offs)
        if what == "u32":
            old = struct.unpack_from("<I", a, off)[0]
            new = rng.choice([0, 1, old - 1, old + 1, 0xFFFFFFFF, 0x7FFFFFFF, old * 1000 & 0xFFFFFFFF])
            struct.pack_into("<I", a, off, max(new, 0) & 0xFFFFFFFF)
        else:
            a[off + 1] = rng.choice([0x00, 0x7F, 0xFF, 0x80])
    if op == 4:
        off, _ = rng.choice(offs)
        a[off:off] = a[off:off + rng.choice([8, 1000, 50000])] * rng.choice([2, 20])
    return bytes(a)


def m_csv(rng: random.Random, b: bytes) -> bytes:
    lines = b.split(b"\n")
    op = rng.randrange(6)
    if op == 0 and len(lines) > 2:
        del lines[rng.randrange(len(lines))]
    elif op == 1:
        k = rng.randrange(len(lines))
        lines[k] = lines[k] + b"," * rng.choice([1, 5000]) + b'"x'
    elif op == 2:
        k = rng.randrange(len(lines))
        cells = lines[k].split(b",")
        if cells:
            cells[rng.randrange(len(cells))] = rng.choice([b'"1e400"', b'"-1"', b'"nan"', b'"inf"', b'"\x00"',
                                                          b'"' + b"9" * 5000 + b'"', b'"', b'""""', b"\r"])
        lines[k] = b",".join(cells)
    elif op == 3:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice([b"\x00" * 200000, b'"' * 1000, b"x" * 300000]))
    elif op == 4 and len(lines) > 1:
        lines = lines[:1] + lines[1:2] * rng.choice([2, 500]) + lines[2:]
    else:
        lines = [ln.replace(b'","', b'";"') if rng.random() < 0.3 else ln for ln in lines]
    return b"\n".join(lines)


_MARK, _STOP, _PROTO = b"(", b".", b"\x80\x04"


def _payload_pickles(marker: str) -> list[bytes]:
    """Pickles that would run code if loaded with an ordinary Unpickler (touch the marker file)."""
    cmd = f"touch {marker}".encode()
    out = [
        b"cos\nsystem\n(S'" + cmd + b"'\ntR.",  # protocol 0 GLOBAL + REDUCE
        b"cposix\nsystem\n(S'" + cmd + b"'\ntR.",
        b"(S'" + cmd + b"'\nios\nsystem\n.",  # INST
        b"\x80\x02cbuiltins\nexec\nq\x00X" + struct.pack("<I", 40) + b"open(%r,'w').close()  ".ljust(40)[:40] % b"" + b"\x85R.",
        _PROTO + b"\x8c\x02os\x94\x8c\x06system\x94\x93\x94\x8c" + bytes([len(cmd)]) + cmd + b"\x94\x85\x94R\x94.",  # STACK_GLOBAL
        b"\x80\x02(cos\nsystem\nS'" + cmd + b"'\no.",  # OBJ
        b"\x80\x02cbuiltins\neval\n(S'__import__(\"os\").system(\"" + cmd + b"\")'\ntR.",
        b"\x80\x02\x82\x01.",  # EXT1 (the copyreg extension registry)
        b"\x80\x02P0\n.",  # PERSID
        b"\x80\x04}\x94(\x8c\x08segments\x94]\x94cos\nsystem\n\x8c" + bytes([len(cmd)]) + cmd + b"\x85R\x94a\x8c\x04x\x94N" + b"u.",
    ]
    return out


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def m_pickle(rng: random.Random, b: bytes, marker: str = MARKER) -> bytes:
    """Opcode bombs (EMPTY_LIST/MARK/DUP floods, deep nesting, huge length claims, huge LONG4,
    bad memo indexes) and hostile payloads (globals, REDUCE, INST, OBJ, EXT, PERSID), alone or
    buried inside the real snapshot."""
    import pickle
    op = rng.randrange(10)
    n = rng.choice([1000, 1 << 16, 1 << 20, 4 << 20])
    if op == 0:
        return _PROTO + rng.choice([b"]", b"}", b"(", b")", b"N", b"\x88"]) * n + _STOP
    if op == 1:
        return _PROTO + b"]" + (b"\x94]" + b"a") * 1 + b"(" * n + b"l" * min(n, 1000) + _STOP  # MARK flood
    if op == 2:  # deep nesting: [[[[...]]]]
        depth = rng.choice([1000, 100000, 1000000])
        return _PROTO + b"]" * depth + b"a" * (depth - 1) + _STOP
    if op == 3:  # DUP / memo-get floods of one list
        return _PROTO + b"]\x94" + rng.choice([b"2", b"h\x00"]) * n + b"e" * 0 + _STOP
    if op == 4:  # length claims far beyond the file
        size = rng.choice([2 ** 36, 2 ** 63 - 1, 2 ** 40, 2 ** 31])
        opcode = rng.choice([b"\x96", b"\x8e", b"\x8d"])  # BYTEARRAY8, BINBYTES8, BINUNICODE8
        return _PROTO + opcode + struct.pack("<Q", size) + b"xx" + _STOP
    if op == 5:
        return _PROTO + rng.choice([b"B", b"T", b"X"]) + struct.pack("<I", 0xFFFFFFF0) + b"ab" + _STOP
    if op == 6:  # LONG4 with a huge or fitting payload
        k = rng.choice([0x7FFFFFFF, 1 << 20])
        return _PROTO + b"\x8b" + struct.pack("<i", k) + (b"\xff" * min(k, 1 << 20)) + _STOP
    if op == 7:  # bad memo index, bad opcode, empty stack
        return _PROTO + rng.choice([b"h\xff", b"j\xff\xff\xff\xff", b"\xfe", b"a", b"t", b"u", b"0"]) + _STOP
    if op == 8:
        return rng.choice(_payload_pickles(marker))
    data = pickle.loads(b)  # the real snapshot with a payload buried inside it
    evil = _Evil(marker)
    where = rng.randrange(3)
    if where == 0 and data.get("segments"):
        data["segments"][0]["blocks"] = [evil]
    elif where == 1:
        data["allocator_settings"] = evil
    else:
        data["device_traces"] = [[evil]]
    return pickle.dumps(data, protocol=rng.choice([0, 2, 4, 5]))


# what a kernel, op, frame or file name may carry (issue 31): C0 controls, an OSC 52 clipboard write,
# a screen clear, C1 CSI, a bidi override, a line separator, the non-characters XML 1.0 forbids, a lone
# surrogate, HTML, Markdown and shell metacharacters
HOSTILE_NAMES = ["\x01\x02\x08\x0b\x0c", "\x1b]52;c;aWQ=\x07", "\x1b[2J", "\x9b31m", "\u202e", "\u2028",
                 "\ufffe\uffff", "\ud800", "<script>alert(1)</script>", "`|$(id)';id;'", "[bold]"]


def _hostile_name(rng: random.Random, name: str, surrogates: bool = True) -> str:
    picks = [h for h in HOSTILE_NAMES if surrogates or h != "\ud800"]
    return name + "".join(rng.sample(picks, rng.choice([1, 2, len(picks)])))


def m_names(rng: random.Random, b: bytes) -> bytes:
    """Names rewritten to carry what HOSTILE_NAMES holds: torch op/kernel names, ncu CSV cells, nsys
    StringIds, snapshot frames; the rest of the input is left real."""
    share = rng.choice([0.05, 0.3, 1.0])
    if b.startswith(b"SQLite format 3"):
        def edit(conn):
            conn.execute("UPDATE StringIds SET value = value || ? WHERE abs(random()) % 100 < ?",
                         (_hostile_name(rng, "", surrogates=False), int(share * 100)))
        return _sqlite_edit(b, edit)
    if b[:2] == b"\x80\x04" or b[:1] == b"\x80":
        import pickle
        try:
            data = pickle.loads(b)
        except Exception:  # noqa: BLE001 - not the real snapshot: flip bytes instead
            return m_flip(rng, b)
        for _, node in _walk_nodes(data):
            if isinstance(node, dict) and isinstance(node.get("name"), str) and rng.random() < share:
                node["name"] = _hostile_name(rng, node["name"])
                if isinstance(node.get("filename"), str):
                    node["filename"] = _hostile_name(rng, node["filename"])
        return pickle.dumps(data, protocol=4)
    try:
        obj = json.loads(b)
    except ValueError:  # an ncu CSV: quoted cells with a letter in them
        lines = b.decode("utf-8", "replace").split("\n")
        for k in range(2, len(lines)):
            if rng.random() < share:
                cells = lines[k].split('","')
                named = [i for i, c in enumerate(cells) if any(ch.isalpha() for ch in c)]
                if named:
                    i = rng.choice(named)
                    cells[i] = _hostile_name(rng, cells[i]).replace('"', "").replace(",", "")
                lines[k] = '","'.join(cells)
        return "\n".join(lines).encode("utf-8", "surrogatepass")
    events = obj.get("traceEvents") if isinstance(obj, dict) else None
    for e in events if isinstance(events, list) else []:
        if isinstance(e, dict) and isinstance(e.get("name"), str) and rng.random() < share:
            e["name"] = _hostile_name(rng, e["name"])
    return json.dumps(obj).encode()


COMMON = [m_truncate, m_flip, m_chunk]
FAMILIES = {
    "torch": COMMON + [m_json, m_json, m_json, m_names],
    "nsys": COMMON + [m_sqlite, m_sqlite, m_sqlite, m_names],
    "ncu-rep": COMMON + [m_ncu, m_ncu, m_ncu],
    "ncu-csv": COMMON + [m_csv, m_csv, m_names],
    "mem-snapshot": COMMON + [m_pickle, m_pickle, m_pickle, m_names],
    "mem-stats": COMMON + [m_json, m_json],
}


def gzip_damage(rng: random.Random, plain: bytes) -> bytes:
    """The gzip form of a (mutated) input, itself damaged sometimes: cut, flipped, a member
    appended, trailing garbage, or a bomb made of the same first bytes."""
    z = gzip.compress(plain, compresslevel=1, mtime=0)
    op = rng.randrange(6)
    if op == 0:
        return z[:rng.randrange(len(z) + 1)]
    if op == 1:
        a = bytearray(z)
        k = rng.randrange(10, max(len(a), 11)) if len(a) > 10 else 0
        if a:
            a[min(k, len(a) - 1)] ^= 0x55
        return bytes(a)
    if op == 2:
        return z + gzip.compress(rng.randbytes(100))
    if op == 3:
        return z + rng.choice([b"\x00" * 10, b"garbage", b"\x1f"])
    if op == 4:  # a bomb: the real first bytes, then a long run of zeros
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as g:
            g.write(plain[:4096])
            block = bytes(16 << 20)
            for _ in range(rng.choice([4, 24])):
                g.write(block)
        return buf.getvalue()
    return z


@dataclass
class Case:
    reader: str
    index: int
    family: str
    suffix: str
    data: bytes
    gz: bool = False
    kill_after: float | None = None  # seconds: SIGTERM the run then (litter check)
    size: int = 0
    way: str = "cli"  # cli | tty | api | ranks (module docstring)
    fmt: str = "json"  # the cli and ranks ways' --format
    companion: bytes = b""  # ranks: the real trace, rank 0 beside the mutated rank 1


def make_cases(reader: str, count: int, seed: int, seed_inputs=None):
    """`count` mutated inputs for one reader, the same for the same seed (made one at a time:
    the runner's own memory stays flat, so a child's RSS is its own work)."""
    seed_inputs = seed_inputs or seeds()
    rng = random.Random(f"{seed}:{reader}")
    for i in range(count):
        suffix, plain = rng.choice(seed_inputs[reader])
        fam = rng.choice(FAMILIES[reader])
        try:
            data = fam(rng, plain)
        except Exception as e:  # noqa: BLE001 - a mutator bug must not stop the run
            print(f"mutator {fam.__name__} failed: {e!r}", file=sys.stderr)
            data = plain
        case = Case(reader, i, fam.__name__[2:], suffix, data)
        if rng.random() < 0.25:
            case.data, case.gz, case.family = gzip_damage(rng, data), True, case.family + "+gz"
        if rng.random() < 0.08:
            case.kill_after = rng.choice([0.05, 0.2, 0.5, 1.0])
        ways = WAYS + (("ranks",) if reader in RANK_READERS else ())
        case.way = ways[i % len(ways)]  # by index: the mutations stay those of the seed
        case.fmt = CLI_FORMATS[i // len(ways) % len(CLI_FORMATS)]
        if case.way == "api":
            case.kill_after = None  # a library leaves signals to its caller: a SIGTERM ends it uncleaned
        if case.way == "ranks":
            case.companion = plain
        yield case


# ---------------------------------------------------------------- running

@dataclass
class Outcome:
    case: Case
    rc: int | None
    seconds: float
    rss: int
    stderr: str
    problems: list[str] = field(default_factory=list)
    killed: bool = False
    cpu: float = 0.0  # user + system seconds: unlike wall time, not inflated by a loaded machine
    checked: list[str] = field(default_factory=list)  # the outputs checked (formats; `tty`: the terminal)


def _api_child(paths: list[Path], work: Path) -> int:
    """The library in a process that does other work: a thread maps 256 MiB of address space at a time
    while `diagnoser.diagnose` runs; then every format is rendered. Returns the exit code the command
    would give (0, or 1 with `diagnose: error: ...` on stderr), 98 when the process was disturbed."""
    import threading
    import mmap

    import diagnoser
    failures, done = [], threading.Event()

    def other_work():
        while not done.is_set():
            try:
                mmap.mmap(-1, 256 << 20).close()
            except (OSError, MemoryError, ValueError) as e:
                failures.append(repr(e))
            time.sleep(0.001)

    limit = resource.getrlimit(resource.RLIMIT_AS)
    thread = threading.Thread(target=other_work, daemon=True)
    thread.start()
    try:
        report = diagnoser.diagnose([str(p) for p in paths])
        for fmt in ("md", "terminal", "html", "json", "junit"):
            (work / f"report.{EXT[fmt]}").write_text(report.render(fmt), encoding="utf-8")
        code = 0
    except diagnoser.DiagnoserError as e:
        print(f"diagnose: error: {e}", file=sys.stderr)
        code = 1
    finally:
        done.set()
        thread.join()
    if failures or resource.getrlimit(resource.RLIMIT_AS) != limit:
        print(f"API: the caller's process was disturbed: {len(failures)} allocations failed "
              f"({failures[:1]}), RLIMIT_AS {limit} -> {resource.getrlimit(resource.RLIMIT_AS)}", file=sys.stderr)
        return 98
    return code


def _child(case: Case, paths: list[Path], work: Path) -> None:
    """Runs in the forked child: the case, the way it says. Never returns."""
    os.environ["TMPDIR"] = str(work / "tmp")
    tempfile.tempdir = None
    os.chdir(work)
    if case.way != "tty":  # on the pseudo-terminal, stdout and stderr stay the terminal
        fd = os.open(work / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
    sys.stdout = open(1, "w", closefd=False)  # under pytest, sys.std* are capture objects
    sys.stderr = open(2, "w", closefd=False)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 0
    try:
        if case.way == "api":
            code = _api_child(paths, work)
        else:
            from diagnoser.cli import main
            if case.way == "tty":
                main([*map(str, paths), "--progress"])
            else:
                main([*map(str, paths), "--format", case.fmt, "-o", str(work / f"report.{EXT[case.fmt]}")])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - what the user would see
        import traceback
        traceback.print_exc()
        code = 99
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _start(case: Case, root: Path):
    work = root / f"{case.reader}-{case.index}"
    shutil.rmtree(work, ignore_errors=True)  # a kept folder from an earlier run
    (work / "tmp").mkdir(parents=True)
    name = "case.rank1" if case.way == "ranks" else "case"
    if case.index % 4 == 1:  # a file name from outside carries controls, an OSC 52 write, bidi, HTML
        name = name.replace("case", "case" + FILE_NAME_TAIL)
    path = work / (f"{name}{case.suffix}" + (".gz" if case.gz else ""))
    path.write_bytes(case.data)
    paths = [path]
    if case.way == "ranks":
        paths.insert(0, work / f"case.rank0{case.suffix}")
        paths[0].write_bytes(case.companion)
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    case.size, case.data, case.companion = len(case.data), b"", b""  # on disk now; the runner keeps no copy
    tty = None
    if case.way == "tty":
        pid, tty = pty.fork()
    else:
        pid = os.fork()
    if pid == 0:
        _child(case, paths, work)
    if tty is not None:
        os.set_blocking(tty, False)
    return {"pid": pid, "case": case, "work": work, "path": path, "digests": digests, "tty": tty, "screen": bytearray(),
            "t0": time.monotonic(), "killed": False, "hung": False}


def _drain(run: dict, final: bool = False) -> None:
    """Read what the tty child wrote to its terminal (a full terminal would block it)."""
    fd = run["tty"]
    if fd is None:
        return
    while True:
        if not final and not select.select([fd], [], [], 0)[0]:
            return
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            if final:
                time.sleep(0.01)
                final = False  # one more look, then whatever is left is gone with the terminal
                continue
            return
        except OSError:  # EIO: the terminal's other side closed
            chunk = b""
        if not chunk:
            os.close(fd)
            run["tty"] = None
            (run["work"] / "screen").write_bytes(bytes(run["screen"]))
            return
        run["screen"] += chunk


def check_output(fmt: str, text: str) -> list[str]:
    """What is wrong with one rendered report (module docstring)."""
    problems = []
    shown = SGR.sub("", text).replace("\r", "") if fmt in ("terminal", "tty") else text
    if RAW.search(shown):
        problems.append(f"raw control in {fmt}")
    if fmt == "json":
        try:
            json.loads(text)
        except ValueError:
            problems.append("bad report")
    elif fmt == "junit":
        try:
            ET.fromstring(text.encode("utf-8", "surrogatepass"))
        except ET.ParseError:
            problems.append("junit not XML")
    return problems


def _shown(name: str) -> str:
    """A file name as an error line shows it (errors.InputError, then text_safety.visible_line)."""
    from diagnoser.errors import InputError
    from diagnoser.text_safety import visible_line
    return visible_line(InputError(name, "").path)


def _expected_reports(case: Case) -> list[str]:
    if case.way == "api":
        return ["md", "terminal", "html", "json", "junit"]
    return [case.fmt] if case.way in ("cli", "ranks") else []


def _finish(run: dict, status: int, usage) -> Outcome:
    case, work, path = run["case"], run["work"], run["path"]
    _drain(run, final=True)
    seconds = time.monotonic() - run["t0"]
    rss = usage.ru_maxrss * 1024
    rc = os.waitstatus_to_exitcode(status)
    if case.way == "tty":
        err = bytes(run["screen"]).decode("utf-8", "replace")
    else:
        err = (work / "stderr").read_text(errors="replace") if (work / "stderr").exists() else ""
    o = Outcome(case, rc, seconds, rss, err, killed=run["killed"], cpu=usage.ru_utime + usage.ru_stime)
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip()]
    if "Traceback (most recent call last)" in err or rc == 99:
        o.problems.append("traceback")
    if run["hung"]:
        o.problems.append("hang")
    elif run["killed"]:
        if any((work / "tmp").iterdir()):
            o.problems.append("litter after kill")
    else:
        if case.way == "tty":  # the terminal report and the progress lines together, as the user sees them
            o.problems += check_output("tty", err)
            o.checked.append("tty")
            errors = [ln for ln in lines if "diagnose: error: " in ln]
        if rc in (0, 3):
            if lines and case.way != "tty":
                o.problems.append("noise on success")
            if case.way == "tty" and errors:
                o.problems.append("error on success")
            for fmt in _expected_reports(case):
                report = work / f"report.{EXT[fmt]}"
                try:
                    o.problems += check_output(fmt, report.read_text(encoding="utf-8"))
                    o.checked.append(fmt)
                except (OSError, ValueError):
                    o.problems.append("bad report")
        elif rc == 1:
            if case.way == "tty":
                if len(errors) != 1 or lines[-1] != errors[0]:
                    o.problems.append("multi-line error")
                elif not any(_shown(p.name) in errors[0] for p in run["digests"]):
                    o.problems.append("error names no file")
            elif len(lines) != 1:
                o.problems.append("multi-line error")
            elif not lines[0].startswith("diagnose: error: ") or not any(_shown(p.name) in lines[0] for p in run["digests"]):
                o.problems.append("error names no file")
            o.problems += [p for p in check_output("stderr", err) if case.way != "tty"]
            if any(work.glob("report.*")) and case.way != "api":
                o.problems.append("half-written -o")
        elif rc == 98:
            o.problems.append("API disturbed the caller")
        else:
            o.problems.append(f"exit {rc}")
        if any((work / "tmp").iterdir()):
            o.problems.append("litter")
    if rss > BIG_RSS and case.size < SMALL_INPUT:
        o.problems.append("over 1 GB")
    if (work / MARKER).exists() or Path(MARKER).exists():
        o.problems.append("PAYLOAD RAN")
    if any(hashlib.sha256(p.read_bytes()).hexdigest() != d for p, d in run["digests"].items()):
        o.problems.append("input modified")
    return o


def _import_everything() -> None:
    """Import every diagnoser module (and the rule pack) before forking: children start warm."""
    import importlib
    import pkgutil

    import diagnoser
    for m in pkgutil.walk_packages(diagnoser.__path__, "diagnoser."):
        try:
            importlib.import_module(m.name)
        except Exception:  # noqa: BLE001 - an optional extra (dask) missing
            pass


def run_cases(cases, jobs: int = 2, hang_s: float = HANG_S, root: Path | None = None,
              on_result=None) -> list[Outcome]:
    """Run every case in a forked child (at most `jobs` at once); the parent imports the CLI once."""
    _import_everything()
    own_root = root is None
    root = Path(tempfile.mkdtemp(prefix="diagnoser-fuzz-")) if own_root else root
    pending = iter(cases)
    nxt = next(pending, None)
    running: dict[int, dict] = {}
    results: list[Outcome] = []
    try:
        while nxt is not None or running:
            while nxt is not None and len(running) < jobs:
                run = _start(nxt, root)
                running[run["pid"]] = run
                nxt = next(pending, None)
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(0.01)
                now = time.monotonic()
                for run in running.values():
                    _drain(run)
                    age = now - run["t0"]
                    ka = run["case"].kill_after
                    if ka is not None and not run["killed"] and age > ka:
                        run["killed"] = True
                        os.kill(run["pid"], signal.SIGTERM)
                    elif age > hang_s and not run["hung"]:
                        run["hung"] = True
                        os.kill(run["pid"], signal.SIGKILL)
                continue
            run = running.pop(pid)
            outcome = _finish(run, status, usage)
            results.append(outcome)
            if on_result:
                on_result(outcome)
            if not outcome.problems:
                shutil.rmtree(run["work"], ignore_errors=True)
    finally:
        for pid, run in running.items():
            os.kill(pid, signal.SIGKILL)
            if run["tty"] is not None:
                os.close(run["tty"])
        if own_root and all(not o.problems for o in results):
            shutil.rmtree(root, ignore_errors=True)
    return results


COLUMNS = ("cases", "reported", "refused", "killed", "traceback", "multi-line error", "hang", "over 1 GB",
           "litter after kill", "other")


def table(results: list[Outcome]) -> str:
    rows = []
    for reader in READERS + ("all",):
        rs = [r for r in results if reader == "all" or r.case.reader == reader]
        if not rs:
            continue
        probs = lambda name: sum(name in r.problems for r in rs)  # noqa: E731
        other = sum(any(p not in ("traceback", "multi-line error", "hang", "over 1 GB", "litter after kill")
                        for p in r.problems) for r in rs)
        rows.append([reader, len(rs), sum(r.rc in (0, 3) and not r.problems and not r.killed for r in rs),
                     sum(r.rc == 1 and not r.problems and not r.killed for r in rs),
                     sum(r.killed for r in rs), probs("traceback"),
                     probs("multi-line error"), probs("hang"), probs("over 1 GB"),
                     probs("litter after kill"), other])
    head = ["reader", *COLUMNS]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = lambda r: "| " + " | ".join(str(x).rjust(w) for x, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, rows)])


OUTPUTS = ("md", "terminal", "html", "json", "junit", "tty")


def ways_table(results: list[Outcome]) -> str:
    """Per way of running: the cases, their outcomes, and the outputs checked per format (issue 31)."""
    rows = []
    for way in WAYS + ("ranks", "all"):
        rs = [r for r in results if way == "all" or r.case.way == way]
        if not rs:
            continue
        rows.append([way, len(rs), sum(r.rc in (0, 3) and not r.killed for r in rs), sum(r.rc == 1 and not r.killed for r in rs),
                     sum(r.killed for r in rs), *(sum(f in r.checked for r in rs) for f in OUTPUTS),
                     sum(any(p.startswith("raw control") for p in r.problems) for r in rs),
                     sum("junit not XML" in r.problems for r in rs), sum("input modified" in r.problems for r in rs),
                     sum("API disturbed the caller" in r.problems for r in rs), sum(bool(r.problems) for r in rs)])
    head = ["way", "cases", "reported", "refused", "killed", *(f"{f} checked" for f in OUTPUTS), "raw control",
            "junit not XML", "input modified", "API disturbed", "any problem"]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = lambda r: "| " + " | ".join(str(x).rjust(w) for x, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, rows)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000, help="cases per reader (default 1000)")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--readers", default=",".join(READERS))
    ap.add_argument("--keep", help="folder for the cases (failing ones stay there)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    base = seeds()
    cases = (c for r in args.readers.split(",") for c in make_cases(r, args.cases, args.seed, base))
    root = Path(args.keep) if args.keep else None
    if root:
        root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    slow = []

    def show(o: Outcome):
        if o.problems:
            first = o.stderr.strip().splitlines()[-1:] or [""]
            print(f"FAIL {o.case.reader}#{o.case.index} {o.case.family}: {', '.join(o.problems)} "
                  f"(rc {o.rc}, {o.seconds:.1f} s, {o.rss >> 20} MiB) {first[0][:200]}", flush=True)
        if o.cpu > 2 and "hang" not in o.problems:
            slow.append(o)

    results = run_cases(cases, jobs=args.jobs, root=root, on_result=show)
    print(f"\n{len(results)} cases in {time.monotonic() - t0:.0f} s (seed {args.seed}, {args.jobs} jobs); "
          f"max RSS {max(r.rss for r in results) >> 20} MiB; slowest {max(r.seconds for r in results):.1f} s "
          f"wall, {max(r.cpu for r in results):.1f} s CPU; over 2 s CPU: {sum(r.cpu > 2 for r in results)}; "
          f"payloads run: {sum('PAYLOAD RAN' in r.problems for r in results)}; "
          f"inputs modified: {sum('input modified' in r.problems for r in results)}\n")
    for o in sorted(slow, key=lambda o: -o.cpu)[:10]:
        print(f"slow: {o.case.reader}#{o.case.index} {o.case.family} {o.case.size:,} bytes: rc {o.rc}, "
              f"{o.seconds:.1f} s wall, {o.cpu:.1f} s CPU, {o.rss >> 20} MiB {o.stderr.strip()[-160:]}")
    print()
    print(table(results))
    print()
    print(ways_table(results))
    return 1 if any(r.problems for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
