"""Nsight Systems reader: real exports against NVIDIA's own `nsys stats`, and bad inputs."""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sqlite3
import stat
import sys

import numpy as np
import pandas as pd
import pytest

from diagnoser.errors import InputError
from diagnoser.ingest import nsys_sqlite
from diagnoser.ingest.nsys_rep import read_nsys_rep
from diagnoser.ingest.nsys_sqlite import read_nsys_sqlite
from diagnoser.timeline.tables import GPU_COLUMNS, HOST_COLUMNS, RANGE_COLUMNS

RUNS = ["dataloader_bound", "decode_small_batch", "fp32_matmul", "healthy", "host_sync",
        "launch_bound", "naive_attention", "sdpa_attention"]
# nsys stats operation labels -> our gpu.name for copies and sets
STATS_COPY_NAMES = {"[CUDA memcpy Host-to-Device]": "Memcpy HtoD",
                    "[CUDA memcpy Device-to-Host]": "Memcpy DtoH",
                    "[CUDA memcpy Device-to-Device]": "Memcpy DtoD",
                    "[CUDA memcpy Peer-to-Peer]": "Memcpy PtoP", "[CUDA memset]": "Memset"}


def export_path(fixtures_dir, name):
    return fixtures_dir / "nsys" / f"{name}.sqlite.gz"


def stats_csv(corpus_dir, name, report):
    path = corpus_dir / "nsys" / f"{name}.stats_{report}.csv"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in the corpus")
    return pd.read_csv(path)


def plain_copy(fixtures_dir, name, tmp_path):
    """A writable, decompressed copy of a real export (for tests that edit it)."""
    out = tmp_path / f"{name}.sqlite"
    with gzip.open(export_path(fixtures_dir, name), "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def sums(frame: pd.DataFrame) -> pd.DataFrame:
    d = frame.assign(d=frame["end_ns"] - frame["start_ns"])
    return d.groupby(d["name"].astype(str))["d"].agg(["size", "sum"])


@pytest.fixture(scope="module")
def timelines():
    cache = {}

    def get(fixtures_dir, name):
        if name not in cache:
            cache[name] = read_nsys_sqlite(export_path(fixtures_dir, name))
        return cache[name]
    return get


@pytest.mark.parametrize("name", RUNS)
def test_kernel_count_and_time_equal_nsys_stats(fixtures_dir, corpus_dir, timelines, name):
    stats = stats_csv(corpus_dir, name, "cuda_gpu_kern_sum")
    gpu = timelines(fixtures_dir, name).gpu
    kernels = gpu[gpu["kind"] == "kernel"]
    assert len(kernels) == stats["Instances"].sum()
    assert (kernels["end_ns"] - kernels["start_ns"]).sum() == stats["Total Time (ns)"].sum()
    mine = sums(kernels)
    theirs = stats.set_index("Name")
    assert mine["size"].to_dict() == theirs["Instances"].to_dict()
    assert mine["sum"].to_dict() == theirs["Total Time (ns)"].to_dict()


@pytest.mark.parametrize("name", RUNS)
def test_copies_and_sets_equal_nsys_stats(fixtures_dir, corpus_dir, timelines, name):
    stats = stats_csv(corpus_dir, name, "cuda_gpu_mem_time_sum")
    gpu = timelines(fixtures_dir, name).gpu
    mine = sums(gpu[gpu["kind"] != "kernel"])
    theirs = stats.assign(name=stats["Operation"].map(STATS_COPY_NAMES)).set_index("name")
    assert mine["size"].to_dict() == theirs["Count"].to_dict()
    assert mine["sum"].to_dict() == theirs["Total Time (ns)"].to_dict()


@pytest.mark.parametrize("name", RUNS)
def test_cuda_api_calls_equal_nsys_stats(fixtures_dir, corpus_dir, timelines, name):
    stats = stats_csv(corpus_dir, name, "cuda_api_sum")
    stats["name"] = stats["Name"].str.replace(r"_v\d+$", "", regex=True)
    mine = sums(timelines(fixtures_dir, name).host)
    assert mine["size"].to_dict() == stats.set_index("name")["Num Calls"].to_dict()
    assert mine["sum"].to_dict() == stats.set_index("name")["Total Time (ns)"].to_dict()


# The phases each workload annotates inside its step_N ranges (corpus/README.md).
PHASES = {"dataloader_bound": {"data", "forward", "backward", "optimizer"},
          "fp32_matmul": {"data", "forward", "backward", "optimizer"},
          "healthy": {"data", "forward", "backward", "optimizer"},
          "host_sync": {"data", "forward", "backward", "optimizer"},
          "launch_bound": {"forward", "backward", "optimizer"},
          "decode_small_batch": {"decode_token"},
          "naive_attention": {"forward"}, "sdpa_attention": {"forward"}}


@pytest.mark.parametrize("name", RUNS)
def test_nvtx_step_ranges_equal_nsys_stats(fixtures_dir, corpus_dir, timelines, name):
    ranges = timelines(fixtures_dir, name).ranges
    names = ranges["name"].astype(str)
    assert (ranges["kind"] == "nvtx").all()
    assert sorted(names[names.str.match(r"step_\d+$")]) == sorted(f"step_{i}" for i in range(10))
    user = set(names[~names.str.match(r"step_\d+$") & ~names.str.contains(":")])
    assert user == PHASES[name]
    # library ranges keep their NVTX domain, as nsys stats prints them
    assert names[names.str.contains(":")].str.match(r"(cuBLAS|CCCL):").all()
    stats = stats_csv(corpus_dir, name, "nvtx_sum")
    theirs = stats.assign(name=stats["Range"].str.removeprefix(":")).set_index("name")
    mine = sums(ranges)
    assert mine["size"].to_dict() == theirs["Instances"].to_dict()
    assert mine["sum"].to_dict() == theirs["Total Time (ns)"].to_dict()


def test_training_run_has_every_phase_inside_each_step(fixtures_dir, timelines):
    ranges = timelines(fixtures_dir, "healthy").ranges
    names = ranges["name"].astype(str)
    steps = ranges[names.str.match(r"step_\d+$")]
    assert len(steps) == 10
    for phase in ("data", "forward", "backward", "optimizer"):
        inner = ranges[names == phase]
        assert len(inner) == len(steps)
        for start, end in zip(inner["start_ns"], inner["end_ns"]):
            assert ((steps["start_ns"] <= start) & (steps["end_ns"] >= end)).sum() == 1


def test_dataloader_bound_run_has_pageable_host_to_device_copies(fixtures_dir, timelines):
    gpu = timelines(fixtures_dir, "dataloader_bound").gpu
    copies = gpu[gpu["kind"] == "memcpy"]
    pageable = copies[copies["pageable"]]
    assert len(pageable) == 142
    assert (pageable["copy_kind"] == "HtoD").all()
    assert not copies.loc[copies["copy_kind"] == "DtoD", "pageable"].any()
    assert (gpu.loc[gpu["kind"] != "memcpy", "pageable"] == False).all()


def test_pinned_host_copies_are_not_pageable(fixtures_dir, timelines):
    copies = timelines(fixtures_dir, "healthy").gpu.query("kind == 'memcpy'")
    # healthy: 51 HtoD from pageable memory, 10 from pinned (nsys memcpy srcKind 0 vs 1)
    assert copies["pageable"].sum() == 51
    assert len(copies) == 61


@pytest.mark.parametrize("name", ["dataloader_bound", "host_sync"])
def test_gpu_rows_equal_a_plain_sql_reading(fixtures_dir, tmp_path, timelines, name):
    """The streamed column arrays against the obvious pandas.read_sql of the same export."""
    db = plain_copy(fixtures_dir, name, tmp_path)
    with sqlite3.connect(db) as conn:
        k = pd.read_sql(
            "SELECT 'kernel' AS kind, s.value AS name, start AS start_ns, end AS end_ns, "
            "deviceId AS device, streamId AS stream, coalesce(correlationId, -1) AS correlation, "
            "0 AS bytes, '' AS copy_kind, 0 AS pageable, gridX*gridY*gridZ AS grid, "
            "blockX*blockY*blockZ AS block FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName", conn)
        m = pd.read_sql(
            "SELECT 'memcpy' AS kind, start AS start_ns, end AS end_ns, deviceId AS device, "
            "streamId AS stream, correlationId AS correlation, bytes, copyKind, "
            "(srcKind = 0 OR dstKind = 0) AS pageable, 0 AS grid, 0 AS block "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY", conn)
        s = pd.read_sql(
            "SELECT 'memset' AS kind, 'Memset' AS name, start AS start_ns, end AS end_ns, "
            "deviceId AS device, streamId AS stream, correlationId AS correlation, bytes, "
            "'' AS copy_kind, 0 AS pageable, 0 AS grid, 0 AS block FROM CUPTI_ACTIVITY_KIND_MEMSET",
            conn)
    m["copy_kind"] = m.pop("copyKind").map({1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"})
    m["name"] = "Memcpy " + m["copy_kind"]
    expected = pd.concat([k, m, s], ignore_index=True).sort_values("start_ns", kind="stable")
    expected = expected[list(GPU_COLUMNS)].reset_index(drop=True)
    expected["pageable"] = expected["pageable"].astype(bool)
    got = timelines(fixtures_dir, name).gpu.astype({"kind": object, "name": object,
                                                    "copy_kind": object})
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_every_table_follows_the_schema(fixtures_dir, timelines):
    tl = timelines(fixtures_dir, "launch_bound")
    for table, columns in ((tl.gpu, GPU_COLUMNS), (tl.host, HOST_COLUMNS),
                           (tl.ranges, RANGE_COLUMNS)):
        assert list(table.columns) == list(columns)
        assert table["start_ns"].is_monotonic_increasing
    assert tl.source == "nsys"
    assert tl.devices == [{"id": 0, "name": "NVIDIA H200", "sm_count": 132,
                           "total_memory": 150109880320, "cc": "9.0"}]
    assert tl.rank is None and tl.world_size is None
    host = tl.host
    assert {"cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync"} <= set(host["name"].astype(str))
    assert (host["thread"] > 0).all() and (host["thread"] < 0x1000000).all()
    launched = tl.gpu.loc[tl.gpu["kind"] == "kernel", "correlation"]
    assert launched.isin(host["correlation"]).all()


def test_reading_is_deterministic(fixtures_dir):
    a = read_nsys_sqlite(export_path(fixtures_dir, "host_sync"))
    b = read_nsys_sqlite(export_path(fixtures_dir, "host_sync"))
    for x, y in ((a.gpu, b.gpu), (a.host, b.host), (a.ranges, b.ranges)):
        pd.testing.assert_frame_equal(x, y)


def test_small_chunks_give_the_same_tables(fixtures_dir, monkeypatch, timelines):
    whole = timelines(fixtures_dir, "sdpa_attention")
    monkeypatch.setattr(nsys_sqlite, "CHUNK_ROWS", 97)
    chunked = read_nsys_sqlite(export_path(fixtures_dir, "sdpa_attention"))
    pd.testing.assert_frame_equal(whole.gpu, chunked.gpu)
    pd.testing.assert_frame_equal(whole.host, chunked.host)


def test_worker_processes_give_the_same_tables(fixtures_dir, monkeypatch, timelines):
    """Big exports are read by a pool of worker processes; force it on a small real one."""
    whole = timelines(fixtures_dir, "launch_bound")
    monkeypatch.setattr(nsys_sqlite, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(nsys_sqlite, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(nsys_sqlite, "_cpus", lambda: 3)
    ran = []
    real_pool = nsys_sqlite._fetch_in_pool
    monkeypatch.setattr(nsys_sqlite, "_fetch_in_pool", lambda *a: ran.append(real_pool(*a)) or ran[-1])
    pooled = read_nsys_sqlite(export_path(fixtures_dir, "launch_bound"))
    assert ran and ran[0] == 12 + 1 + 1 + 25  # every chunk of kernels, copies, sets, API calls
    pd.testing.assert_frame_equal(whole.gpu, pooled.gpu)
    pd.testing.assert_frame_equal(whole.host, pooled.host)


def test_worker_pool_that_cannot_start_falls_back_to_one_process(fixtures_dir, monkeypatch, timelines):
    whole = timelines(fixtures_dir, "sdpa_attention")
    monkeypatch.setattr(nsys_sqlite, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(nsys_sqlite, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(nsys_sqlite, "_cpus", lambda: 2)

    monkeypatch.setattr(nsys_sqlite, "WORKER_MAIN", "import sys; sys.exit(3)")  # dies at once
    pd.testing.assert_frame_equal(whole.gpu, read_nsys_sqlite(export_path(fixtures_dir, "sdpa_attention")).gpu)


def test_worker_that_dies_midway_leaves_the_rest_to_the_reader(fixtures_dir, monkeypatch, timelines):
    whole = timelines(fixtures_dir, "launch_bound")
    monkeypatch.setattr(nsys_sqlite, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(nsys_sqlite, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(nsys_sqlite, "_cpus", lambda: 2)
    # each worker answers three chunks, then exits
    monkeypatch.setattr(nsys_sqlite, "WORKER_MAIN", (
        "import sys, pickle; from diagnoser.ingest import nsys_sqlite as m\n"
        "real = pickle.load\n"
        "calls = []\n"
        "def load(f):\n"
        "    calls.append(1)\n"
        "    if len(calls) > 3: raise EOFError\n"
        "    return real(f)\n"
        "m.pickle.load = load\n"
        "m._serve(sys.argv[1])"))
    got = read_nsys_sqlite(export_path(fixtures_dir, "launch_bound"))
    pd.testing.assert_frame_equal(whole.gpu, got.gpu)
    pd.testing.assert_frame_equal(whole.host, got.host)


def test_corrupt_data_found_by_a_worker_is_an_input_error(fixtures_dir, tmp_path, monkeypatch):
    db = plain_copy(fixtures_dir, "launch_bound", tmp_path)
    with sqlite3.connect(db) as conn:  # text where an integer id belongs
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 'oops' WHERE rowid = 20000")
    monkeypatch.setattr(nsys_sqlite, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(nsys_sqlite, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(nsys_sqlite, "_cpus", lambda: 2)
    with pytest.raises(InputError, match="corrupt Nsight Systems export"):
        read_nsys_sqlite(db)


def test_export_without_nvtx_still_loads(fixtures_dir, tmp_path, timelines):
    db = plain_copy(fixtures_dir, "healthy", tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE NVTX_EVENTS")
    tl = read_nsys_sqlite(db)
    assert tl.ranges.empty and list(tl.ranges.columns) == list(RANGE_COLUMNS)
    pd.testing.assert_frame_equal(tl.gpu, timelines(fixtures_dir, "healthy").gpu)


def test_correlation_ids_past_int32_still_join_kernels_to_their_launches(fixtures_dir, tmp_path, timelines):
    # CUPTI's correlation ids are uint32: a process profiled late in its life records ids past 2**31,
    # which the Timeline's int32 column wraps into range (ids are only joined)
    db = plain_copy(fixtures_dir, "launch_bound", tmp_path)
    with sqlite3.connect(db) as conn:
        for t in ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME"):
            conn.execute(f"UPDATE CUPTI_ACTIVITY_KIND_{t} SET correlationId = correlationId + 3000000000")
    tl, before = read_nsys_sqlite(db), timelines(fixtures_dir, "launch_bound")
    assert str(tl.gpu["correlation"].dtype) == "int32" and int(tl.gpu["correlation"].min()) >= 0
    pd.testing.assert_frame_equal(tl.gpu.drop(columns="correlation"), before.gpu.drop(columns="correlation"))
    launched = tl.gpu["correlation"].isin(tl.host["correlation"]).to_numpy()
    assert launched.mean() > 0.9
    np.testing.assert_array_equal(launched, before.gpu["correlation"].isin(before.host["correlation"]).to_numpy())


def test_as_int32_keeps_ids_in_range_and_wraps_the_rest():
    from diagnoser.timeline.tables import as_int32
    ids = np.array([-1, 0, 7, 2**31 - 1, 2**31 + 5, 3 * 2**31, -2**40], np.int64)
    out = as_int32(ids)
    assert out.dtype == np.int32 and out.tolist() == [-1, 0, 7, 2**31 - 1, 5, 0, -1]
    assert ids[4] == 2**31 + 5  # the caller's array is left alone


def test_export_with_only_cuda_api_calls_loads_with_an_empty_gpu_table(fixtures_dir, tmp_path):
    db = plain_copy(fixtures_dir, "sdpa_attention", tmp_path)
    with sqlite3.connect(db) as conn:
        for t in ("KERNEL", "MEMCPY", "MEMSET"):
            conn.execute(f"DROP TABLE CUPTI_ACTIVITY_KIND_{t}")
    tl = read_nsys_sqlite(db)
    assert tl.gpu.empty and list(tl.gpu.columns) == list(GPU_COLUMNS)
    assert len(tl.host) == 4327


def test_export_without_any_cuda_activity_is_refused(fixtures_dir, tmp_path):
    db = plain_copy(fixtures_dir, "sdpa_attention", tmp_path)
    with sqlite3.connect(db) as conn:
        for t in ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME"):
            conn.execute(f"DROP TABLE CUPTI_ACTIVITY_KIND_{t}")
    with pytest.raises(InputError, match="no CUDA activity"):
        read_nsys_sqlite(db)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_inputs_are_left_byte_identical_and_temp_files_removed(fixtures_dir, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    gz = export_path(fixtures_dir, "naive_attention")
    plain = plain_copy(fixtures_dir, "naive_attention", tmp_path)
    os.chmod(plain, stat.S_IRUSR)  # a read-only input must be readable
    before = {p: (sha256(p), p.stat().st_mtime_ns) for p in (gz, plain)}
    read_nsys_sqlite(gz)
    read_nsys_sqlite(plain)
    assert {p: (sha256(p), p.stat().st_mtime_ns) for p in (gz, plain)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["naive_attention.sqlite", "scratch"]
    assert list(scratch.iterdir()) == []


def unrelated_sqlite(path):
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users VALUES (1, 'ada')")
    conn.close()


@pytest.mark.parametrize("case, message", [
    ("empty", "empty"),
    ("random", "not an SQLite database"),
    ("random_gz", "not an SQLite database"),
    ("truncated_gz", "truncated gzip"),
    ("truncated_sqlite", "truncated SQLite"),
    ("unrelated_sqlite", "not an Nsight Systems export"),
    ("directory", "directory"),
    ("missing", "no such file"),
])
def test_bad_inputs_raise_one_line_input_errors(fixtures_dir, tmp_path, monkeypatch, case, message):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    path = tmp_path / f"{case}.sqlite"
    rng = np.random.default_rng(3)
    real_gz = export_path(fixtures_dir, "sdpa_attention").read_bytes()
    if case == "empty":
        path.write_bytes(b"")
    elif case == "random":
        path.write_bytes(rng.bytes(4096))
    elif case == "random_gz":
        path = tmp_path / "random.sqlite.gz"
        path.write_bytes(gzip.compress(rng.bytes(4096)))
    elif case == "truncated_gz":
        path = tmp_path / "cut.sqlite.gz"
        path.write_bytes(real_gz[: len(real_gz) // 2])
    elif case == "truncated_sqlite":
        full = gzip.decompress(real_gz)
        path.write_bytes(full[: len(full) // 2])
    elif case == "unrelated_sqlite":
        unrelated_sqlite(path)
    elif case == "directory":
        path.mkdir()
    with pytest.raises(InputError, match=message) as err:
        read_nsys_sqlite(path)
    assert "\n" not in str(err.value)
    assert err.value.path == str(path)
    assert list(scratch.iterdir()) == []


def test_corrupt_pages_are_reported_not_raised_raw(fixtures_dir, tmp_path):
    db = plain_copy(fixtures_dir, "sdpa_attention", tmp_path)
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for off in range(page * 2, len(data) - page, page * 3):  # scribble over many b-tree pages
        data[off:off + 64] = b"\xff" * 64
    db.write_bytes(bytes(data))
    with pytest.raises(InputError, match="corrupt"):
        read_nsys_sqlite(db)


# -- .nsys-rep ------------------------------------------------------------------------------

def test_nsys_rep_without_nsys_names_the_export_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    rep = tmp_path / "healthy.nsys-rep"
    rep.write_bytes(b"NVIDIA Nsight Systems report stand-in")
    with pytest.raises(InputError) as err:
        read_nsys_rep(rep)
    # the folder kept: the command works pasted where diagnose ran (issue 30)
    assert f"nsys export --type sqlite -o {tmp_path}/healthy.sqlite {tmp_path}/healthy.nsys-rep" in str(err.value)
    assert "\n" not in str(err.value)


def fake_nsys(bin_dir, body: str):
    """A stand-in `nsys` on PATH (the real one needs NVIDIA's install)."""
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text(f"#!{sys.executable}\nimport shutil, sys\nargs = sys.argv[1:]\n{body}\n")
    script.chmod(0o755)


def test_nsys_rep_is_exported_into_a_temp_folder_and_read(fixtures_dir, tmp_path, monkeypatch):
    plain = plain_copy(fixtures_dir, "sdpa_attention", tmp_path)
    fake_nsys(tmp_path / "bin", f"assert args[:3] == ['export', '--type', 'sqlite']\n"
                                f"shutil.copy({str(plain)!r}, args[args.index('-o') + 1])")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    inputs = tmp_path / "in"
    inputs.mkdir()
    rep = inputs / "sdpa_attention.nsys-rep"
    rep.write_bytes(b"NVIDIA Nsight Systems report stand-in")
    tl = read_nsys_rep(rep)
    assert tl.path == str(rep)
    assert len(tl.gpu[tl.gpu["kind"] == "kernel"]) == 696
    assert [p.name for p in inputs.iterdir()] == ["sdpa_attention.nsys-rep"]


def test_nsys_rep_export_failure_is_one_line(tmp_path, monkeypatch):
    fake_nsys(tmp_path / "bin", "print('Processing...'); print('ERROR: report is corrupt', "
                                "file=sys.stderr); sys.exit(1)")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    rep = tmp_path / "bad.nsys-rep"
    rep.write_bytes(b"garbage")
    with pytest.raises(InputError, match="report is corrupt"):
        read_nsys_rep(rep)
