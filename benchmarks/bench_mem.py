"""Time and peak RSS of diagnosing the corpus leak snapshot (29 MB unpacked, ~150k trace entries).

Targets (2-core machine): < 5 s and < 400 MB peak RSS, end to end: read + analyse (+ rules with
--rules). Run: `python benchmarks/bench_mem.py [SNAPSHOT] [--rules]`. RSS is the whole process's peak
(interpreter and imports included), measured by the kernel (getrusage ru_maxrss).
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO.parent / "shared" / "corpus" / "mem" / "leak.snapshot.pickle.gz"
TIME_TARGET_S, RSS_TARGET_MB = 5.0, 400.0


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    args = [a for a in argv if not a.startswith("--")]
    path = Path(args[0]) if args else DEFAULT
    if not path.exists():
        print(f"skip: {path} not found", file=sys.stderr)
        return 0
    t0 = time.perf_counter()
    if "--rules" in argv:
        from diagnoser.pipeline import diagnose
        report = diagnose([str(path)])
        parts = "read + analyse + rules"
        top = next((f for f in report.findings if f.severity in ("critical", "warning")), None)
        summary = f"first finding: {top.category if top else 'none'}"
    else:
        from diagnoser.memory.analysis import analyze_snapshot
        from diagnoser.ingest.mem_snapshot import load_snapshot
        snap = load_snapshot(path)
        t_read = time.perf_counter() - t0
        result = analyze_snapshot(snap)
        t_analyse = time.perf_counter() - t0 - t_read
        summary = f"{len(snap.traces.get(0, ()))} trace entries, {len(result.facts)} facts"
        parts = f"read {t_read:.2f} s, analyse {t_analyse:.2f} s"
    total = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB
    print(f"{path.name}: {summary}")
    print(f"time {total:.2f} s ({parts}; target < {TIME_TARGET_S:.0f} s)")
    print(f"peak RSS {rss_mb:.0f} MB (target < {RSS_TARGET_MB:.0f} MB)")
    return 0 if total < TIME_TARGET_S and rss_mb < RSS_TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
