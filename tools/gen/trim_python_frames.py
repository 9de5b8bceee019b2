"""Trim a gzipped PyTorch profiler trace taken with with_stack=True for fixtures/: drop the Python frames
(`python_function` events) shorter than MIN_US microseconds (default 50) - the tens of thousands of calls
a NumPy loop makes - and write the JSON without indentation. Every CPU op, CUDA runtime call, kernel,
copy and annotation is kept, and so is every Python frame long enough to span an idle gap, so the
idle breakdown and the Python frame the host spends its gaps in (`host_gap_python`, `data_gap_python`)
come out the same (check with `diagnose facts` before and after).

python3 tools/gen/trim_python_frames.py IN.pt.trace.json.gz OUT.pt.trace.json.gz [MIN_US]
"""
import gzip
import json
import sys

src, dst = sys.argv[1], sys.argv[2]
min_us = float(sys.argv[3]) if len(sys.argv) > 3 else 50.0
with gzip.open(src, "rt") as f:
    trace = json.load(f)
trace["traceEvents"] = [e for e in trace.get("traceEvents", [])
                        if not (e.get("cat") == "python_function" and float(e.get("dur", 0)) < min_us)]
with open(dst, "wb") as f:  # mtime 0: the same input gives the same bytes
    with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as g:
        g.write(json.dumps(trace, separators=(",", ":")).encode())
