"""Benchmark the Nsight Systems reader (and the whole diagnosis) on a 10M-kernel SQLite export.

The export is built from a real corpus export by replicating its activity rows with SQL
INSERT ... SELECT: kernels, CUDA API calls, copies, sets and NVTX ranges, each copy shifted past
the previous one in time, with new correlation ids (and step_N renumbered). Each measurement runs
in a fresh Python process; peak RSS is that process's own (/proc/self/status VmHWM).

    python benchmarks/bench_nsys.py [--kernels 10000000] [--repeat 1] [--keep DIR] [--no-diagnose]

Target: read and diagnose 10M kernels in under 30 s.
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "fixtures" / "nsys" / "launch_bound.sqlite.gz"
ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS")
NVTX_DOMAIN_CREATE = 75

PEAK_RSS = """
def peak_rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
"""

# The reader's worker processes: sampled every 50 ms, the peak of their summed RSS.
CHILDREN_RSS = """
import os, threading
children_peak = [0]
def sample_children(stop):
    me = str(os.getpid())
    while not stop.wait(0.05):
        total = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                status = open(f"/proc/{pid}/status").read()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if fields.get("PPid", "").strip() == me and "VmRSS" in fields:
                total += int(fields["VmRSS"].split()[0]) * 1024
        children_peak[0] = max(children_peak[0], total)
stop = threading.Event()
threading.Thread(target=sample_children, args=(stop,), daemon=True).start()
"""

READER = PEAK_RSS + CHILDREN_RSS + """
import sys, time
from diagnoser.ingest.nsys_sqlite import read_nsys_sqlite
t = time.perf_counter()
tl = read_nsys_sqlite(sys.argv[1])
dt = time.perf_counter() - t
stop.set()
print(dt, peak_rss(), len(tl.gpu), len(tl.host), len(tl.ranges), children_peak[0])
"""

DIAGNOSIS = PEAK_RSS + """
import sys, time
from diagnoser.pipeline import diagnose
t = time.perf_counter()
report = diagnose([sys.argv[1]])
dt = time.perf_counter() - t
print(dt, peak_rss(), len(report.findings), len(report.not_evaluated), 0)
import resource
me, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"# CPU: client {me.ru_utime + me.ru_stime:.1f} s + reader workers {workers.ru_utime + workers.ru_stime:.1f} s")
for f in report.findings[:5]:
    print("#", getattr(f, "rule", ""), getattr(f, "severity", ""), getattr(f, "category", ""))
"""


def measure(script: str, path: Path) -> tuple[float, int, list[int], list[str]]:
    """Run script on path in a fresh interpreter; (seconds, peak RSS bytes, counts, notes)."""
    done = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO, check=False,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    lines = done.stdout.splitlines()
    first = lines[0].split()
    return float(first[0]), int(first[1]), [int(x) for x in first[2:]], lines[1:]


def replicate(src: Path, dst: Path, kernels: int) -> int:
    """Write dst: src with its activity rows copied until it holds about `kernels` kernels."""
    with gzip.open(src, "rb") as f_in, open(dst, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out, 4 << 20)
    conn = sqlite3.connect(dst)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    tables = [t for t in ACTIVITY if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()]
    n = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    lo = min(conn.execute(f"SELECT min(start) FROM {t}").fetchone()[0] for t in tables)
    hi = max(conn.execute(f"SELECT max(end) FROM {t}").fetchone()[0] or 0 for t in tables)
    span = hi - lo + 1_000_000  # 1 ms between copies
    corr = 1 + max(conn.execute(f"SELECT coalesce(max(correlationId), 0) FROM {t}").fetchone()[0]
                   for t in tables if t.startswith("CUPTI"))
    copies = max(1, -(-kernels // n))
    for t in tables:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({t})")]
        shifted = {"start": f"start + r.i * {span}", "end": f"end + r.i * {span}",
                   "correlationId": f"correlationId + r.i * {corr}"}
        where = ""
        if t == "NVTX_EVENTS":
            shifted["text"] = ("CASE WHEN text GLOB 'step_[0-9]*' THEN 'step_' || "
                               "(CAST(substr(text, 6) AS INTEGER) + r.i * 10) ELSE text END")
            where = f"WHERE eventType != {NVTX_DOMAIN_CREATE}"
        select = ", ".join(shifted.get(c, c) for c in cols)
        conn.execute(f"CREATE TEMP TABLE seed AS SELECT * FROM {t} {where}")
        # CROSS JOIN keeps the copy loop outermost, so rows stay in time order as in a real export
        conn.execute(f"WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < {copies - 1}) "
                     f"INSERT INTO {t} ({', '.join(cols)}) SELECT {select} FROM r CROSS JOIN seed")
        conn.execute("DROP TABLE seed")
        conn.commit()
    conn.close()
    return copies


def count_rows(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ACTIVITY}
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; the best counts")
    ap.add_argument("--keep", type=Path, help="build the export in DIR and keep it for later runs")
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--no-diagnose", action="store_true", help="time the reader only")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_nsys_"))
    work = args.keep or tmp
    work.mkdir(parents=True, exist_ok=True)
    try:
        big = work / f"replicated_{args.kernels}.sqlite"
        print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, "
              f"{os.cpu_count()} cores; source {args.source.name}")
        if not big.exists():
            t = time.perf_counter()
            copies = replicate(args.source, big, args.kernels)
            print(f"built {big.name} from {copies} shifted copies in {time.perf_counter() - t:.1f} s")
        rows = count_rows(big)
        print(f"{big.stat().st_size / 1e9:.2f} GB; " + ", ".join(
            f"{t.removeprefix('CUPTI_ACTIVITY_KIND_').lower()} {n:,}" for t, n in rows.items()))
        total = sum(rows.values())
        best = min((measure(READER, big) for _ in range(args.repeat)), key=lambda m: m[0])
        dt, rss, counts, _ = best
        print(f"read_nsys_sqlite: {dt:6.2f} s  {total / dt / 1e6:5.2f} M rows/s  "
              f"peak RSS {rss / 2**20:7,.0f} MiB + workers {counts[3] / 2**20:,.0f} MiB  "
              f"(gpu {counts[0]:,}, host {counts[1]:,}, ranges {counts[2]:,})")
        if args.no_diagnose:
            return
        try:
            dt, rss, counts, notes = min((measure(DIAGNOSIS, big) for _ in range(args.repeat)),
                                         key=lambda m: m[0])
        except RuntimeError as e:
            print(f"diagnose: not measured ({e})")
            return
        verdict = "meets" if dt < 30 else "MISSES"
        print(f"diagnose        : {dt:6.2f} s  {total / dt / 1e6:5.2f} M rows/s  "
              f"peak RSS {rss / 2**20:7,.0f} MiB  ({counts[0]} findings; {verdict} the 30 s target)")
        for line in notes:
            print("  " + line.lstrip("# "))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
