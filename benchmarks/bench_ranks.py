"""Scale benchmark for many-rank runs (issue 15) on SYNTHETIC ranks.

The runs are synthetic: 8, 64 and 256 ranks made by replicating the two REAL ranks of the H200 DDP
run ddp_straggler (fixtures/torch) with per-rank jitter (timeline stretched by 1 +- 2%, shifted up
to 1 ms) and one injected straggler (a replica of the real straggling rank) at rank N*5//8; see
benchmarks/synthetic_ranks.py. Each run is diagnosed end to end (`diagnose DIR`: discovery, per-rank
measure, cross-rank analysis, rules) three ways, each in a fresh process:
  sequential   --jobs 1: one trace at a time in the client
  pool         --jobs W: W local worker processes
  dask         a dask.distributed.LocalCluster of W worker processes (1 thread each) that this
               benchmark starts itself (start-up time printed apart, not in the timing)
Printed per run and mode: wall time, the part of it after the per-rank work (cross-rank analysis and
rules, in the client), ranks/s and MB/s (compressed input), wall seconds per rank per worker, CPU
seconds per rank (summed over the per-rank tasks: what the work costs whatever else the machine
runs), the client's own CPU seconds (with the per-rank work only in the sequential mode), the peak
RSS of the client process and of each worker process, and whether the injected straggler came first.

    python benchmarks/bench_ranks.py                       # 8, 64, 256 ranks, 2 workers

Measured 2026-12-01 on the 2-core development machine shared with three other sessions (load
average 7-9, so wall times mostly measure the neighbours), full-size replicas (2 MB per rank):
CPU s per rank 0.17-0.18 locally and 0.24-0.25 on Dask at 8, 64 and 256 ranks alike (linear in
ranks); the cross-rank part 0.1-0.6 s at 8-64 ranks and 1.8-2.6 s at 256; client peak RSS with the
pool 78 / 84 / 104 MB, on Dask 104 / 111 / 132 MB (the summaries: ~0.1 MB per rank); worker peak RSS
126-127 MB (pool) and 173-205 MB (Dask) at every scale; the injected straggler first every time.
    python benchmarks/bench_ranks.py --ranks 8,64 --workers 4 --small
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODES = ("sequential", "pool", "dask")


def straggler_of(world: int) -> int:
    return world * 5 // 8


def child(mode: str, run_dir: str, workers: int) -> dict:
    """One diagnosis in this (fresh) process; returns the figures as a dict."""
    import diagnoser.distributed as dist
    from diagnoser.pipeline import diagnose

    outcomes, measure_s = [], []
    original = dist.measure_traces

    def recording(*args, **kwargs):
        t = time.perf_counter()
        out = original(*args, **kwargs)
        measure_s.append(time.perf_counter() - t)
        outcomes.extend(out)
        return out

    dist.measure_traces = recording  # to read each task's worker and its peak RSS
    cluster, startup = None, 0.0
    how = {"sequential": {"jobs": 1}, "pool": {"jobs": workers}}.get(mode)
    if mode == "dask":
        import logging

        from dask.distributed import LocalCluster
        t = time.perf_counter()
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
        startup = time.perf_counter() - t
        how = {"scheduler": cluster.scheduler_address}
    try:
        t = time.perf_counter()
        with dist.executing(**how):
            report = diagnose([run_dir])
        wall = time.perf_counter() - t
    finally:
        if cluster is not None:
            cluster.close()
    per_worker: dict = {}
    for o in outcomes:
        per_worker[o.worker] = max(per_worker.get(o.worker, 0), o.peak_rss_kb)
    first = report.findings[0] if report.findings else None
    return {
        "mode": mode, "ranks": len(outcomes), "failed": sum(o.problem is not None for o in outcomes),
        "mb": sum(o.bytes for o in outcomes) / 1e6, "wall_s": wall, "startup_s": startup,
        "cross_s": wall - sum(measure_s),
        "cpu_per_rank_s": sum(o.cpu_seconds for o in outcomes) / max(len(outcomes), 1),
        "client_cpu_s": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
        "client_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_mb": sorted(v / 1024 for v in per_worker.values()),
        "first": f"{first.rule} {first.subject.name if first.subject else ''}" if first else "",
    }


def make_runs(root: Path, scales: list[int], small: bool) -> dict[int, Path]:
    from synthetic_ranks import write_run
    runs = {}
    for n in scales:
        d = root / f"synthetic_{n}_ranks"
        marker = d / ".synthetic_run"  # hidden: rank discovery skips it
        spec = json.dumps({"world": n, "straggler": straggler_of(n), "seed": n, "small": small})
        if marker.exists() and marker.read_text() == spec:
            print(f"reusing SYNTHETIC run of {n} ranks in {d}", flush=True)
            runs[n] = d
            continue
        t = time.perf_counter()
        write_run(d, world=n, straggler_rank=straggler_of(n), seed=n, small=small)
        marker.write_text(spec)
        print(f"made SYNTHETIC run of {n} ranks in {time.perf_counter() - t:.1f} s: "
              f"{sum(f.stat().st_size for f in d.iterdir()) / 1e6:.0f} MB in {d}", flush=True)
        runs[n] = d
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="8,64,256")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--small", action="store_true", help="replicate shrunk traces (3 steps, no CPU ops)")
    ap.add_argument("--dir", help="keep the synthetic runs here (default: a temporary folder, removed)")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "RUN_DIR", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]))))
        return

    scales = [int(x) for x in args.ranks.split(",")]
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="diagnoser-bench-ranks-"))
    print(f"SYNTHETIC ranks (replicas of the real ddp_straggler ranks with jitter, one injected straggler); "
          f"{os.cpu_count()} CPUs on this machine (load average {os.getloadavg()[0]:.1f} at start), "
          f"{args.workers} workers. cross s: the time after the per-rank work (cross-rank analysis, rules)",
          flush=True)
    try:
        runs = make_runs(root, scales, args.small)
        head = (f"{'ranks':>5} {'mode':<10} {'wall s':>7} {'cross s':>7} {'ranks/s':>8} {'MB/s':>6} {'s/rank/worker':>13} "
                f"{'cpu s/rank':>10} {'client cpu s':>12} {'client MB':>9}  worker peak MB            first finding")
        print(head)
        for n in scales:
            for mode in args.modes.split(","):
                out = subprocess.run([sys.executable, __file__, "--child", mode, str(runs[n]), str(args.workers)],
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"{n:>5} {mode:<10} FAILED: {out.stderr.strip().splitlines()[-1:]}", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                w = 1 if mode == "sequential" else args.workers
                workers = ", ".join(f"{m:.0f}" for m in r["worker_peak_mb"]) if mode != "sequential" else "(in client)"
                ok = "" if r["first"].endswith(f"rank {straggler_of(n)}") else "  <- straggler NOT first"
                extra = f"  (cluster start {r['startup_s']:.1f} s)" if mode == "dask" else ""
                print(f"{n:>5} {mode:<10} {r['wall_s']:>7.2f} {r['cross_s']:>7.2f} {r['ranks'] / r['wall_s']:>8.1f} {r['mb'] / r['wall_s']:>6.1f} "
                      f"{r['wall_s'] * w / max(r['ranks'], 1):>13.3f} {r['cpu_per_rank_s']:>10.3f} {r['client_cpu_s']:>12.1f} "
                      f"{r['client_peak_mb']:>9.0f}  {workers:<24} "
                      f"{r['first']}{ok}{extra}" + (f"  [{r['failed']} ranks failed]" if r["failed"] else ""), flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
