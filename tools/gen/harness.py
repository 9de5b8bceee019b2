"""The harness the workload scripts of tools/gen share: the device and toy sizes, the iteration
session a workload runs, torch.profiler's schedule, the CUDA profiler capture window that Nsight
Systems records, the command line and the per-workload loop.

Each script stays runnable on its own (`python3 tools/gen/X.py ...`): this module sits beside it;
a copy of a script under `.gen/NAME/` run from the repo root finds it in the checkout's tools/gen
(the scripts append that folder to sys.path). torch is imported only where it is used, so a script
whose workloads use CuPy alone needs no torch.

GEN_DEVICE=cpu runs the workloads at toy sizes on a CPU, only to check a script's logic.
"""
import argparse
import contextlib
import os
import sys
import traceback

DEV = os.environ.get("GEN_DEVICE", "cuda")  # "cpu" only for a local dry run of the script logic
CUDA = DEV == "cuda"
WARM = 3  # iterations before the profiled ones (schedule wait=1 + warmup=2; the nsys capture starts after them)


def size(full, small):
    """Full size on the GPU; a tiny size for a local CPU dry run (GEN_DEVICE=cpu)."""
    return full if CUDA else small


def sync():
    if CUDA:
        import torch
        torch.cuda.synchronize()


class Session:
    """What a workload sees of the driver: how many iterations to run, what to call after each, and
    (for a workload that marks its own profiled part) the window to run that part in."""

    def __init__(self, iters, tick=lambda: None, window=contextlib.nullcontext):
        self.iters, self.tick, self.window = iters, tick, window


def workloads(namespace: dict, prefix: str = "w_") -> dict:
    """A script's workloads: its functions named `w_NAME` (NAME keeps the rest of `prefix`, e.g. `t_...`)."""
    return {n[2:]: f for n, f in list(namespace.items()) if n.startswith(prefix) and callable(f)}


def activities():
    from torch.profiler import ProfilerActivity
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])


def torch_profiled(fn, steps, path, warm=WARM, **options):
    """fn(Session) under torch.profiler: 1 iteration skipped, warm-1 warming up, `steps` recorded; the
    trace written to `path`. `options`: profile()'s record_shapes, profile_memory, with_stack."""
    from torch.profiler import profile, schedule
    with profile(activities=activities(), schedule=schedule(wait=1, warmup=warm - 1, active=steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path), **options) as prof:
        fn(Session(steps + warm, tick=prof.step))


def torch_profiled_whole(fn, session, path, **options):
    """fn(session) profiled whole (setup included, no schedule), the trace written to `path`."""
    from torch.profiler import profile
    with profile(activities=activities(), **options) as prof:
        fn(session)
    prof.export_chrome_trace(path)


def cuda_profiler(on):
    """Start or stop the capture Nsight Systems records (--capture-range=cudaProfilerApi), the GPU idle first."""
    if CUDA:
        sync()
        _torch_profiler("start" if on else "stop")()


def capture_ticks(steps, warm=WARM, start=None, stop=None, synchronize=sync):
    """A session tick that starts the capture after `warm` iterations and stops it `steps` later, the GPU
    idle first (`start`/`stop`: another library's profiler calls, e.g. CuPy's; by default torch's)."""
    done = [0]

    def tick():
        done[0] += 1
        if CUDA and done[0] in (warm, steps + warm):
            synchronize()
            if done[0] == warm:
                (start or _torch_profiler("start"))()
            else:
                (stop or _torch_profiler("stop"))()
    return tick


def _torch_profiler(what):
    import torch
    return getattr(torch.cuda.profiler, what)


def arguments(workload_names, default_steps, alone=frozenset(), many=True):
    """The command line every workload script takes: workload name(s), --mode plain|torch (plain: under
    Nsight Systems, capture by cudaProfilerStart/Stop), --out, --steps. `alone`: workloads that need a
    process of their own (fresh CUDA state or environment)."""
    p = argparse.ArgumentParser()
    if many:
        p.add_argument("names", nargs="+", choices=sorted(workload_names))
    else:
        p.add_argument("name", choices=sorted(workload_names))
    p.add_argument("--mode", default="plain", choices=["plain", "torch"])
    p.add_argument("--out", default=".")
    p.add_argument("--steps", type=int, default=default_steps)
    a = p.parse_args()
    if many and len(a.names) > 1 and set(alone) & set(a.names):
        p.error(f"run {sorted(set(alone) & set(a.names))} in a process of its own")
    os.makedirs(a.out, exist_ok=True)
    return a


def run_each(a, run_one, before=lambda name: None, after=lambda name: None):
    """Every named workload in turn; one that fails is reported and the others still run; exit 1 if any failed."""
    failed = 0
    for name in a.names:
        before(name)
        print(f"-- {name} ({a.mode})", flush=True)
        try:
            run_one(name)
        except Exception:  # keep going: one failed workload must not cost the others
            failed += 1
            traceback.print_exc()
        after(name)
    sys.exit(1 if failed else 0)


def cap_memory(gib):
    """Cap this process's CUDA memory at `gib` GiB (the caching allocator raises OOM above it); returns
    what was set, for the run's log."""
    import torch
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(gib * 2**30 / total)
    return dict(cap_gib=gib, total_memory_bytes=total, fraction=gib * 2**30 / total)


def scenario_arguments():
    """The command line of the OOM scripts: one scenario (run here) or 'all' (each in a process of its own)."""
    p = argparse.ArgumentParser()
    p.add_argument("name", help="a scenario, or 'all'")
    p.add_argument("--out", default=".")
    p.add_argument("--timeout", type=int, default=90)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    return a


def each_in_own_process(script, names, a, prefix, tail_chars):
    """Run `script NAME --out OUT` once per name, one process each: a failure or a leftover memory cap cannot
    spoil the others. Each one's output goes to OUT/PREFIXNAME.log; its tail is printed."""
    import subprocess
    import time

    import torch
    print(torch.__version__, torch.cuda.get_device_name(0), flush=True)
    for name in names:
        t0 = time.time()
        log = os.path.join(a.out, f"{prefix}{name}.log")
        try:
            with open(log, "w") as f:
                rc = subprocess.run([sys.executable, script, name, "--out", a.out], stdout=f,
                                    stderr=subprocess.STDOUT, timeout=a.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        with open(log) as f:
            tail = f.read()[-tail_chars:]
        print(f"== {name}: rc {rc}, {time.time() - t0:.0f} s\n{tail}", flush=True)


def check_source(src):
    """CPU-side check of a CUDA source: compile it for sm_90 with nvcc and show registers / spills per kernel."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cu")
        with open(path, "w") as f:
            f.write(src)
        r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", os.path.join(d, "k.cubin"), path],
                           capture_output=True, text=True)
        print(r.stdout + r.stderr)
        return r.returncode


def kernel_arguments(groups, src):
    """The command line of the kernel scripts (run under `ncu --profile-from-start off`): --group (the first
    is the default), --only, --scale, --device; --check-source compiles `src` and exits."""
    p = argparse.ArgumentParser()
    p.add_argument("--group", choices=groups, default=groups[0])
    p.add_argument("--only", default="")
    p.add_argument("--scale", type=int, default=1, help="divide problem sizes (toy runs)")
    p.add_argument("--device", default=os.environ.get("GEN_DEVICE", "cuda"))
    p.add_argument("--check-source", action="store_true")
    a = p.parse_args()
    if a.check_source:
        sys.exit(check_source(src))
    return a


def capture_jobs(jobs, sync, a, timed=False):
    """Each job (or those --only names) once to warm up, then, on the GPU, each once more inside the
    cudaProfilerStart/Stop capture under an NVTX range of its name (`timed`: first timed alone, for labels)."""
    only = [s for s in a.only.split(",") if s] or list(jobs)
    for name in only:  # warm up: module load, allocator, cuDNN heuristics, cub temporary storage
        jobs[name]()
    sync()
    if a.device != "cuda":
        print("cpu dry run ok", only)
        return
    import time

    import torch
    for name in only if timed else ():  # plain timing (not under the profiler's replay) for the labels
        sync()
        t0 = time.perf_counter()
        jobs[name]()
        sync()
        print(f"time {name} {(time.perf_counter() - t0) * 1e3:.3f} ms", flush=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name in only:
        with torch.cuda.nvtx.range(name):
            jobs[name]()
        sync()
    torch.cuda.profiler.stop()
    print("done", only)
