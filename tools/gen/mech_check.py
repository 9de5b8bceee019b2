"""Read a real trace directly (not through diagnoser) and print the numbers a label rests on.

python3 tools/gen/mech_check.py FILE [FILE ...]     (.pt.trace.json[.gz] or nsys .sqlite[.gz])

For the analysed window (torch: the ProfilerStep ranges after the first; none: the whole trace;
nsys: the whole capture) it prints: GPU busy %, kernels and the top kernels, then the GPU idle time
split by what the host thread that launches the work was doing during each idle gap, in this order:
  alloc      inside cudaMalloc / cudaFree / cudaMallocHost / cudaHostAlloc (or HIP's)
  sync       inside a blocking call (stream/device/event synchronize, synchronous cudaMemcpy)
  launch     inside a launch or async-copy API call
  loader     inside a DataLoader __next__ annotation (torch)
  ops        inside CPU ops without CUDA calls (torch aten ops / record_function)
  after_sync the rest of a gap that began within 50 us of a blocking call's return
  none       nothing recorded (pure Python)
and the count of gaps that end with a host-to-device copy. Also API counts per window.
It is a verification aid for tools/gen workloads; diagnoser does not import it.
"""
import bisect
import collections
import gzip
import json
import os
import shutil
import sqlite3
import sys
import tempfile

ALLOC = ("cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc", "cudaMallocAsync",
         "cudaFreeAsync", "cuMemAlloc", "cuMemFree", "hipMalloc", "hipFree")
SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy_", "cudaMemcpy ",
        "cudaStreamWaitEvent_block")
LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
          "cudaGraphLaunch", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel")


def api_class(name):
    base = name.split("_v")[0]
    if base.startswith(ALLOC):
        return "alloc"
    if base in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                "cudaMemcpy2D"):
        return "sync"
    if base.startswith(LAUNCH):
        return "launch"
    return "other_api"


def opener(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def clip(intervals, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def covered(intervals_sorted, lo, hi):
    """Length of [lo, hi) covered by a sorted, disjoint interval list."""
    if not intervals_sorted:
        return 0.0
    i = max(bisect.bisect_right([s for s, _ in intervals_sorted], lo) - 1, 0)
    tot = 0.0
    while i < len(intervals_sorted) and intervals_sorted[i][0] < hi:
        s, e = intervals_sorted[i]
        tot += max(0.0, min(e, hi) - max(s, lo))
        i += 1
    return tot


def uncovered(intervals_sorted, lo, hi):
    """The parts of [lo, hi) outside a sorted, disjoint interval list."""
    out, cur = [], lo
    i = max(bisect.bisect_right([s for s, _ in intervals_sorted], lo) - 1, 0)
    while i < len(intervals_sorted) and intervals_sorted[i][0] < hi:
        s, e = intervals_sorted[i]
        if e > cur:
            if s > cur:
                out.append((cur, s))
            cur = max(cur, e)
        i += 1
    if cur < hi:
        out.append((cur, hi))
    return out


def report(name, gpu, host, window, htod_starts, notes, kernels):
    """gpu: [(s,e,name,kind)], host: {class: [(s,e)]} (us), window (lo, hi)."""
    lo, hi = window
    span = hi - lo
    busy = union([(s, e) for s, e, _, _ in gpu])
    busy_w = clip(busy, lo, hi)
    busy_t = sum(e - s for s, e in busy_w)
    gaps = []
    prev = lo
    for s, e in busy_w:
        if s > prev:
            gaps.append((prev, s))
        prev = max(prev, e)
    if hi > prev:
        gaps.append((prev, hi))
    cls = {k: union(v) for k, v in host.items()}
    sync_ends = sorted(e for _, e in host.get("sync", []))
    split = collections.Counter()
    ends_htod = 0
    htod_set = sorted(htod_starts)
    for gs, ge in gaps:
        rest = [(gs, ge)]
        for k in ("alloc", "sync", "launch", "loader", "ops"):
            iv = cls.get(k, [])
            new = []
            for rs, re_ in rest:
                split[k] += covered(iv, rs, re_)
                new += uncovered(iv, rs, re_)
            rest = new
        left = sum(e - s for s, e in rest)
        j = bisect.bisect_right(sync_ends, gs + 50) - 1
        if j >= 0 and sync_ends[j] >= gs - 50:
            split["after_sync"] += left
        else:
            split["none"] += left
        k = bisect.bisect_left(htod_set, ge - 1)
        if k < len(htod_set) and abs(htod_set[k] - ge) < 2:
            ends_htod += 1
    print(f"## {name}")
    for n in notes:
        print(f"   note: {n}")
    print(f"   window {span / 1000:.2f} ms, GPU busy {100 * busy_t / span:.1f}%, idle gaps {len(gaps)}, "
          f"{len([g for g in gaps if g[1] - g[0] >= 1000])} over 1 ms, ends with HtoD copy: {ends_htod}")
    idle = span - busy_t
    print("   idle split (% of window): " + ", ".join(f"{k} {100 * v / span:.1f}" for k, v in split.most_common()))
    kin = collections.Counter()
    for s, e, n, kind in gpu:
        if e > lo and s < hi:
            kin[(kind, n[:90])] += min(e, hi) - max(s, lo)
    print(f"   GPU ops in window: {sum(1 for s, e, n, k in gpu if e > lo and s < hi)}; top by time:")
    for (kind, n), t in kin.most_common(6):
        print(f"     {100 * t / max(busy_t, 1):5.1f}% {kind:7s} {n}")
    for k, v in kernels.items():
        print(f"   {k}: {v}")


def torch_trace(path):
    with opener(path) as f:
        t = json.load(f)
    ev = t["traceEvents"] if isinstance(t, dict) else t
    gpu, htod = [], []
    steps = []
    host = collections.defaultdict(list)
    api_count = collections.Counter()
    tids = collections.Counter()
    for e in ev:
        if e.get("ph") != "X":
            continue
        cat, n = e.get("cat", ""), e.get("name", "")
        s, d = float(e["ts"]), float(e.get("dur", 0))
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu.append((s, s + d, n, cat.replace("gpu_", "")))
            if cat == "gpu_memcpy" and "HtoD" in n:
                htod.append(s)
        elif cat in ("cuda_runtime", "cuda_driver"):
            c = api_class(n)
            host[c].append((s, s + d))
            api_count[n] += 1
            tids[e.get("tid")] += 1
        elif cat == "user_annotation" and n.startswith("ProfilerStep#"):
            steps.append((s, s + d))
        elif cat == "user_annotation" and "DataLoader" in n:
            host["loader"].append((s, s + d))
        elif cat == "cpu_op":
            host["ops"].append((s, s + d))
    steps.sort()
    notes = []
    if len(steps) > 1:
        lo = steps[1][0]
        last_gpu = max(e for s, e, _, _ in gpu)
        hi = max(steps[-1][1], min(last_gpu, steps[-1][1] + 1e6))
        notes.append(f"{len(steps)} ProfilerSteps, window = steps 2..{len(steps)}")
    else:
        lo = min(s for s, e, _, _ in gpu + [(x, y, 0, 0) for x, y in host.get('launch', [])])
        hi = max(e for s, e, _, _ in gpu)
        notes.append("no ProfilerStep: window = first launch .. last GPU op")
    win_api = collections.Counter()
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and lo <= float(e["ts"]) < hi:
            win_api[e["name"]] += 1
    nsteps = max(len(steps) - 1, 1)
    extra = {"API calls per step (window)": ", ".join(f"{n} {c / nsteps:.0f}" for n, c in win_api.most_common(8))}
    graph = sum(c for n, c in api_count.items() if "GraphLaunch" in n)
    if graph:
        extra["graph launches (whole trace)"] = graph
    report(os.path.basename(path), gpu, host, (lo, hi), htod, notes, extra)


def nsys_trace(path):
    tmp = None
    if path.endswith(".gz"):
        fd, tmp = tempfile.mkstemp(suffix=".sqlite")
        with gzip.open(path, "rb") as f, os.fdopen(fd, "wb") as g:
            shutil.copyfileobj(f, g)
        path_db = tmp
    else:
        path_db = path
    try:
        c = sqlite3.connect(path_db)
        names = dict(c.execute("SELECT id, value FROM StringIds"))
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        gpu, htod = [], []
        for s, e, n in c.execute("SELECT start, end, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL"):
            gpu.append((s / 1e3, e / 1e3, names.get(n, "?"), "kernel"))
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
            for s, e, k in c.execute("SELECT start, end, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
                gpu.append((s / 1e3, e / 1e3, {1: "HtoD", 2: "DtoH", 8: "DtoD"}.get(k, str(k)), "memcpy"))
                if k == 1:
                    htod.append(s / 1e3)
        if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
            for s, e in c.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET"):
                gpu.append((s / 1e3, e / 1e3, "memset", "memset"))
        host = collections.defaultdict(list)
        api = collections.Counter()
        rows = c.execute("SELECT start, end, nameId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
        tid_launches = collections.Counter(t for s, e, n, t in rows if api_class(names.get(n, "")) == "launch")
        main_tid = tid_launches.most_common(1)[0][0]
        for s, e, n, t in rows:
            nm = names.get(n, "?")
            api[nm] += 1
            if t == main_tid:
                host[api_class(nm)].append((s / 1e3, e / 1e3))
        lo = min(x[0] for x in gpu + [(s / 1e3, 0) for s, e, n, t in rows])
        hi = max(x[1] for x in gpu)
        notes = ["nsys: window = first CUDA API call .. last GPU op (whole capture)"]
        extra = {"API calls (whole capture)": ", ".join(f"{n} {k}" for n, k in api.most_common(8))}
        if "OSRT_API" in tables:
            osrt = collections.Counter()
            for n, d in c.execute("SELECT nameId, end - start FROM OSRT_API"):
                osrt[names.get(n, "?")] += d / 1e6
            extra["OS runtime ms (all threads)"] = ", ".join(f"{n} {v:.1f}" for n, v in osrt.most_common(5))
        extra["NVTX rows"] = c.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0] if "NVTX_EVENTS" in tables else 0
        report(os.path.basename(path), gpu, host, (lo, hi), htod, notes, extra)
    finally:
        if tmp:
            os.unlink(tmp)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        (nsys_trace if ".sqlite" in p else torch_trace)(p)
