"""The native Kineto batch scanner (native/kineto_scan.c) against msgspec, the reader's other path.

Whatever a batch holds, the reader must give the same Timeline, or the same one-line error, whichever path
read it: the scanner reads a batch only where it is sure of every field the tables read and leaves any other
batch to msgspec. Checked on every real fixture, on hand-made edge cases (synthetic, each named for the
shape it tries) and on random mutations of a real trace.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnoser.errors import InputError
from diagnoser.ingest import kineto_scan, torch_tables, torch_trace
from diagnoser.ingest.torch_tables import TraceColumns
from diagnoser.ingest.torch_trace import read_torch_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SHARED = Path(__file__).resolve().parents[2] / "shared"
TABLES = ("gpu", "host", "ranges", "memory", "op_shapes")

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("DIAGNOSER_NO_NATIVE")), reason="DIAGNOSER_NO_NATIVE is set: the scanner is off")


def read_both(path) -> tuple[object, object]:
    """The Timeline (or the InputError's text) read natively and with msgspec alone."""
    out = []
    for native in (True, False):
        try:
            out.append(read_torch_trace(path, native=native))
        except InputError as e:
            out.append(f"InputError: {e}")
    return out[0], out[1]


def assert_same(native, decoded) -> None:
    if isinstance(native, str) or isinstance(decoded, str):
        assert native == decoded
        return
    for table in TABLES:
        a, b = getattr(native, table), getattr(decoded, table)
        assert (a is None) == (b is None), table
        if a is not None:
            pd.testing.assert_frame_equal(a, b, obj=table)
    for field in ("devices", "rank", "world_size", "process_groups", "clock_epoch_ns"):
        assert getattr(native, field) == getattr(decoded, field), field


class Counting:
    """Counts the batches the scanner read and those it left to msgspec."""

    def __init__(self, monkeypatch):
        self.scanned = self.left = 0
        real = TraceColumns.add_batch

        def add_batch(columns, batch):
            taken = real(columns, batch)
            if columns.scanner is not None:
                if taken is None:
                    self.left += 1
                else:
                    self.scanned += 1
            return taken
        monkeypatch.setattr(TraceColumns, "add_batch", add_batch)


def test_the_scanner_is_built_where_the_package_is_installed():
    # CI installs the package (a C compiler is there, as durable_rules needs one): the scanner must have been
    # built, else every trace silently takes the slow path
    assert kineto_scan.available(), "_diagnoser_native is not importable: was the package installed (pip install .)?"


def fixture_traces() -> list[Path]:
    return sorted(p for p in (FIXTURES / "torch").glob("*.json*") if p.exists())


@pytest.mark.parametrize("path", fixture_traces(), ids=lambda p: p.name.split(".")[0])
def test_every_fixture_reads_the_same_natively_and_with_msgspec(path, monkeypatch):
    count = Counting(monkeypatch)
    native, decoded = read_both(path)
    assert_same(native, decoded)
    if not isinstance(native, str):
        assert count.scanned >= 1 and count.left == 0, (count.scanned, count.left)  # today's Kineto: all native


def shared_traces() -> list[Path]:
    roots = [SHARED / "corpus" / "torch", SHARED / "external"]
    return sorted(p for root in roots if root.is_dir() for p in root.rglob("*.json*")
                  if "memory_stats" not in p.name)


@pytest.mark.skipif(not (SHARED / "external").is_dir(), reason="needs ../shared (corpus and external traces)")
@pytest.mark.parametrize("path", shared_traces(), ids=lambda p: str(p.relative_to(SHARED)))
def test_every_shared_trace_reads_the_same_natively_and_with_msgspec(path):
    # the external traces span Kineto vintages from 2020 (text tids: left to msgspec) to 2025, and HTA's,
    # TraceLens's and the corpus's real runs
    assert_same(*read_both(path))


# ---- hand-made edge cases (synthetic): each shape a trace could hold, read both ways ----

KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25,
          "args": {"device": 0, "stream": 7, "correlation": 5, "grid": [2, 3, 4], "block": [128, 1, 1]}}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 9.0, "dur": 4.0,
      "args": {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"], "Input Strides": [[8, 1], [16, 1]],
               "Concrete Inputs": ["", ""]}}
RUNTIME = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 9.5, "dur": 1,
           "args": {"correlation": 5}}
MEMORY = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 9.7,
          "args": {"Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2048, "Device Id": 0, "Device Type": 1}}
STEP = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 2, "ts": 8, "dur": 20}
PLAIN = [STEP, OP, RUNTIME, KERNEL, MEMORY]


def event(base: dict, **changes) -> str:
    e = json.loads(json.dumps(base))
    for key, value in changes.items():
        if key.startswith("args_"):
            e.setdefault("args", {})[key[5:].replace("_", " ")] = value
        elif value is ...:
            e.pop(key, None)
        else:
            e[key] = value
    return json.dumps(e)


ODD_EVENTS = {  # name -> the text of one event, put among plain ones
    "plain": event(KERNEL),
    "kernel correlation beyond double (msgspec: out of range)": event(KERNEL, args_correlation=1e308).replace("1e+308", "1e999"),
    "op correlation beyond double, unread but decoded": event(OP, args_correlation=1).replace('"correlation": 1', '"correlation": 1e999'),
    "op device an object holding 1e400": event(OP).replace('"args": {', '"args": {"device": {"a": 1e400}, '),
    "unknown key holding 1e999 (skipped)": event(OP).replace('"args": {', '"x": 1e999, "args": {'),
    "huge integer in an unknown key": event(OP).replace('"args": {', '"x": 123456789012345678901234567890, "args": {'),
    "huge integer correlation": event(RUNTIME).replace('"correlation": 5', '"correlation": 123456789012345678901234567890'),
    "INT64_MIN correlation": event(RUNTIME, args_correlation=-(1 << 63)),
    "INT64_MAX correlation": event(RUNTIME, args_correlation=(1 << 63) - 1),
    "float correlation": event(RUNTIME, args_correlation=5.0),
    "text correlation": event(RUNTIME, args_correlation="5"),
    "null correlation": event(RUNTIME, args_correlation=None),
    "duplicate name": event(KERNEL).replace('"name": "k"', '"name": "a", "name": "k"'),
    "duplicate Input Dims": event(OP).replace('"Input Dims": ', '"Input Dims": [[1]], "Input Dims": '),
    "escaped name": event(KERNEL, name="void k<\"x\">\n\t\\ \u00e9"),
    "unicode escape in name": event(KERNEL).replace('"name": "k"', '"name": "\\u0041\\u00e9\\u4e2d"'),
    "escape spelling [memory]": event(MEMORY).replace('"name": "[memory]"', '"name": "\\u005bmemory]"'),
    "lone surrogate escape in name": event(KERNEL).replace('"name": "k"', '"name": "\\ud800"'),
    "surrogate pair escape in name": event(KERNEL).replace('"name": "k"', '"name": "\\ud83d\\ude00"'),
    "escaped key": event(KERNEL).replace('"cat"', '"c\\u0061t"'),
    "escaped category": event(KERNEL).replace('"cat": "kernel"', '"cat": "ker\\u006eel"'),
    "utf-8 name": event(KERNEL, name="注意力 kernel ü"),
    "text tid on an op": event(OP, tid="1890023232"),
    "stream text tid on a kernel with args.stream": event(KERNEL, tid="stream 7"),
    "stream text tid on a kernel without args.stream": event(KERNEL, tid="stream 7").replace('"stream": 7, ', ""),
    "float pid on a kernel without args.device": event(KERNEL, pid=1.5).replace('"device": 0, ', ""),
    "null pid on a kernel without args.device": event(KERNEL, pid=None).replace('"device": 0, ', ""),
    "bool pid (msgspec refuses)": event(KERNEL, pid=True),
    "list tid (msgspec refuses)": event(OP, tid=[1]),
    "huge pid on an op (unread)": event(OP).replace('"pid": 1', '"pid": 123456789012345678901234567890'),
    "pid beyond double (msgspec refuses)": event(OP).replace('"pid": 1', '"pid": 1e999'),
    "empty grid": event(KERNEL, args_grid=[]),
    "zero in grid": event(KERNEL, args_grid=[0, 1, 2]),
    "negative grid": event(KERNEL, args_grid=[-1, 2, 3]),
    "two-entry grid": event(KERNEL, args_grid=[4, 5]),
    "grid product past 2**62": event(KERNEL, args_grid=[1 << 40, 1 << 40, 1]),
    "grid entry past 2**20": event(KERNEL, args_grid=[1 << 21, 1, 1]),
    "float grid": event(KERNEL, args_grid=[1.5, 1, 1]),
    "bool in grid": event(KERNEL, args_grid=[True, 1, 1]),
    "text grid (Triton)": event(KERNEL, args_grid="(1, 2, 3)"),
    "number grid": event(KERNEL, args_grid=5),
    "null grid": event(KERNEL, args_grid=None),
    "grid beyond double inside": event(KERNEL).replace('"grid": [2, 3, 4]', '"grid": [2, 1e999, 4]'),
    "no ts (error)": event(KERNEL, ts=...),
    "null ts (msgspec refuses)": event(KERNEL, ts=None),
    "text ts (msgspec refuses)": event(KERNEL, ts="10"),
    "ts beyond double": event(KERNEL).replace('"ts": 10.5', '"ts": 1e999'),
    "huge integer ts": event(KERNEL).replace('"ts": 10.5', '"ts": 123456789012345678901234567890'),
    "ts past 146 years": event(KERNEL, ts=1e20),
    "ts with many digits": event(KERNEL).replace('"ts": 10.5', '"ts": 5134284448396.8351234567890123'),
    "ts with exponent": event(KERNEL).replace('"ts": 10.5', '"ts": 1.0505E+1'),
    "ts underflowing": event(KERNEL).replace('"ts": 10.5', '"ts": 1e-400'),
    "ts negative zero": event(KERNEL).replace('"ts": 10.5', '"ts": -0'),
    "negative dur": event(KERNEL, dur=-1),
    "no dur": event(KERNEL, dur=...),
    "null category": event(KERNEL, cat=None),
    "number category (msgspec refuses)": event(KERNEL, cat=5),
    "no category": event(KERNEL, cat=...),
    "null name (msgspec refuses)": event(KERNEL, name=None),
    "no name": event(KERNEL, name=...),
    "null args": event(RUNTIME, args=None),
    "list args (msgspec refuses)": event(RUNTIME, args=[]),
    "memory of another device type": event(MEMORY, args_Device_Type=0),
    "memory device type as text": event(MEMORY, args_Device_Type="1"),
    "memory without device type": event(MEMORY).replace('"Device Type": 1', '"x": 1'),
    "memory with null bytes": event(MEMORY, args_Bytes=None),
    "memory with float bytes": event(MEMORY, args_Bytes=1.5),
    "memory without args": event(MEMORY, args=...),
    "op with null Input Dims": event(OP, args_Input_Dims=None),
    "op without strides": event(OP).replace(', "Input Strides": [[8, 1], [16, 1]]', ""),
    "op with whitespace inside its arguments": event(OP).replace("[[4, 8], [8, 16]]", "[ [4,8] ,\n\t[8, 16] ]"),
    "nesting 60 deep in an unknown key": event(OP).replace('"args": {', '"x": ' + "[" * 60 + "]" * 60 + ', "args": {'),
    "nesting 2000 deep (msgspec refuses)": event(OP).replace('"args": {', '"x": ' + "[" * 2000 + "]" * 2000 + ', "args": {'),
    "not an object (msgspec refuses)": "5",
    "empty object": "{}",
    "trailing comma in an object": event(KERNEL).replace('"pid": 0,', '"pid": 0,,'),
    "trailing comma in args": event(KERNEL).replace('"block": [128, 1, 1]}', '"block": [128, 1, 1],}'),
    "leading zero": event(KERNEL).replace('"pid": 0', '"pid": 01'),
    "bare dot number": event(KERNEL).replace('"ts": 10.5', '"ts": 10.'),
    "plus sign": event(KERNEL).replace('"ts": 10.5', '"ts": +10.5'),
    "control byte in a string": event(KERNEL).replace('"name": "k"', '"name": "k\x01"'),
    "bad escape": event(KERNEL).replace('"name": "k"', '"name": "k\\x"'),
    "invalid UTF-8 in a name": None,  # bytes: below
    "invalid UTF-8 in an unknown key's value": None,
    "tabs and carriage returns between tokens": event(KERNEL).replace(", ", ",\r\n\t"),
}


def trace_text(middle: bytes) -> bytes:
    plain = [json.dumps(e).encode() for e in PLAIN]
    return b'{"schemaVersion": 1, "traceEvents": [' + b", ".join(plain[:3] + [middle] + plain[3:]) + b"]}"


def odd_bytes(name: str) -> bytes:
    if name == "invalid UTF-8 in a name":
        return event(KERNEL).encode().replace(b'"name": "k"', b'"name": "k\xff"')
    if name == "invalid UTF-8 in an unknown key's value":
        return event(OP).encode().replace(b'"args": {', b'"x": "\xc0\xaf", "args": {')
    return ODD_EVENTS[name].encode()


@pytest.mark.parametrize("name", list(ODD_EVENTS))
def test_each_odd_shape_reads_the_same_natively_and_with_msgspec(name, tmp_path):
    path = tmp_path / "odd.pt.trace.json"
    path.write_bytes(trace_text(odd_bytes(name)))
    assert_same(*read_both(path))


def scanned(batch: bytes) -> int | None:
    return TraceColumns().add_batch(memoryview(batch))


def test_plain_batches_are_read_natively_and_odd_ones_left_to_msgspec():
    plain = b"[" + b", ".join(json.dumps(e).encode() for e in PLAIN) + b"]"
    assert scanned(plain) == len(PLAIN)
    assert scanned(b"[]") == 0
    assert scanned(b"[" + odd_bytes("utf-8 name") + b"]") == 1  # non-ASCII names are read natively
    assert scanned(b"[" + odd_bytes("escaped name") + b"]") == 1
    for name in ("text tid on an op", "float correlation", "bool pid (msgspec refuses)", "escaped key",
                 "invalid UTF-8 in a name", "trailing comma in args", "op correlation beyond double, unread but decoded"):
        assert scanned(b"[" + odd_bytes(name) + b"]") is None, name
    assert scanned(plain[:-1]) is None  # a batch cut inside an event


def test_a_batch_left_to_msgspec_leaves_no_names_behind():
    # the scanner codes names as it goes; a batch it gives up on half-way must not keep the codes it made
    columns = TraceColumns()
    first = b"[" + json.dumps(dict(KERNEL, name="kept")).encode() + b"]"
    assert columns.add_batch(memoryview(first)) == 1
    odd = b"[" + json.dumps(dict(KERNEL, name="dropped")).encode() + b", " + odd_bytes("float correlation") + b"]"
    assert columns.add_batch(memoryview(odd)) is None
    assert columns.scanner.name_count() == 1
    again = b"[" + json.dumps(dict(KERNEL, name="next")).encode() + b"]"
    assert columns.add_batch(memoryview(again)) == 1
    assert columns.scanner.name_count() == 2
    gpu, _, _ = columns.tables("synthetic")
    assert sorted(gpu["name"].astype(str)) == ["kept", "next"]


# ---- random mutations of a real trace ----

SOURCE = FIXTURES / "torch" / "cal_fp32_to_tf32_before.pt.trace.json.gz"  # real H200 run, ~140 events
MUTATIONS = [b"", b"0", b"-", b".", b"e", b"1e999", b"\\", b"\\u", b'"', b",", b":", b"{", b"}", b"[", b"]", b"null",
             b"true", b" ", b"\xff", b"\xc3\xa9", b'"x"', b"123456789012345678901234567890", b"\x00"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 8), st.sampled_from(MUTATIONS)), min_size=1, max_size=3),
       chunk=st.sampled_from([97, 4096, 1 << 21]))
def test_mutated_real_traces_read_the_same_natively_and_with_msgspec(edits, chunk, tmp_path, monkeypatch):
    text = bytearray(gzip.decompress(SOURCE.read_bytes()))
    for at, cut, insert in edits:
        i = int(at * (len(text) - 1))
        text[i:i + cut] = insert
    path = tmp_path / "mutated.pt.trace.json"
    path.write_bytes(bytes(text))
    monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", chunk)  # batch edges everywhere
    assert_same(*read_both(path))


def test_both_paths_meet_in_one_trace(tmp_path, monkeypatch):
    # small batches, every third one odd: the scanner's codes and msgspec's interleave in one trace's tables
    events = []
    for i in range(300):
        e = dict(PLAIN[i % len(PLAIN)], ts=10.0 + i)
        if i % 15 == 7:
            e = dict(e, tid="7")  # text tid: that batch goes to msgspec
        events.append(e)
    path = tmp_path / "mixed.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", 1024)
    count = Counting(monkeypatch)
    native, decoded = read_both(path)
    assert_same(native, decoded)
    assert count.scanned and count.left


def test_layout_version_matches_the_extension():
    import _diagnoser_native
    from diagnoser import native
    assert _diagnoser_native.LAYOUT_VERSION == native.LAYOUT_VERSION
    assert _diagnoser_native.N_INTS == kineto_scan.SCANNED_INTS
    assert _diagnoser_native.MEMORY == kineto_scan.SCANNED_MEMORY
    assert torch_tables.SCANNED_NONE == -(1 << 63)
