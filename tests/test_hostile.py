"""Regression tests for the hostile-input reproducers of ../shared/hostile/ (issue 14).

Each reproducer is synthetic by design; the small ones are regenerated here (so these tests run
without the shared folder), the kept files are read from ../shared/hostile when it is present.
"Bounded work" is checked without timing: the bytes this process read and wrote (/proc/self/io)
must stay far below the size of the hostile file, and heap growth is bounded by the readers
themselves (a bomb is refused with its own message, never a MemoryError).
"""
from __future__ import annotations

import gzip
import json
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.ingest.sniff import sniff
from diagnoser.families import read_input
from diagnoser.pipeline import load_groups

REPO = Path(__file__).resolve().parents[1]
HOSTILE = REPO.parent / "shared" / "hostile"
DIAGNOSE = [sys.executable, "-c", "import sys; from diagnoser.cli import main; main(sys.argv[1:])"]


def hostile(*parts: str) -> Path:
    path = HOSTILE.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared/hostile reproducers)")
    return path


def io_bytes() -> tuple[int, int]:
    """(bytes read, bytes written) by this process so far, as the kernel counts them."""
    try:
        fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    except OSError:
        pytest.skip("/proc/self/io is not available")
    return int(fields["rchar"]), int(fields["wchar"])


def refuse(path, *words: str, read_below: int | None = None) -> InputError:
    """Sniff and read `path` as the CLI does; it must fail with an InputError naming the file,
    on one line, holding `words`, having read fewer than `read_below` bytes."""
    before = io_bytes()[0] if read_below else 0
    with pytest.raises(InputError) as err:
        load_groups([str(path)])
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path)), message
    for w in words:
        assert w in message, message
    if read_below:
        assert io_bytes()[0] - before < read_below, "read far more than needed to refuse"
    return err.value


def cli(*args, env=None, timeout=60):
    """Run the real `diagnose` entry point; (exit code, stderr lines)."""
    done = subprocess.run([*DIAGNOSE, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    return done.returncode, [ln for ln in done.stderr.splitlines() if ln.strip()]


# ---------------------------------------------------------------- world-size-bomb

@pytest.mark.parametrize("world", [30_000_000, 100_000_000])
def test_world_size_claim_of_a_tiny_trace_is_refused_before_allocating(tmp_path, world):
    path = tmp_path / f"ws{world}.pt.trace.json"  # the 155-byte reproducer, regenerated
    path.write_text('{"distributedInfo": {"rank": 0, "world_size": %d}, "traceEvents": [{"ph": "X", '
                    '"cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2, "dur": 1}]}' % world)
    refuse(path, f"world_size {world}", "not a plausible number of ranks")


def test_shared_world_size_reproducers_are_refused():
    for f in sorted(hostile("world-size-bomb").glob("*.json")):
        refuse(f, "world_size")


def test_rank_outside_world_is_refused(tmp_path):
    path = tmp_path / "r.pt.trace.json"
    path.write_text('{"distributedInfo": {"rank": 9, "world_size": 4}, "traceEvents": [{"ph": "X", '
                    '"cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2, "dur": 1}]}')
    refuse(path, "rank 9 is outside world_size 4")


# ---------------------------------------------------------------- pickles

def test_bytearray8_claiming_64_gib_is_refused_without_cpython_noise(tmp_path):
    path = tmp_path / "case.snapshot.pickle"  # 14 bytes: PROTO 5, BYTEARRAY8 2**36, 'xx', STOP
    path.write_bytes(b"\x80\x05\x96" + struct.pack("<Q", 1 << 36) + b"xx.")
    rc, err = cli(path)
    assert rc == 1 and len(err) == 1, err
    assert str(path) in err[0] and "pickle" in err[0] and "SystemError" not in err[0]


@pytest.mark.parametrize("opcode", [b"\x96", b"\x8e", b"\x8d"])  # BYTEARRAY8, BINBYTES8, BINUNICODE8
def test_length_claims_beyond_the_file_are_refused(tmp_path, opcode):
    path = tmp_path / "claim.snapshot.pickle"
    path.write_bytes(b"\x80\x05" + opcode + struct.pack("<Q", 1 << 40) + b"xx.")
    refuse(path, "pickle")


def test_empty_list_opcode_bomb_is_refused_not_read_as_an_empty_snapshot(tmp_path):
    path = tmp_path / "lists30M.snapshot.pickle"  # PROTO 4, 30 Mi EMPTY_LIST, STOP (as make.sh)
    path.write_bytes(b"\x80\x04" + b"]" * (30 << 20) + b".")
    refuse(path, "pickle bomb")


def test_shared_empty_list_bomb_behind_gzip_is_refused():
    refuse(hostile("pickle-empty-list-bomb", "lists30M.snapshot.pickle.gunzip-me.gz"), "pickle bomb")


def test_pickle_payload_never_runs(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.snapshot.pickle"
    path.write_bytes(b"\x80\x02cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
    rc, err = cli(path)
    assert rc == 1 and len(err) == 1 and "refuses to load pickle globals" in err[0], err
    assert not marker.exists()


# ---------------------------------------------------------------- values out of range

def _real_trace_with(tmp_path, fixtures_dir, **fields) -> Path:
    """The real x_infer_fp32 trace with fields of its first kernel event replaced."""
    trace = json.loads(gzip.decompress((fixtures_dir / "torch" / "x_infer_fp32.pt.trace.json.gz").read_bytes()))
    kernel = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    kernel.update(fields)
    path = tmp_path / "case.pt.trace.json"
    path.write_text(json.dumps(trace))
    return path


@pytest.mark.parametrize("dur", [1.7976931348623157e308, 1e40, 1e17])
def test_huge_positive_dur_is_out_of_range_not_negative(tmp_path, fixtures_dir, dur):
    path = _real_trace_with(tmp_path, fixtures_dir, dur=dur)
    rc, err = cli(path)
    assert rc == 1 and len(err) == 1, err  # no RuntimeWarning lines before the error
    assert "dur" in err[0] and "out of range" in err[0] and "negative" not in err[0], err


def test_huge_ts_is_out_of_range(tmp_path, fixtures_dir):
    err = refuse(_real_trace_with(tmp_path, fixtures_dir, ts=-1e300), "ts", "out of range")
    assert "negative" not in err.problem


def test_shared_numpy_warning_reproducer_is_one_line():
    rc, err = cli(hostile("numpy-warning-dur", "case.pt.trace.json.gz"))
    assert rc == 1 and len(err) == 1 and "dur" in err[0], err


# ---------------------------------------------------------------- read-to-the-end cases

def test_nul_bytes_after_trace_events_are_refused_at_once(tmp_path):
    path = tmp_path / "sparse.pt.trace.json"  # '{"traceEvents": [' then 2 GiB of NULs (sparse)
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(2 << 30)
    refuse(path, "JSON", read_below=64 << 20)


def test_shared_nul_trace_behind_gzip_is_refused():
    refuse(hostile("kineto-nul-read-to-end", "nul100M.pt.trace.json.gunzip-me.gz"), "JSON",
           read_below=8 << 20)


def test_ncu_rep_of_zero_length_blocks_is_refused_at_the_first(tmp_path):
    path = tmp_path / "sparse.ncu-rep"  # magic, a 2-byte file header, then 2 GiB of holes
    with open(path, "wb") as f:
        f.write(b"NVR\0" + struct.pack("<I", 2) + b"\x08\x01")
        f.truncate(2 << 30)
    refuse(path, "empty block header", read_below=1 << 20)


def test_shared_zero_block_ncu_rep_is_refused():
    refuse(hostile("ncu-rep-zero-blocks-slow", "zeros16M.ncu-rep.gunzip-me.gz"), "empty block header")


def test_ncu_rep_length_field_past_the_file_is_refused(tmp_path, fixtures_dir):
    real = gzip.decompress((fixtures_dir / "ncu" / "small_kernels.ncu-rep.gz").read_bytes())
    n = struct.unpack_from("<I", real, 4)[0]
    damaged = bytearray(real[:4 + 4 + n + 64])
    struct.pack_into("<I", damaged, 8 + n, 0xFFFFFFF0)  # the first block header's length
    path = tmp_path / "claim.ncu-rep"
    path.write_bytes(bytes(damaged))
    refuse(path, "claims", read_below=1 << 20)


def test_csv_with_one_2_gib_line_is_refused_before_reading_it(tmp_path):
    path = tmp_path / "sparse.csv"
    with open(path, "wb") as f:
        f.write(b'"ID","Process ID","Process Name","Kernel Name"\n')  # a valid header: the line decides
        f.truncate(2 << 30)
    refuse(path, "longer than", read_below=64 << 20)


# ---------------------------------------------------------------- gzip bombs and temp files

def _no_declared_size(head: bytes) -> bytes:
    """A real SQLite header whose page count is not valid (version-valid-for != change counter),
    so only the gzip bound stops an unpack."""
    head = bytearray(head)
    head[92:96] = (int.from_bytes(head[24:28], "big") + 1).to_bytes(4, "big")
    return bytes(head)


def _bomb(path: Path, head: bytes, zeros: int, level: int = 9) -> None:
    with gzip.open(path, "wb", compresslevel=level) as g:
        g.write(head)
        block = bytes(16 << 20)
        for _ in range(zeros // len(block)):
            g.write(block)


def test_sqlite_gzip_bomb_is_refused_by_its_header_before_unpacking(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    path = tmp_path / "bomb.sqlite.gz"
    _bomb(path, b"SQLite format 3\0", 256 << 20)  # as make.sh, 256 MiB instead of 4 GiB
    before = io_bytes()[1]
    refuse(path, "corrupt SQLite header")
    assert io_bytes()[1] - before < 1 << 20, "unpacked before the header check"
    assert list(scratch.iterdir()) == []


def test_gzip_bomb_with_a_valid_header_stops_at_the_documented_bound(tmp_path, monkeypatch, fixtures_dir):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    head = gzip.decompress((fixtures_dir / "nsys" / "sdpa_attention.sqlite.gz").read_bytes())[:4096]
    path = tmp_path / "bomb.sqlite.gz"
    _bomb(path, _no_declared_size(head), 256 << 20)
    before = io_bytes()[1]
    refuse(path, "decompression bomb")
    from diagnoser.ingest.input_files import gzip_limit
    assert io_bytes()[1] - before <= gzip_limit(path.stat().st_size) + (8 << 20)
    assert list(scratch.iterdir()) == []


def test_sqlite_gzip_stops_past_the_size_its_header_declares(tmp_path, monkeypatch, fixtures_dir):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    real = gzip.decompress((fixtures_dir / "nsys" / "sdpa_attention.sqlite.gz").read_bytes())
    path = tmp_path / "bomb.sqlite.gz"
    _bomb(path, real, 256 << 20)  # the real 1.2 MB export, then zeros its header does not declare
    before = io_bytes()[1]
    refuse(path, "its own header declares")
    assert io_bytes()[1] - before < len(real) + (20 << 20)
    assert list(scratch.iterdir()) == []


def test_unpacking_stops_before_the_temp_folder_is_full(tmp_path, monkeypatch, fixtures_dir):
    from diagnoser.ingest import input_files as inputs
    path = fixtures_dir / "nsys" / "sdpa_attention.sqlite.gz"
    monkeypatch.setattr(inputs, "_free_bytes", lambda folder: inputs.TMP_RESERVE_BYTES + 4096)
    with pytest.raises(InputError, match="free in"):
        inputs.gunzip_to(path, tmp_path / "out.sqlite")
    assert not (tmp_path / "out.sqlite").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_while_unpacking_leaves_no_temp_file(tmp_path, fixtures_dir, sig):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    head = gzip.decompress((fixtures_dir / "nsys" / "sdpa_attention.sqlite.gz").read_bytes())[:4096]
    path = tmp_path / "big.sqlite.gz"
    _bomb(path, _no_declared_size(head), 1 << 30, level=1)  # a valid header, then zeros: unpacked for a while (bound raised)
    env = {**os.environ, "TMPDIR": str(scratch), "DIAGNOSER_GZIP_MAX_RATIO": "100000"}
    # the child as a terminal's Ctrl-C finds it: a shell without job control starts background jobs (a CI
    # script's `pytest &`) with SIGINT ignored, and the child would inherit that
    proc = subprocess.Popen([*DIAGNOSE, str(path)], env=env, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not any(p.is_file() for p in scratch.glob("diagnoser-nsys-*/*")) and time.monotonic() < deadline \
            and proc.poll() is None:  # the gunzipped copy is being written
        time.sleep(0.02)
    assert proc.poll() is None, "finished before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (128 + sig, 130), (proc.returncode, err)
    assert list(scratch.iterdir()) == [], "temporary copy left behind"
    assert "Traceback" not in err


# ---------------------------------------------------------------- SQLite schema text

def test_damaged_schema_is_one_line_without_the_schema_text(tmp_path):
    path = tmp_path / "schema.sqlite"  # a CREATE over several lines, one byte turned into a backtick
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE StringIds (\n id INTEGER, -- an id\n value TEXT -- its text\n)")
    conn.commit()
    conn.close()
    data = path.read_bytes()
    at = data.index(b"id INTEGER") + 2
    path.write_bytes(data[:at] + b"`" + data[at + 1:])
    err = refuse(path, "malformed database schema (StringIds)")
    assert "--" not in err.problem


def test_shared_schema_reproducer_is_one_line():
    refuse(hostile("sqlite-schema-error-multiline", "schema.sqlite"), "malformed database schema")


# ---------------------------------------------------------------- special files

def test_fifo_without_a_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    rc, err = cli(fifo, timeout=30)
    assert rc == 1 and len(err) == 1 and "FIFO" in err[0] and str(fifo) in err[0], err


def test_fifo_with_a_writer_is_refused_as_a_fifo(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat /dev/zero > {fifo}"])
    try:
        with pytest.raises(InputError, match="FIFO"):
            sniff(fifo)
    finally:
        writer.kill()
        writer.wait()


def test_symlink_loop_is_named_as_such(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(InputError, match="symlink loop"):
        sniff(tmp_path / "a")


def test_broken_symlink_and_device_are_named(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    with pytest.raises(InputError, match="broken symlink"):
        sniff(tmp_path / "dangling")
    if Path("/dev/zero").exists():
        with pytest.raises(InputError, match="device"):
            read_input("/dev/zero", "torch-trace")


# ---------------------------------------------------------------- memory ceiling

def test_running_out_of_memory_while_reading_names_the_file_and_the_ceiling(fixtures_dir, monkeypatch):
    from diagnoser import families, limits
    from diagnoser.ingest import mem_stats

    def exhausted(path, progress=False):
        raise MemoryError()
    monkeypatch.setattr(mem_stats, "read_memory_stats", exhausted)
    monkeypatch.setattr(limits, "_applied", 8 << 30)
    path = fixtures_dir / "mem" / "leak.memory_stats.json"
    with pytest.raises(InputError) as err:
        families.read_input(path, "mem-stats")
    assert str(path) in str(err.value) and "8.0 GiB" in str(err.value) and "--max-memory" in str(err.value)


def test_max_memory_sets_the_address_space_ceiling():
    from diagnoser import limits
    assert limits.parse_size("8G") == 8 << 30 and limits.parse_size("512MiB") == 512 << 20
    assert limits.parse_size("0") is None and limits.parse_size("none") is None
    code = ("import resource, sys; from diagnoser import limits; "
            "limits.apply_memory_limit(limits.parse_size(sys.argv[1])); "
            "print(resource.getrlimit(resource.RLIMIT_AS)[0])")
    out = subprocess.run([sys.executable, "-c", code, "3G"], capture_output=True, text=True, check=True).stdout
    assert int(out) == 3 << 30


def test_max_memory_rejects_a_size_it_cannot_read(fixtures_dir):
    rc, err = cli(fixtures_dir / "mem" / "leak.memory_stats.json", "--max-memory", "lots")
    assert rc == 2 and any("--max-memory" in line for line in err), err
