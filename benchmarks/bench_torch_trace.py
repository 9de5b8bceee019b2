"""Benchmark the PyTorch trace reader against the bare msgspec parse of the same file.

Cases: (1) the biggest corpus trace, decompressed; (2) a ~1 GB trace made by replicating its real
events (shifted in time, new correlation and flow ids). Each measurement runs in a fresh Python
process; peak RSS is that process's own (/proc/self/status VmHWM), imports included.

    python benchmarks/bench_torch_trace.py [--size-gb 1.0] [--repeat 2] [--keep DIR]

The floor is `msgspec.json.decode(open(f).read(), type=Trace)` with a small Struct schema for
events (the fields the reader needs, gc=False): the practical lower bound of any Python reader.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS_TRACE = REPO.parent / "shared" / "corpus" / "torch" / "decode_small_batch.pt.trace.json.gz"

# VmHWM is this process's own high-water mark; getrusage's ru_maxrss would also count the parent's
# RSS at fork time (Linux keeps it across exec), which inflates children of a big parent.
PEAK_RSS = """
def peak_rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
"""

READER = PEAK_RSS + """
import sys, time
from diagnoser.ingest.torch_trace import read_torch_trace
t, c = time.perf_counter(), time.process_time()
tl = read_torch_trace(sys.argv[1])
dt, dc = time.perf_counter() - t, time.process_time() - c
rows = len(tl.gpu) + len(tl.host) + len(tl.ranges)
print(dt, dc, peak_rss(), rows)
"""

END_TO_END = PEAK_RSS + """
import sys, time
from diagnoser.pipeline import diagnose
from diagnoser.report.render import render_json
t, c = time.perf_counter(), time.process_time()
report = diagnose([sys.argv[1]], progress=True)
text = render_json(report)
dt, dc = time.perf_counter() - t, time.process_time() - c
print(dt, dc, peak_rss(), len(report.findings))
print("first:", next((f.category for f in report.findings if f.severity != "info"), "none"), file=sys.stderr)
"""

FLOOR = PEAK_RSS + """
import sys, time
import msgspec

class Args(msgspec.Struct, gc=False):
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    bytes: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None

class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: Args | None = None

class Trace(msgspec.Struct):
    traceEvents: list[Event]

t, c = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb") as f:
    trace = msgspec.json.decode(f.read(), type=Trace)
dt, dc = time.perf_counter() - t, time.process_time() - c
print(dt, dc, peak_rss(), len(trace.traceEvents))
"""


def measure(script: str, path: Path) -> tuple[float, float, int, int]:
    """Run script on path in a fresh interpreter: (wall s, CPU s, peak RSS bytes, count)."""
    out = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO, check=True,
                         stdout=subprocess.PIPE, text=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2]), int(out[3])


def replicate_raw(raw: bytes, dst: Path, copies: int = 0, target_bytes: int = 0) -> tuple[int, int]:
    """Write raw's events `copies` times (or about target_bytes of them) to dst, each copy shifted past
    the last in time and in correlation ids; returns (copies, events written)."""
    start = re.search(rb'"traceEvents"\s*:\s*\[', raw).end()
    end = raw.rindex(b"]")
    header, body, trailer = raw[:start], raw[start:end].strip(), raw[end:]
    events = json.loads(b"[" + body + b"]")
    t0 = min(e["ts"] for e in events if "ts" in e)
    t1 = max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e)
    span_us = int(t1 - t0) + 1000
    ids = [e.get("args", {}).get("correlation", 0) for e in events] + [e.get("id", 0) for e in events]
    id_span = max(i for i in ids if isinstance(i, int)) + 1
    copies = copies or max(1, round(target_bytes / len(body)))

    def shifted(k: int) -> bytes:
        if k == 0:
            return body
        ts = rb'("ts": ?)(\d+)'  # add whole microseconds to the integer part: exact, keeps format
        out = re.sub(ts, lambda m: m.group(1) + str(int(m.group(2)) + k * span_us).encode(), body)
        ids = rb'("(?:correlation|id)": ?)(\d+)'
        return re.sub(ids, lambda m: m.group(1) + str(int(m.group(2)) + k * id_span).encode(), out)

    with open(dst, "wb") as f:
        f.write(header + b"\n")
        for k in range(copies):
            f.write(shifted(k))
            f.write(b",\n" if k < copies - 1 else b"\n")
        f.write(trailer)
    return copies, len(events) * copies


def replicate(src: Path, dst: Path, target_bytes: int) -> int:
    """Write a trace of about target_bytes from src's events, each copy shifted past the last."""
    return replicate_raw(src.read_bytes(), dst, target_bytes=target_bytes)[0]


def report(label: str, path: Path, repeat: int) -> None:
    """Best of `repeat` runs each, floor and reader alternating (other load on the box adds noise)."""
    size = path.stat().st_size
    floors, ours, e2e = [], [], []
    for _ in range(repeat):
        floors.append(measure(FLOOR, path))
        ours.append(measure(READER, path))
        e2e.append(measure(END_TO_END, path))
    mb = size / 1e6
    floor_t, floor_c = min(f[0] for f in floors), min(f[1] for f in floors)
    ours_t, ours_c = min(o[0] for o in ours), min(o[1] for o in ours)
    floor_rss, ours_rss = max(f[2] for f in floors), max(o[2] for o in ours)
    print(f"\n{label}: {mb:,.0f} MB uncompressed, {floors[0][3]:,} events -> {ours[0][3]:,} timeline rows")
    print(f"  msgspec floor   : {floor_t:6.2f} s wall {floor_c:6.2f} s CPU  {mb / floor_t:5.0f} MB/s"
          f"  peak RSS {floor_rss / 2**20:6,.0f} MiB")
    print(f"  read_torch_trace: {ours_t:6.2f} s wall {ours_c:6.2f} s CPU  {mb / ours_t:5.0f} MB/s"
          f"  peak RSS {ours_rss / 2**20:6,.0f} MiB ({ours_rss / size:.2f}x file size)")
    print(f"  ratio to floor  : {ours_t / floor_t:.2f}x wall, {ours_c / floor_c:.2f}x CPU")
    e2e_t, e2e_c, e2e_rss = min(e[0] for e in e2e), min(e[1] for e in e2e), max(e[2] for e in e2e)
    print(f"  diagnose (end to end, read+analyse+rules+JSON): {e2e_t:6.2f} s wall {e2e_c:6.2f} s CPU"
          f"  {mb / e2e_t:5.0f} MB/s  peak RSS {e2e_rss / 2**20:6,.0f} MiB ({e2e_rss / size:.2f}x file size)")
    print(f"  end-to-end ratio to floor: {e2e_t / floor_t:.2f}x wall, {e2e_c / floor_c:.2f}x CPU (target <= 3x;"
          f" RSS target <= 1.5x file size)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0, help="size of the replicated trace")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts")
    ap.add_argument("--keep", type=Path, help="build the big trace in DIR and keep it (not committed)")
    ap.add_argument("--source", type=Path, default=CORPUS_TRACE)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_torch_"))
    work = args.keep or tmp
    work.mkdir(parents=True, exist_ok=True)
    try:
        small = work / "corpus.pt.trace.json"
        with gzip.open(args.source, "rb") as src, open(small, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; source {args.source.name}")
        report("(1) corpus trace", small, args.repeat)
        if args.size_gb > 0:
            big = work / "replicated.pt.trace.json"
            if not big.exists():
                copies = replicate(small, big, int(args.size_gb * 1e9))
                print(f"\nbuilt {big} from {copies} shifted copies")
            report(f"(2) replicated {args.size_gb:g} GB trace", big, args.repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
