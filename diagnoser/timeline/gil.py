"""The GPU idles while the threads that launch its work wait for Python's interpreter lock (the GIL), held by
another Python thread of the process (metrics, logging, a watchdog doing Python work).

Nsight Systems export (`-t osrt`, with `--sample=process-tree` for the holder): CPython's `take_gil` waits on a
condition variable with the switch interval as its timeout (5 ms unless `sys.setswitchinterval` changed it),
so the launching threads sit in runs of `pthread_cond_timedwait` (or futex) waits that end at the interval,
while the CPU samples of the process fall in another thread. PyTorch trace (with_stack): the gaps no class
explains are covered by the Python frames of a thread that makes no CUDA calls.
"""
from __future__ import annotations


import numpy as np

from .. import settings
from .host_threads import launching_threads
from .intervals import IntervalSet
from .tables import Timeline
from .names import lazy_pattern

GIL_WAIT = lazy_pattern(r"^(?:pthread_cond_(?:timed|clock)wait|futex|sem_(?:timed|clock)wait)$")
# innermost frames of a thread that is blocked (and so has released the GIL): waits, queues, sockets, pools, sleeps
WAITING_FRAME = lazy_pattern(r"(?:^|/)(?:threading|queue|selectors|socket|subprocess|ssl)\.py\(\d+\)|multiprocessing/|"
                             r"concurrent/futures/|compile_worker/|tqdm/_monitor\.py|: (?:wait|sleep|join|get|recv\w*|"
                             r"read\w*|select|poll|accept|acquire)$")
PY_FRAME = lazy_pattern(r"^(.+?\.py)\(\d+\): (.*)$")
SWITCH_INTERVAL_NS = settings.register("timeline.gil_switch_interval_ns", 5_000_000, "ns", "the interpreter's switch interval (sys.getswitchinterval()): a waiter for the GIL times out after it and asks the holder to drop the lock")
GIL_WAIT_MIN_NS = settings.register("timeline.gil_wait_min_ns", 1_000_000, "ns", "a condition-variable or futex wait of a launching thread at least this long may be a wait for the GIL")
GIL_AT_INTERVAL_SHARE = settings.register("timeline.gil_at_interval_share", 0.25, "share", "at least this share of those waits must end at the switch interval (within 10%) to call them waits for the GIL")


def _thread_label(names: dict, tid: int) -> str:
    name = names.get(tid, "")
    return f"{name} (thread {tid})" if name else f"thread {tid}"


GAP_CHUNK = 1 << 16  # idle gaps measured against the waits at a time


def gil_stats_export(tl: Timeline, windows: IntervalSet, gaps, steps: int) -> dict:
    """From an export's OS calls (and samples): the launching threads' waits for the GIL in the steady steps,
    the idle they cover (`gaps`: the idle gaps, timeline.gaps.Gaps), and the thread sampled running meanwhile."""
    h = tl.host_threads
    if h is None or "osrt" not in h.traced or not len(tl.host) or steps <= 0:
        return {}
    launching = launching_threads(tl)
    c = h.os_calls
    c = c[np.isin(c["thread"].to_numpy(), launching)]
    if not len(c):
        return {"gil_idle_pct": 0.0}
    names = c["name"].astype(str).to_numpy()
    s, e = c["start_ns"].to_numpy(np.int64), c["end_ns"].to_numpy(np.int64)
    ok = (e - s >= GIL_WAIT_MIN_NS.value) & windows.contains(s)
    wait = GIL_WAIT().match
    ok[ok] = np.array([bool(wait(n)) for n in names[ok]], dtype=bool)
    if not ok.any():
        return {"gil_idle_pct": 0.0}
    s, e, names = s[ok], e[ok], names[ok]
    d = e - s
    interval = float(SWITCH_INTERVAL_NS.value)
    at_interval = float((np.abs(d - interval) <= 0.1 * interval).mean())
    if at_interval < GIL_AT_INTERVAL_SHARE.value:
        return {"gil_idle_pct": 0.0}
    waits = IntervalSet.of(s, e)
    span = max(windows.total, 1)
    idle = 0  # (a chunk of gaps at a time: no end of every gap)
    for a in range(0, len(gaps), GAP_CHUNK):
        idle += int(waits.overlap(*gaps.spans(slice(a, a + GAP_CHUNK))).sum())
    idle = float(idle)
    top_call = max(set(names.tolist()), key=lambda n: (int((names == n).sum()), n))
    out = {"gil_waits_per_step": float(s.size) / steps, "gil_wait_ms_per_step": float(d.sum()) / 1e6 / steps,
           "gil_idle_pct": 100.0 * idle / span, "gil_waits_at_interval_pct": 100.0 * at_interval,
           "gil_wait_call": top_call}
    if "samples" in h.traced and len(h.samples):
        smp = h.samples[h.samples["running"].to_numpy(bool) & ~np.isin(h.samples["thread"].to_numpy(), launching)]
        inside = smp[waits.contains(smp["start_ns"].to_numpy(np.int64))]
        if len(inside):
            tids, counts = np.unique(inside["thread"].to_numpy(), return_counts=True)
            k = int(np.argmax(counts))
            out["gil_holder"] = (f"{_thread_label(h.names, int(tids[k]))}: {100.0 * counts[k] / len(inside):.0f}% of the "
                                 f"{len(inside)} CPU samples of the other threads during those waits")
    return out


def gil_stats_torch(tl: Timeline, gs: np.ndarray, ge: np.ndarray, windows: IntervalSet) -> dict:
    """From a PyTorch trace with stacks: the share of the steady steps' unexplained idle (`gs`, `ge`) covered by
    the Python frames of a thread that makes no CUDA calls, and its innermost frame covering most of it."""
    r = tl.ranges
    if not len(r) or gs.size == 0 or not len(tl.host):
        return {}
    py = r[(r["kind"] == "python").to_numpy()]
    if not len(py):
        return {}
    launching = launching_threads(tl)
    other = py[~np.isin(py["thread"].to_numpy(), launching)]
    if not len(other):
        return {"gil_idle_pct": 0.0}
    gaps = IntervalSet.of(gs, ge)
    total = float((ge - gs).sum())
    os_, oe = other["start_ns"].to_numpy(np.int64), other["end_ns"].to_numpy(np.int64)
    cover = gaps.overlap(os_, oe)
    best = None  # (covered ns, thread, frame): per thread, its innermost frame covering most of the idle
    for tid in np.unique(other["thread"].to_numpy()).tolist():
        rows = np.flatnonzero((other["thread"].to_numpy() == tid) & (cover >= 0.5 * total))
        if not rows.size:
            continue
        k = rows[np.argmin((oe - os_)[rows])]
        name = str(other["name"].iloc[k])
        if WAITING_FRAME().search(name):  # a thread blocked in a wait releases the lock: not the holder
            continue
        if best is None or cover[k] > best[0]:
            best = (float(cover[k]), int(tid), name)
    if best is None:
        return {"gil_idle_pct": 0.0}
    idle, tid, name = best
    m = PY_FRAME().match(name)
    frame = f"{m.group(2)} ({m.group(1)})" if m else name
    return {"gil_idle_pct": 100.0 * idle / max(windows.total, 1),
            "gil_holder": f"thread {tid} in `{frame}`, a Python thread that launches no GPU work, runs through "
                          f"{100.0 * idle / total:.0f}% of that idle"}
