"""Hostile inputs of issue 22, each refused (or reported) after bounded work. Synthetic by design.

"Bounded" is checked without timing where possible: the bytes this process read (/proc/self/io)
must stay far below the size of the hostile file; where the cost is CPU on data already read (many
gzip members), the member count bound decides the words of the error.
"""
from __future__ import annotations

import gzip
import json
import sqlite3
import warnings

import pytest

from diagnoser.ingest import torch_trace
from diagnoser.ingest.input_files import GZIP_MAX_SMALL_MEMBERS, open_input
from diagnoser.families import read_input
from diagnoser.pipeline import diagnose, load_groups
from diagnoser.report.render import render_report

from test_hostile import refuse


def test_gzip_of_many_empty_members_is_refused_by_their_count(tmp_path):
    path = tmp_path / "empty_members.json.gz"
    path.write_bytes(gzip.compress(b"", mtime=0) * (GZIP_MAX_SMALL_MEMBERS * 4))  # synthetic, 320 KB
    refuse(path, "gzip members")


def test_gzip_members_holding_a_profile_are_read_whole(tmp_path, fixtures_dir):
    """bgzip-like: a real trace cut into 64 KiB members (plus an empty EOF member) reads as the original."""
    plain = gzip.decompress((fixtures_dir / "torch" / "host_sync.pt.trace.json.gz").read_bytes())
    path = tmp_path / "members.pt.trace.json.gz"
    path.write_bytes(b"".join(gzip.compress(plain[i:i + (64 << 10)], mtime=0) for i in range(0, len(plain), 64 << 10))
                     + gzip.compress(b"", mtime=0))
    with open_input(path) as f:
        assert f.read() == plain


def test_tiny_gzip_members_cost_their_own_size(tmp_path):
    """Members of a few bytes each (synthetic): the inflater never copies the rest of its chunk per member,
    and a file of such members still reads whole when each holds enough."""
    piece = b"x" * 2048
    path = tmp_path / "small.json.gz"
    path.write_bytes(b"".join(gzip.compress(piece, mtime=0) for _ in range(3000)))
    with open_input(path) as f:
        assert f.read() == piece * 3000


def _inflaters():
    """The inflaters input_files may use: ISA-L's where installed (the default), and zlib (its fallback)."""
    import zlib

    from diagnoser.ingest import input_files
    yield pytest.param(zlib, id="zlib")
    if input_files._inflate is not zlib:
        yield pytest.param(input_files._inflate, id="isal")


@pytest.mark.parametrize("inflate", list(_inflaters()))
def test_either_inflater_reads_the_same_bytes_and_refuses_the_same_damage(tmp_path, fixtures_dir, monkeypatch, inflate):
    """A real trace as two members with zero padding between them reads whole; cut short, or with a byte of its
    deflate data changed (synthetic damage), it is one InputError naming the gzip problem, whichever inflater."""
    from diagnoser.errors import InputError
    from diagnoser.ingest import input_files
    monkeypatch.setattr(input_files, "_inflate", inflate)
    plain = gzip.decompress((fixtures_dir / "torch" / "host_sync.pt.trace.json.gz").read_bytes())
    half = len(plain) // 2
    whole = gzip.compress(plain[:half], mtime=0) + b"\0" * 512 + gzip.compress(plain[half:], mtime=0)
    path = tmp_path / "two_members.pt.trace.json.gz"
    path.write_bytes(whole)
    with open_input(path) as f:
        assert f.read() == plain
    for name, data, words in (("cut", whole[:len(whole) // 3], "truncated gzip data"),
                              ("flipped", whole[:5000] + bytes([whole[5000] ^ 0xFF]) + whole[5001:], "gzip data")):
        damaged = tmp_path / f"{name}.pt.trace.json.gz"
        damaged.write_bytes(data)
        with pytest.raises(InputError, match=words), open_input(damaged) as f:
            while f.read(1 << 20):
                pass


def test_whitespace_after_the_header_is_not_an_event(tmp_path, monkeypatch):
    """`{"traceEvents": [` then nothing but spaces (synthetic): dropped as read, never held as one
    ever-growing event; the file ends inside the array, so it is truncated."""
    monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", 1 << 16)
    monkeypatch.setattr(torch_trace, "MAX_EVENT_BYTES", 1 << 20)
    path = tmp_path / "spaces.pt.trace.json"
    path.write_bytes(b'{"schemaVersion": 1, "traceEvents": [' + b" " * (4 << 20))
    refuse(path, "truncated")


def test_whitespace_between_events_keeps_every_event(tmp_path, fixtures_dir, monkeypatch):
    """A real trace re-indented with runs of whitespace wider than a read chunk reads as the original."""
    monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", 1 << 12)
    trace = json.loads(gzip.decompress((fixtures_dir / "torch" / "host_sync.pt.trace.json.gz").read_bytes()))
    trace["traceEvents"] = trace["traceEvents"][:400]
    path = tmp_path / "spaced.pt.trace.json"
    events = (" " * 10000 + ",\n" + " " * 9000).join(json.dumps(e) for e in trace["traceEvents"])
    head = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"})[:-1]
    path.write_text(head + ', "traceEvents": [' + " " * 12000 + events + " " * 5000 + "]}")
    plain = tmp_path / "plain.pt.trace.json"
    plain.write_text(json.dumps(trace))
    a, b = read_input(str(path), "torch-trace"), read_input(str(plain), "torch-trace")
    for name in ("gpu", "host", "ranges"):
        assert getattr(a, name).equals(getattr(b, name)), name


def test_ncu_csv_with_a_bad_units_row_is_refused_before_the_rest_is_read(tmp_path, fixtures_dir):
    header = (fixtures_dir / "ncu" / "small_kernels.raw.csv").read_bytes().split(b"\n")[0]
    path = tmp_path / "bad_units.raw.csv"
    with open(path, "wb") as f:  # synthetic: a valid header, then rows of 4 MiB with no units row
        f.write(header + b"\n")
        line = b"11," * ((4 << 20) // 3) + b"1\n"
        for _ in range(8):
            f.write(line)
    refuse(path, "second row should hold units", read_below=12 << 20)


def test_nvtx_text_where_the_schema_has_an_integer_is_one_line(tmp_path, fixtures_dir):
    path = tmp_path / "nvtx_text.sqlite"
    path.write_bytes(gzip.decompress((fixtures_dir / "nsys" / "sdpa_attention.sqlite.gz").read_bytes()))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE NVTX_EVENTS SET globalTid = 'text' WHERE rowid % 2 = 0")
    conn.commit()
    conn.close()
    err = refuse(path, "NVTX_EVENTS.globalTid holds text")
    assert "TypeError" not in str(err)



def test_gpu_memory_as_text_is_named_in_words(tmp_path, fixtures_dir):
    """TARGET_INFO_GPU.totalMemory holding text (synthetic edit of a real export) is a corrupt export
    named by table and column, not an analysis failure with a Python exception name."""
    path = tmp_path / "memory_text.sqlite"
    path.write_bytes(gzip.decompress((fixtures_dir / "nsys" / "sdpa_attention.sqlite.gz").read_bytes()))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE TARGET_INFO_GPU SET totalMemory = 'text'")
    conn.commit()
    conn.close()
    err = refuse(path, "TARGET_INFO_GPU.totalMemory holds text")
    assert "Error" not in str(err)


@pytest.mark.parametrize("raised, words", [
    (TypeError("unsupported operand type(s) for -: 'NoneType' and 'int'"), "a value of the wrong kind"),
    (KeyError("ts"), "lacks a field it needs ('ts')"),
    (IndexError("index 3 is out of bounds"), "shorter than its other fields say"),
    (AttributeError("'list' object has no attribute 'get'"), "unexpected shape"),
])
def test_the_reader_catch_all_says_the_problem_in_words(monkeypatch, fixtures_dir, raised, words):
    """A reader defect (simulated: the reader raises) still names the file and says what is wrong in
    words, without Python's exception name."""
    from diagnoser.errors import InputError
    from diagnoser.ingest import torch_trace

    def broken(*args, **kwargs):
        raise raised
    monkeypatch.setattr(torch_trace, "read_torch_trace", broken)
    path = fixtures_dir / "torch" / "host_sync.pt.trace.json.gz"
    with pytest.raises(InputError) as err:
        read_input(str(path), "torch-trace")
    text = str(err.value)
    assert text.startswith(str(path)) and words in text, text
    assert type(raised).__name__ not in text and "\n" not in text

def test_a_step_of_no_length_draws_without_numpy_warnings(tmp_path):
    """ProfilerStep annotations of dur 0 with the kernels elsewhere (synthetic): the strip chart's idle
    columns are 0, not 0 / 0 (a RuntimeWarning on stderr and NaN in the JSON)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": 100 * i, "dur": 0}
          for i in range(5)]
    for i in range(20):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": 1000 + 10 * i, "dur": 1, "args": {"correlation": i}})
        ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1001 + 10 * i, "dur": 5,
                   "args": {"correlation": i, "device": 0, "stream": 7}})
    path = tmp_path / "zero_steps.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = render_report(diagnose([str(path)]), "json")
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    assert "NaN" not in text


@pytest.mark.parametrize("events", [20_000])
def test_many_tiny_events_are_a_report(tmp_path, events):
    """Tiny kernel/launch pairs, ts in reverse order (synthetic, as ../shared/hostile/tiny-events-3M at
    a smaller size): a valid trace, diagnosed (step detection is linear in the launches)."""
    parts = []
    for i in range(events):
        ts = events - i
        if i % 2:
            parts.append('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %d, "dur": 1}' % ts)
        else:
            parts.append('{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1, '
                         '"ts": %d, "dur": 1}' % ts)
    path = tmp_path / "tiny.pt.trace.json"
    path.write_text('{"traceEvents": [' + ", ".join(parts) + "]}")
    groups = load_groups([str(path)])
    assert groups and groups[0].family.name == "timeline"
