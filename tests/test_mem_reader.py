"""CUDA memory snapshot / memory_stats / memory_summary readers: safety, bad input, exactness."""
from __future__ import annotations

import collections
import gzip
import hashlib
import io
import json
import os
import pickle
import random

import pytest

from diagnoser.errors import InputError
from diagnoser.ingest.mem_snapshot import load_snapshot, read_snapshot
from diagnoser.memory.model import ACTIONS
from diagnoser.ingest.mem_stats import read_memory_stats, read_memory_summary
from diagnoser.progress import Progress

SNAPSHOTS = ["activations", "optimizer", "fragmentation", "small_leak"]


class _RunsShell:
    """Synthetic hostile payload: unpickling it would call os.system (a marker file proves it ran)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _trusted_raw(path):
    """Test-side reference reading of a fixture we generated ourselves (never done by the product)."""
    with gzip.open(path, "rb") as f:
        return pickle.load(f)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_synthetic_hostile_pickle_is_refused_without_running_code(tmp_path, protocol):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.snapshot.pickle"
    evil.write_bytes(pickle.dumps({"segments": [_RunsShell(marker)], "device_traces": []}, protocol=protocol))
    with pytest.raises(InputError, match=r"refuses to load pickle globals \(.*system would execute code\)"):
        load_snapshot(evil)
    assert not marker.exists()


def test_synthetic_hostile_gzipped_pickle_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.snapshot.pickle.gz"
    evil.write_bytes(gzip.compress(pickle.dumps(_RunsShell(marker), protocol=4)))
    with pytest.raises(InputError, match="refuses to load pickle globals"):
        load_snapshot(evil)
    assert not marker.exists()


def test_truncated_gzip_snapshot_is_an_input_error(fixtures_dir, tmp_path):
    data = (fixtures_dir / "mem" / "optimizer.snapshot.pickle.gz").read_bytes()
    bad = tmp_path / "cut.snapshot.pickle.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated or corrupt"):
        load_snapshot(bad)


def test_truncated_plain_pickle_is_an_input_error(fixtures_dir, tmp_path):
    data = gzip.decompress((fixtures_dir / "mem" / "activations.snapshot.pickle.gz").read_bytes())
    bad = tmp_path / "cut.snapshot.pickle"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(InputError) as e:
        load_snapshot(bad)
    assert "\n" not in str(e.value)


def test_empty_file_is_an_input_error(tmp_path):
    empty = tmp_path / "empty.pickle"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        load_snapshot(empty)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_bytes_are_an_input_error(tmp_path, seed):
    rnd = random.Random(seed)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x80\x04" + bytes(rnd.getrandbits(8) for _ in range(4096)))
    with pytest.raises(InputError):
        load_snapshot(junk)


def test_plain_pickle_of_other_data_is_not_a_snapshot(tmp_path):
    other = tmp_path / "other.pickle"
    other.write_bytes(pickle.dumps({"weights": [1, 2, 3]}))
    with pytest.raises(InputError, match="not a CUDA memory snapshot"):
        load_snapshot(other)


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_snapshot(tmp_path / "nope.pickle")


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_real_snapshot_matches_a_plain_reading(fixtures_dir, name):
    path = fixtures_dir / "mem" / f"{name}.snapshot.pickle.gz"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    snap = load_snapshot(path)
    raw = _trusted_raw(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # never modifies an input
    assert len(snap.segments) == len(raw["segments"])
    assert sum(s.total_size for s in snap.segments) == sum(s["total_size"] for s in raw["segments"])
    assert sum(len(s.blocks) for s in snap.segments) == sum(len(s["blocks"]) for s in raw["segments"])
    for device, entries in enumerate(raw["device_traces"]):
        if not entries:
            continue
        tr = snap.traces[device]
        assert len(tr) == len(entries)
        got = collections.Counter(ACTIONS[a] for a in tr.action.tolist())
        assert got == collections.Counter(e["action"] for e in entries)
        assert tr.size.tolist() == [e["size"] for e in entries]
        assert tr.addr.tolist() == [e.get("addr", 0) for e in entries]  # oom entries carry no addr
        i = len(entries) // 2
        want = [(f["filename"], f["line"], f["name"]) for f in entries[i]["frames"]]
        have = [(f.filename, f.line, f.name) for f in snap.stacks[tr.stack[i]]] if tr.stack[i] >= 0 else []
        assert have == want
    raw_ooms = [e for t in raw["device_traces"] for e in t if e["action"] == "oom"]
    assert [(o.size, o.device_free) for o in snap.ooms] == [(e["size"], e["device_free"]) for e in raw_ooms]
    assert snap.allocator_settings == raw["allocator_settings"]
    assert len(snap.annotations) == len(raw.get("external_annotations", []))


def test_snapshot_progress_goes_to_the_given_stream(fixtures_dir):
    stream = io.StringIO()
    read_snapshot(fixtures_dir / "mem" / "small_leak.snapshot.pickle.gz",
                  progress=Progress("reading", enabled=True, interval=0.0, stream=stream))
    assert "reading:" in stream.getvalue() and "MB" in stream.getvalue()


def test_snapshot_without_progress_is_silent(fixtures_dir, capsys):
    read_snapshot(fixtures_dir / "mem" / "activations.snapshot.pickle.gz", progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", ["activations", "optimizer", "fragmentation", "leak"])
def test_memory_stats_json_counters_are_read_exactly(fixtures_dir, name):
    path = fixtures_dir / "mem" / f"{name}.memory_stats.json"
    raw = json.loads(path.read_text())
    stats = read_memory_stats(path)
    assert stats.allocated_peak == raw["allocated_bytes.all.peak"]
    assert stats.reserved_peak == raw["reserved_bytes.all.peak"]
    assert stats.inactive_split_peak == raw["inactive_split_bytes.all.peak"]
    assert stats.num_ooms == raw["num_ooms"] == 1
    assert stats.num_alloc_retries == raw["num_alloc_retries"]


@pytest.mark.parametrize("name", ["activations", "optimizer", "fragmentation", "leak"])
def test_memory_summary_text_agrees_with_the_json_to_a_mib(fixtures_dir, name):
    raw = json.loads((fixtures_dir / "mem" / f"{name}.memory_stats.json").read_text())
    s = read_memory_summary(fixtures_dir / "mem" / f"{name}.memory_summary.txt")
    assert s.num_ooms == raw["num_ooms"] and s.num_alloc_retries == raw["num_alloc_retries"]
    for got, key in ((s.allocated_peak, "allocated_bytes.all.peak"), (s.reserved_peak, "reserved_bytes.all.peak"),
                     (s.reserved_current, "reserved_bytes.all.current")):
        assert abs(got - raw[key]) <= 1 << 20


def test_memory_stats_bad_json_is_an_input_error(tmp_path):
    bad = tmp_path / "stats.json"
    bad.write_text('{"allocated_bytes.all.peak": 12,')
    with pytest.raises(InputError, match="not valid JSON"):
        read_memory_stats(bad)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(InputError, match="no allocator counters"):
        read_memory_stats(other)


def test_memory_summary_without_rows_is_an_input_error(fixtures_dir, tmp_path):
    text = (fixtures_dir / "mem" / "leak.memory_summary.txt").read_text()
    cut = tmp_path / "summary.txt"
    cut.write_text(text[:400])
    with pytest.raises(InputError, match="no 'Allocated memory'"):
        read_memory_summary(cut)
