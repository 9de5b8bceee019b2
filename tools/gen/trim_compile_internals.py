"""Shrink a gzipped PyTorch profiler trace of torch.compile recompiling for fixtures/: drop the CPU ops and
Python frames nested inside Dynamo's per-frame compile ranges (`_compile.compile_inner`) and Inductor's
benchmarking of a new graph's Triton configurations (`CachingAutotuner.benchmark_all_configs`), keeping those
ranges themselves, every CUDA runtime call, kernel and copy, and everything outside them. diagnoser reads a
compile as those ranges (timeline/recompiles.py, replay.py); the tens of thousands of ops inside them (Dynamo,
AOTAutograd, Inductor internals, the benchmarks' zero_ / fill_ ops) are not what the step-time prediction reads.

python3 tools/gen/trim_compile_internals.py IN.pt.trace.json.gz OUT.pt.trace.json.gz
"""
import gzip
import json
import re
import sys

ENTRY = re.compile(r"^(?:_compile\.compile_inner|CachingAutotuner\.benchmark_all_configs)(?: \(dynamo_timed\))?$")
src, dst = sys.argv[1], sys.argv[2]
with gzip.open(src, "rt") as f:
    trace = json.load(f)
ev = trace["traceEvents"]
spans = sorted((e["ts"], e["ts"] + e.get("dur", 0), e.get("tid")) for e in ev
               if e.get("cat") == "cpu_op" and ENTRY.match(str(e.get("name", ""))))


def inside(e) -> bool:
    if e.get("cat") not in ("cpu_op", "python_function") or ENTRY.match(str(e.get("name", ""))):
        return False
    t0, t1 = e["ts"], e["ts"] + e.get("dur", 0)
    return any(s <= t0 and t1 <= t and e.get("tid") == tid for s, t, tid in spans)


out = [e for e in ev if not inside(e)]
trace["traceEvents"] = out
with open(dst, "wb") as f:  # mtime 0: the same input gives the same bytes
    with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as g:
        g.write(json.dumps(trace, separators=(",", ":")).encode())
print(f"{dst}: {len(ev)} -> {len(out)} events")
