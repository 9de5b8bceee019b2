"""Where the 10M-kernel export's diagnosis spends CPU and memory: CPU seconds per stage (the read,
each timeline analysis, inclusive) and the RSS after it, with the peak and the stage it was in.

Run on an export `bench_nsys.py --keep DIR` built (it does not build one):

    python benchmarks/bench_nsys_stages.py /tmp/nsys10M/replicated_10000000.sqlite

To compare with an older commit in the same run, unpack it (`git archive COMMIT | tar -x -C
/tmp/base`) and run this script with PYTHONPATH=/tmp/base as well. CPU is the client's
(time.process_time); the reader's worker processes are printed apart (their rusage).
"""
from __future__ import annotations

import functools
import resource
import sys
import threading
import time
from collections import defaultdict

STAGES = ("find_setup", "find_steps", "host_activity", "device_busy", "idle_gaps", "per_step_breakdown",
          "_utilization", "kernel_table", "step_strip", "top_kernels", "op_distribution", "launch_stats",
          "attention_stats")


def rss_mib(field: str = "VmRSS") -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


def main(path: str) -> None:
    import diagnoser.families.reading as reading
    import diagnoser.pipeline as pipeline
    import diagnoser.timeline.measure as measure

    stack, peak, cpu, after = ["-"], [0, ""], defaultdict(float), {}

    def sample() -> None:
        while True:
            r = rss_mib()
            if r > peak[0]:
                peak[0], peak[1] = r, "/".join(stack[1:])
            time.sleep(0.02)

    def timed(module, name: str, label: str | None = None) -> None:
        fn = getattr(module, name)

        @functools.wraps(fn)
        def wrapper(*a, **k):
            stack.append(label or name)
            c = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                cpu[label or name] += time.process_time() - c
                after[label or name] = rss_mib()
                stack.pop()
        setattr(module, name, wrapper)

    threading.Thread(target=sample, daemon=True).start()
    timed(reading, "read_with", "read")  # every family reads through it
    timed(measure, "measure_timeline", "all analyses")
    for name in STAGES:
        if hasattr(measure, name):
            timed(measure, name)
    c = time.process_time()
    pipeline.diagnose([path])
    total = time.process_time() - c
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"diagnose: client {total:.2f} s CPU + reader workers {workers.ru_utime + workers.ru_stime:.2f} s CPU; "
          f"peak RSS {max(peak[0], rss_mib('VmHWM')):,} MiB (sampled peak in {peak[1] or '-'})")
    for name, s in sorted(cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {s:7.2f} s  {name:<20} RSS after {after[name]:,} MiB")


if __name__ == "__main__":
    main(sys.argv[1])
