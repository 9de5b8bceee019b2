"""How each stage scales: a real trace's events doubled from ~110k to ~3.6M, CPU time per stage.

The trace is fixtures/torch/host_sync.pt.trace.json.gz (a real H200 PyTorch trace, 55,643 events)
copied 2, 4, ..., 64 times, each copy shifted past the previous one in time with new correlation and
flow ids (benchmarks/bench_torch_trace.py's replication). Each size runs in a fresh interpreter; the
stages are timed by wrapping the functions the pipeline calls (inclusive CPU time, time.process_time,
so other load on the machine does not count): read, every analysis of timeline/measure.py, the
cross-rank analysis, the rules, and the render (Markdown and JSON). Printed: the seconds per stage and
size, and the ratio per doubling: its mean from the first size where the stage takes 10 ms (the
geometric mean over the doublings after it) and, in brackets, the worst single doubling (noisy on a
shared machine: other load, caches). An O(n log n) stage stays near 2x; the target is <= 2.2x. Stages
under 50 ms at the largest size are listed, not judged.

    python benchmarks/bench_scaling.py [--max-copies 64] [--repeat 1] [--keep DIR]
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_torch_trace import replicate_raw  # the same event replication (run from benchmarks/: its folder is on sys.path)

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "fixtures" / "torch" / "host_sync.pt.trace.json.gz"
TARGET_RATIO = 2.2
JUDGED_S = 0.05  # judged when the stage takes this long at the largest size
SPAN_FROM_S = 0.01  # the mean ratio is taken from the first size where it takes this long

CHILD = r"""
import functools, json, sys, time
from collections import defaultdict
import diagnoser.families.reading as reading
import diagnoser.pipeline as pipeline
import diagnoser.timeline.measure as measure
import diagnoser.timeline.rank_scale as rank_scale
from diagnoser.report.render import render_report

spent = defaultdict(float)

def timed(module, name, label=None):
    fn = getattr(module, name)
    @functools.wraps(fn)
    def wrapper(*a, **k):
        c = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            spent[label or name] += time.process_time() - c
    setattr(module, name, wrapper)

timed(reading, "read_with", "read")  # every family reads through it
timed(measure, "measure_timeline", "measure (all analyses)")
for name in ("find_setup", "find_steps", "phase_ms", "host_activity", "_utilization", "idle_gaps", "classify_gaps",
             "device_busy", "per_step_breakdown", "kernel_table", "category_times", "step_strip", "top_kernels",
             "op_distribution", "ncu_window", "launch_stats", "graph_kernel_pct", "sync_stats", "memcpy_stats",
             "alloc_stats", "sync_calls", "tensor_core_stats", "attention_stats", "memory_bound_stats",
             "optimizer_stats", "is_training", "kv_cache_stats", "timeline_identity"):
    if hasattr(measure, name):
        timed(measure, name)
timed(rank_scale, "ranks_analysis", "cross-rank analysis")
timed(pipeline, "evaluate", "rules")
c = time.process_time()
report = pipeline.diagnose([sys.argv[1]])
total = time.process_time() - c
c = time.process_time()
render_report(report, "md", top=10)
render_report(report, "json")
spent["render (md + json)"] = time.process_time() - c
spent["total (diagnose + render)"] = total + spent["render (md + json)"]
print(json.dumps(spent))
"""


def replicate(src: Path, dst: Path, copies: int) -> int:
    """dst: src's events `copies` times, each copy shifted past the last; returns the event count."""
    raw = gzip.decompress(src.read_bytes()) if src.name.endswith(".gz") else src.read_bytes()
    return replicate_raw(raw, dst, copies=copies)[1]


def measure(path: Path, repeat: int) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", CHILD, str(path)], cwd=REPO, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        for k, v in json.loads(out.strip().splitlines()[-1]).items():
            best[k] = min(best.get(k, v), v)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-copies", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1, help="runs per size; the least CPU time counts")
    ap.add_argument("--keep", type=Path, help="write the traces in DIR and keep them for later runs")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_scaling_"))
    work.mkdir(parents=True, exist_ok=True)
    sizes, results = [], []
    try:
        copies = 2
        while copies <= args.max_copies:
            path = work / f"host_sync_x{copies}.pt.trace.json"
            events = replicate(SOURCE, path, copies) if not path.exists() else None
            if events is None:
                events = copies * len(json.loads(gzip.decompress(SOURCE.read_bytes()))["traceEvents"])
            results.append(measure(path, args.repeat))
            sizes.append(events)
            print(f"{events:>9,} events: total {results[-1]['total (diagnose + render)']:.2f} s CPU", flush=True)
            if not args.keep:
                path.unlink()
            copies *= 2
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\n| stage | " + " | ".join(f"{n / 1e3:,.0f}k" for n in sizes) + " | ratio per doubling: mean (worst) |")
    print("|---|" + "---|" * len(sizes) + "---|")
    worst_mean = 0.0
    for stage in sorted(results[-1], key=lambda s: -results[-1].get(s, 0)):
        t = [r.get(stage, 0.0) for r in results]
        timed = [i for i, x in enumerate(t) if x >= SPAN_FROM_S]  # sizes where the stage takes long enough to time
        verdict = "(too small to judge)"
        if len(timed) >= 2 and timed[-1] == len(t) - 1 and t[-1] >= JUDGED_S:
            first = timed[0]
            mean = (t[-1] / t[first]) ** (1 / (len(t) - 1 - first))
            worst = max(b / a for a, b in zip(t[first:], t[first + 1:]))
            verdict = f"{mean:.2f}x ({worst:.2f}x)" + ("" if mean <= TARGET_RATIO else " over")
            if stage != "total (diagnose + render)":
                worst_mean = max(worst_mean, mean)
        print(f"| {stage} | " + " | ".join(f"{x:.3f}" for x in t) + f" | {verdict} |")
    print(f"\nthe steepest stage: {worst_mean:.2f}x per doubling on average from where it takes {SPAN_FROM_S * 1e3:.0f} ms "
          f"(target <= {TARGET_RATIO}x; single doublings are noisier: other load, caches)")
    return 0 if worst_mean <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
