"""Shrink a gzipped PyTorch profiler trace for fixtures/: drop the record_shapes arguments of CPU ops
("Input Dims", "Input type", "Input Strides", "Concrete Inputs"; diagnoser reads none of them) and
write the JSON without indentation. Every event, timestamp and other argument is kept, so
`diagnose facts` gives the same facts before and after.

python3 tools/gen/shrink_torch_trace.py IN.pt.trace.json.gz OUT.pt.trace.json.gz
"""
import gzip
import json
import sys

SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")

src, dst = sys.argv[1], sys.argv[2]
with gzip.open(src, "rt") as f:
    trace = json.load(f)
for e in trace.get("traceEvents", []):
    args = e.get("args")
    if isinstance(args, dict):
        for k in SHAPE_ARGS:
            args.pop(k, None)
with open(dst, "wb") as f:  # mtime 0: the same input gives the same bytes
    with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as g:
        g.write(json.dumps(trace, separators=(",", ":")).encode())
