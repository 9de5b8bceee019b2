"""PyTorch profiler (Kineto JSON) reader: real corpus traces against a naive json.load reading."""
from __future__ import annotations

import collections
import gc
import gzip
import json
import random

import numpy as np
import pandas as pd
import pytest

from diagnoser.errors import InputError
from diagnoser.ingest import torch_trace
from diagnoser.ingest.torch_trace import read_torch_trace
from diagnoser.timeline.tables import GPU_COLUMNS, HOST_COLUMNS, RANGE_COLUMNS

TORCH = "torch"
ALL_TRACES = ["dataloader_bound", "ddp_healthy.rank0", "ddp_healthy.rank1", "ddp_straggler.rank0",
              "ddp_straggler.rank1", "decode_small_batch", "fp32_matmul", "healthy", "host_sync",
              "launch_bound", "naive_attention", "sdpa_attention"]
SMALL_TRACES = ["sdpa_attention", "naive_attention", "dataloader_bound", "ddp_straggler.rank1"]


def trace_path(fixtures_dir, name):
    return fixtures_dir / TORCH / f"{name}.pt.trace.json.gz"


def naive_events(path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    gc.disable()  # json.load of 100+ MB otherwise spends most of its time in the collector
    try:
        with opener(path, "rb") as f:
            return json.load(f)["traceEvents"]
    finally:
        gc.enable()


def ns(ts: float) -> int:
    return int(np.rint(ts * 1000.0))


def naive_tables(events: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The reader's contract written the obvious way: one dict per row, then a stable sort."""
    gpu, host, ranges = [], [], []
    for e in events:
        cat, a = e.get("cat"), e.get("args", {})
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver",
                       "user_annotation", "cpu_op", "python_function"):
            continue
        start = ns(e["ts"])
        end = start + ns(e.get("dur", 0.0))
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            copy_kind, pageable = "", False
            if cat == "gpu_memcpy":
                copy_kind = e["name"].split()[1]
                pageable = "Pageable" in e["name"]
            kernel = cat == "kernel"
            gpu.append({
                "kind": {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[cat],
                "name": e["name"], "start_ns": start, "end_ns": end,
                "device": a.get("device", e["pid"]), "stream": a.get("stream", e["tid"]),
                "correlation": a.get("correlation", -1),
                "bytes": 0 if kernel else a.get("bytes", 0), "copy_kind": copy_kind,
                "pageable": pageable,
                "grid": int(np.prod(a["grid"])) if kernel and "grid" in a else 0,
                "block": int(np.prod(a["block"])) if kernel and "block" in a else 0,
            })
        elif cat in ("cuda_runtime", "cuda_driver"):
            host.append({"name": e["name"], "start_ns": start, "end_ns": end, "thread": e["tid"],
                         "correlation": a.get("correlation", -1)})
        else:
            kind = {"user_annotation": "annotation", "cpu_op": "op", "python_function": "python"}[cat]
            ranges.append({"name": e["name"], "start_ns": start, "end_ns": end, "thread": e["tid"],
                           "kind": kind})

    def frame(rows, columns):
        df = pd.DataFrame(rows, columns=list(columns)).astype(columns)
        return df.sort_values("start_ns", kind="stable").reset_index(drop=True)
    return frame(gpu, GPU_COLUMNS), frame(host, HOST_COLUMNS), frame(ranges, RANGE_COLUMNS)


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """The reader's Categorical columns (names, kinds, copy kinds) as the strings they stand for."""
    cats = [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)]
    assert set(cats) == {"name", "kind", "copy_kind"} & set(df.columns), cats
    return df.astype({c: object for c in cats})


def assert_same_tables(timeline, events):
    gpu, host, ranges = naive_tables(events)
    pd.testing.assert_frame_equal(_plain(timeline.gpu), gpu)
    pd.testing.assert_frame_equal(_plain(timeline.host), host)
    pd.testing.assert_frame_equal(_plain(timeline.ranges), ranges)


@pytest.mark.parametrize("name", ALL_TRACES)
def test_real_trace_counts_match_naive_json_load(fixtures_dir, name):
    path = trace_path(fixtures_dir, name)
    timeline = read_torch_trace(path)
    cats = collections.Counter(e.get("cat") for e in naive_events(path))
    gpu_kinds = timeline.gpu["kind"].value_counts()
    assert gpu_kinds.get("kernel", 0) == cats["kernel"] > 0
    assert gpu_kinds.get("memcpy", 0) == cats["gpu_memcpy"]
    assert gpu_kinds.get("memset", 0) == cats["gpu_memset"]
    assert len(timeline.host) == cats["cuda_runtime"] + cats["cuda_driver"] > 0
    range_kinds = timeline.ranges["kind"].value_counts()
    assert range_kinds.get("annotation", 0) == cats["user_annotation"] > 0
    assert range_kinds.get("op", 0) == cats["cpu_op"] > 0
    assert range_kinds.get("python", 0) == cats["python_function"]


@pytest.mark.parametrize("name", SMALL_TRACES)
def test_real_trace_tables_equal_naive_reader(fixtures_dir, name):
    path = trace_path(fixtures_dir, name)
    assert_same_tables(read_torch_trace(path), naive_events(path))


@pytest.mark.parametrize("name", ALL_TRACES)
def test_real_trace_times_are_consistent_and_sorted(fixtures_dir, name):
    timeline = read_torch_trace(trace_path(fixtures_dir, name))
    for table in (timeline.gpu, timeline.host, timeline.ranges):
        assert (table["start_ns"] <= table["end_ns"]).all()
        assert table["start_ns"].is_monotonic_increasing
    # all tables share one clock: GPU and host activity overlap, within a second of each other
    # (kernels queued just before the profiler window, e.g. NCCL, may start a little earlier)
    t0 = min(timeline.host["start_ns"].min(), timeline.ranges["start_ns"].min())
    t1 = max(timeline.host["end_ns"].max(), timeline.ranges["end_ns"].max())
    g0, g1 = timeline.gpu["start_ns"].min(), timeline.gpu["end_ns"].max()
    assert g0 < t1 and t0 < g1
    assert abs(g0 - t0) < 10**9 and abs(g1 - t1) < 10**9


def test_profiler_steps_are_annotation_ranges(fixtures_dir):
    timeline = read_torch_trace(trace_path(fixtures_dir, "healthy"))
    steps = timeline.ranges[timeline.ranges["name"].str.startswith("ProfilerStep#")]
    assert len(steps) >= 3 and set(steps["kind"]) == {"annotation"}
    assert (steps["end_ns"] > steps["start_ns"]).all()


def test_devices_come_from_device_properties(fixtures_dir):
    timeline = read_torch_trace(trace_path(fixtures_dir, "sdpa_attention"))
    assert timeline.devices == [{"id": 0, "name": "NVIDIA H200", "sm_count": 132,
                                 "total_memory": 150109880320, "cc": "9.0"}]
    assert timeline.rank is None and timeline.world_size is None
    assert timeline.source == "torch"


@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_straggler_traces_carry_rank_and_world_size(fixtures_dir, rank):
    timeline = read_torch_trace(trace_path(fixtures_dir, f"ddp_straggler.rank{rank}"))
    assert (timeline.rank, timeline.world_size) == (rank, 2)
    nccl = timeline.gpu[timeline.gpu["name"].str.contains("nccl", case=False)]
    assert len(nccl) > 0


def test_dataloader_bound_has_pageable_host_to_device_copies(fixtures_dir):
    gpu = read_torch_trace(trace_path(fixtures_dir, "dataloader_bound")).gpu
    copies = gpu[gpu["kind"] == "memcpy"]
    pageable = copies[copies["pageable"]]
    assert len(pageable) > 0 and set(pageable["copy_kind"]) == {"HtoD"}
    assert (pageable["bytes"] > 0).all()
    kernels = gpu[gpu["kind"] == "kernel"]
    assert (kernels["grid"] > 0).all() and (kernels["block"] > 0).all() and (kernels["bytes"] == 0).all()
    assert (kernels["correlation"] >= 0).all()


def test_decode_small_batch_device_to_pinned_copies_are_not_pageable(fixtures_dir):
    gpu = read_torch_trace(trace_path(fixtures_dir, "decode_small_batch")).gpu
    copies = gpu[gpu["kind"] == "memcpy"]
    assert set(copies["copy_kind"]) == {"DtoH"} and not copies["pageable"].any()


def test_plain_and_gzipped_trace_read_the_same(fixtures_dir, tmp_path):
    path = trace_path(fixtures_dir, "sdpa_attention")
    plain = tmp_path / "sdpa.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    a, b = read_torch_trace(path), read_torch_trace(plain)
    pd.testing.assert_frame_equal(a.gpu, b.gpu)
    pd.testing.assert_frame_equal(a.ranges, b.ranges)


def test_progress_goes_to_stderr_only(fixtures_dir, capsys, monkeypatch):
    monkeypatch.setattr("diagnoser.progress.time.monotonic", iter(range(0, 10**6, 5)).__next__)
    read_torch_trace(trace_path(fixtures_dir, "sdpa_attention"), progress=True)
    out, err = capsys.readouterr()
    assert out == "" and "reading sdpa_attention" in err


def synthetic_events(n: int, seed: int) -> list[dict]:
    """Events whose names hold braces, brackets, commas and escaped quotes, as kernel names do."""
    rnd = random.Random(seed)
    tricky = ['void f<{lambda()#1}>(int)', 'x}, {"ph": "X"', '[]{},"\\', 'a\\"}, {b', '}]', '{[',
              'Memcpy HtoD (Pageable -> Device)', 'ünï "quoted" \u2028', '},\n  {']
    cats = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op",
            "user_annotation", "python_function", "ac2g", "cpu_instant_event"]
    events = []
    for i in range(n):
        cat = rnd.choice(cats)
        name = rnd.choice(tricky) + str(rnd.randint(0, 3))
        if cat == "gpu_memcpy":
            name = rnd.choice(["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)",
                               "Memcpy DtoD (Device -> Device)"])
        e = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": rnd.randint(1, 4),
             "ts": round(rnd.uniform(1e9, 1e9 + 1e4), 3), "dur": round(rnd.uniform(0, 50), 3),
             "args": {"correlation": i, "device": 0, "stream": 7, "bytes": rnd.randint(0, 1 << 20),
                      "grid": [rnd.randint(1, 9), 2, 1], "block": [128, 1, 1],
                      "nested": [{"k": "}, {"}, {"k": [1, {"z": "]"}]}], "note": rnd.choice(tricky)}}
        if rnd.random() < 0.2:
            e["args"] = {"External id": i, "odd": "}, {"}
        events.append(e)
    return events


@pytest.mark.parametrize("chunk", [1, 7, 64, 333, 4096])
@pytest.mark.parametrize("compact", [True, False])
def test_synthetic_chunk_boundaries_match_naive_reader(tmp_path, monkeypatch, chunk, compact):
    events = synthetic_events(300, seed=chunk)
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "G", "numSms": 2}],
           "traceEvents": events, "distributedInfo": {"rank": 3, "world_size": 4,
                                                      "pg_config": [{"a": "}, {"}, {"b": 1}]}}
    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=2))
    monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", chunk)
    timeline = read_torch_trace(path)
    assert_same_tables(timeline, events)
    assert (timeline.rank, timeline.world_size) == (3, 4)
    assert timeline.devices[0]["sm_count"] == 2


def test_synthetic_batches_use_both_the_fast_and_the_exact_cut(tmp_path, monkeypatch):
    """Tricky names make some guessed cuts fail; the exact scan must then find the real one."""
    calls = collections.Counter()
    exact, decode = torch_trace._exact_cut, torch_trace._TraceStream._decode_batch

    def counting_exact(buf, n):
        calls["exact"] += 1
        return exact(buf, n)

    def counting_decode(self, buf, cut, final):
        ok = decode(self, buf, cut, final)
        if ok and not final:
            calls["fast ok"] += 1
        return ok
    monkeypatch.setattr(torch_trace, "_exact_cut", counting_exact)
    monkeypatch.setattr(torch_trace._TraceStream, "_decode_batch", counting_decode)
    monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", 333)
    events = synthetic_events(300, seed=3)
    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert_same_tables(read_torch_trace(path), events)
    assert calls["fast ok"] > 0 and calls["exact"] > 0


def naive_last_comma(buf: bytes, n: int) -> int:
    """Last comma at the array's top level in buf[1:n], one byte at a time."""
    depth, cut, i, in_string = 0, -1, 1, False
    while i < n:
        c = buf[i:i + 1]
        if in_string:
            if c == b"\\":
                i += 2
                continue
            in_string = c != b'"'
        elif c == b'"':
            in_string = True
        elif c in (b"{", b"["):
            depth += 1
        elif c in (b"}", b"]"):
            depth -= 1
            if depth < 0:
                break
        elif c == b"," and depth == 0:
            cut = i
        i += 1
    return cut


def test_synthetic_exact_cut_matches_a_byte_by_byte_scan():
    rnd = random.Random(0)
    for trial in range(60):
        events = synthetic_events(rnd.randint(1, 6), seed=trial)
        for e in events:
            e["name"] += "\\" * rnd.randint(0, 3) + '"' * rnd.randint(0, 2)
        text = json.dumps({"traceEvents": events, "tail": [{"a": "}, {"}, {"b": 1}]},
                          indent=rnd.choice([None, 2]))
        body = b"[" + text[text.index("[") + 1:].encode()
        for n in sorted(rnd.sample(range(2, len(body) + 1), 15)) + [len(body)]:
            assert torch_trace._exact_cut(bytearray(body), n) == naive_last_comma(body, n)


def test_synthetic_gzipped_trace_with_tiny_reads_matches_naive_reader(tmp_path, monkeypatch):
    events = synthetic_events(200, seed=5)
    path = tmp_path / "synthetic.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", 97)
    assert_same_tables(read_torch_trace(path), events)


def test_synthetic_header_with_decoy_trace_events_keys(tmp_path, monkeypatch):
    events = synthetic_events(40, seed=9)
    text = ('{"traceName": "a \\"traceEvents\\": [ decoy", "meta": {"traceEvents": [{"x": 1}]},'
            ' "distributedInfo": {"rank": 1, "world_size": 2}, "traceEvents": '
            + json.dumps(events) + "}")
    path = tmp_path / "decoy.json"
    path.write_text(text)
    for chunk in (5, 1 << 20):
        monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", chunk)
        timeline = read_torch_trace(path)
        assert_same_tables(timeline, events)
        assert (timeline.rank, timeline.world_size) == (1, 2)


def test_synthetic_bare_event_array_is_read(tmp_path, monkeypatch):
    events = synthetic_events(50, seed=1)
    path = tmp_path / "array.json"
    path.write_text(json.dumps(events))
    monkeypatch.setattr(torch_trace, "_CHUNK_BYTES", 100)
    assert_same_tables(read_torch_trace(path), events)


def test_synthetic_empty_trace_gives_empty_tables(tmp_path):
    path = tmp_path / "empty_events.json"
    path.write_text('{"traceEvents": []}')
    timeline = read_torch_trace(path)
    assert len(timeline.gpu) == len(timeline.host) == len(timeline.ranges) == 0


def bad_inputs(tmp_path, fixtures_dir):
    real = trace_path(fixtures_dir, "sdpa_attention").read_bytes()
    plain = gzip.decompress(real)
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 2.0}'
    return {
        "empty": b"",
        "blank": b"  \n",
        "truncated_gzip": real[: len(real) // 2],
        "random_bytes": random.Random(0).randbytes(5000),
        "no_trace_events": b'{"foo": 1}',
        "json_list_of_numbers": b"[1, 2, 3]",
        "truncated_json": plain[: len(plain) // 2],
        "ts_is_text": b'{"traceEvents": [' + event.replace(b"1.0", b'"soon"') + b"]}",
        "event_is_a_number": b'{"traceEvents": [' + event + b", 42]}",
        "args_is_a_list": b'{"traceEvents": [' + event[:-1] + b', "args": [1]}]}',
        "trailing_garbage": b'{"traceEvents": [' + event + b"]} xyz",
        "kernel_without_ts": b'{"traceEvents": [' + event.replace(b'"ts": 1.0, ', b"") + b"]}",
        "trace_events_not_a_list": b'{"traceEvents": {"a": 1}}',
    }


@pytest.mark.parametrize("case", ["empty", "blank", "truncated_gzip", "random_bytes", "no_trace_events",
                                  "json_list_of_numbers", "truncated_json", "ts_is_text",
                                  "event_is_a_number", "args_is_a_list", "trailing_garbage",
                                  "kernel_without_ts", "trace_events_not_a_list"])
def test_bad_input_raises_input_error(tmp_path, fixtures_dir, case):
    path = tmp_path / f"{case}.json"
    path.write_bytes(bad_inputs(tmp_path, fixtures_dir)[case])
    with pytest.raises(InputError) as err:
        read_torch_trace(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_missing_file_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_torch_trace(tmp_path / "absent.json")


def test_reader_does_not_modify_its_input(fixtures_dir):
    path = trace_path(fixtures_dir, "sdpa_attention")
    before = path.read_bytes()
    read_torch_trace(path)
    assert path.read_bytes() == before


# Synthetic inputs, one per shape the header's read tells apart (what precedes traceEvents, or the bare array);
# the answers are the reader's before its first read became the body's buffer (2d58a40), plain and gzipped.
_HEADER_EDGES = [
    (b"", "file is empty"), (b"  \n\t ", "file is empty"), (b"\x0b", "file is empty"),
    (b"\x0c{}", "not JSON (does not start with { or [)"), (b"\xef\xbb\xbf", "not JSON (does not start with { or [)"),
    (b"\x0b[]", "not JSON (does not start with { or [)"), (b"hello", "not JSON (does not start with { or [)"),
    (b"\xef\xbb\xbf \n{\"traceEvents\": []}", "malformed JSON in the header before traceEvents"),
    (b'{"a": 1}', "JSON without traceEvents"), (b'{"traceEvents":[{"ph":"X"', "JSON ends early"),
    (b"\xef\xbb\xbf[]", 0), (b"\r\n\r\n[ ]", 0), (b'{"x": {"traceEvents": [1]}, "traceEvents": []}', 0),
    (b'{"schemaVersion":1,"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"pid":0,"tid":7,'
     b'"args":{"device":0,"stream":7}}]}', 1),
]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("data, expected", _HEADER_EDGES)
def test_header_edges(tmp_path, data, expected, gz):
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    if isinstance(expected, str):
        with pytest.raises(InputError) as e:
            read_torch_trace(path)
        assert expected in str(e.value)
    else:
        assert len(read_torch_trace(path).gpu) == expected
