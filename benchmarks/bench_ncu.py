"""Parse speed and peak memory of the binary Nsight Compute reader on the corpus reports.

Each report is decompressed to a temp dir first; we time only the parse of the plain file, each in
a fresh subprocess so peak RSS belongs to that one parse.  Usage: python benchmarks/bench_ncu.py [DIR]
"""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "ncu"
REPORTS = ("kernels.ncu-rep.gz", "train_step.ncu-rep.gz")

CHILD = r"""
import json, os, resource, sys, time
from diagnoser.ingest.ncu_report import read_ncu_report
path = sys.argv[1]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
rep = read_ncu_report(path)
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": dt, "launches": len(rep.launches),
                  "metrics": sum(len(x.metrics) for x in rep.launches),
                  "peak_rss_mb": peak / 1024, "rss_growth_mb": (peak - base) / 1024}))
"""


def main(corpus: Path = CORPUS, repeats: int = 3) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name in REPORTS:
            src = corpus / name
            if not src.exists():
                print(f"{name}: not found under {corpus}")
                continue
            plain = Path(tmp) / name[:-3]
            with gzip.open(src) as a, open(plain, "wb") as b:
                shutil.copyfileobj(a, b)
            size_mb = plain.stat().st_size / 1e6
            runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, str(plain)], check=True,
                                              capture_output=True, text=True).stdout) for _ in range(repeats)]
            best = min(runs, key=lambda r: r["seconds"])
            print(f"{name[:-3]:24s} {size_mb:6.1f} MB  {best['launches']:4d} launches  "
                  f"{best['metrics']:7d} metrics  {size_mb / best['seconds']:7.1f} MB/s  "
                  f"peak RSS {max(r['peak_rss_mb'] for r in runs):6.1f} MB "
                  f"(+{max(r['rss_growth_mb'] for r in runs):.1f} MB while parsing)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS))
