"""What the launching host thread did while it made no CUDA calls, from an export's OS runtime calls, CPU
samples and scheduling (Timeline.host_threads; Nsight Systems `-t osrt --sample=process-tree
--cpuctxsw=process-tree`).

A thread inside a blocking OS call (poll, futex, a condition-variable or semaphore wait, read/recv,
a sleep ...) waits; a thread scheduled in or sampled running, outside such calls, computes. The
launching thread is the one that made the most CUDA calls: it is the one whose absence from CUDA
holds the GPU up. Without samples or scheduling nothing shows the thread computing; without OS
runtime nothing shows it waiting (the caller says so in the report).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .intervals import IntervalSet, subtract
from .tables import Timeline

# OS calls that put the calling thread to sleep until something else happens (I/O, a peer, a timer)
BLOCKING_CALLS = re.compile(
    r"^(?:poll|ppoll|epoll_wait|epoll_pwait2?|select|pselect6?|futex|pthread_cond_(?:timed|clock)?wait|"
    r"pthread_mutex_(?:timed|clock)?lock|pthread_rwlock_(?:timed)?(?:rd|wr)lock|pthread_join|pthread_barrier_wait|"
    r"sem_(?:timed|clock)?wait|read|pread(?:64)?|readv|preadv2?|recv|recvfrom|recvmsg|recvmmsg|write|pwrite(?:64)?|"
    r"writev|send|sendto|sendmsg|fsync|fdatasync|msync|nanosleep|clock_nanosleep|usleep|sleep|wait|waitpid|"
    r"waitid|wait4|accept4?|connect|sigwait|sigwaitinfo|sigtimedwait|sigsuspend|pause|msgrcv|semop|semtimedop|"
    r"flock|lockf)$")
ADDRESS = re.compile(r"^0x[0-9a-fA-F]+$")
SO_SUFFIX = re.compile(r"(?:\.cpython-[^.]*)?\.so(?:\.[0-9.]+)?$")
COLLECT = "nsys profile -t cuda,nvtx,osrt --sample=process-tree --cpuctxsw=process-tree"


@dataclass
class HostSide:
    """The launching thread's OS-level activity (times in ns, the timeline's clock)."""

    thread: int
    traced: frozenset          # of "osrt", "samples", "sched"
    wait: IntervalSet          # its blocking OS calls
    wait_calls: pd.DataFrame   # those calls (name, start_ns, end_ns), sorted by start
    running: IntervalSet | None  # spans it was seen running outside blocking calls; None: neither sampled nor scheduled
    samples: pd.DataFrame      # its CPU samples taken while running (start_ns, function, module)

    @property
    def sees_compute(self) -> bool:
        return self.running is not None

    @property
    def sees_waits(self) -> bool:
        return "osrt" in self.traced


def launching_thread(tl: Timeline) -> int | None:
    """The host thread with the most CUDA calls (the lowest id among equals)."""
    th = tl.host["thread"].to_numpy()
    if th.size == 0:
        return None
    ids, counts = np.unique(th, return_counts=True)
    return int(ids[np.argmax(counts)])


def _sample_spans(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each sample stands for the sampling period before it (the median spacing of the thread's samples)."""
    if t.size < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    period = int(np.median(np.diff(t)))
    return t - max(period, 1), t


def host_side(tl: Timeline) -> HostSide | None:
    """The launching thread's waits and running spans; None when the source records neither (not nsys)."""
    h = tl.host_threads
    thread = launching_thread(tl)
    if h is None or thread is None or not h.traced:
        return None
    calls = h.os_calls[(h.os_calls["thread"] == thread).to_numpy()]
    blocking = calls["name"].astype(str).str.match(BLOCKING_CALLS).to_numpy(bool) if len(calls) else np.zeros(0, bool)
    calls = calls[blocking]
    wait = IntervalSet.of(calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64))
    s = h.samples[(h.samples["thread"] == thread).to_numpy() & h.samples["running"].to_numpy(bool)]
    running = None
    if {"samples", "sched"} & h.traced:
        r = h.running[(h.running["thread"] == thread).to_numpy()]
        ss, se = _sample_spans(s["start_ns"].to_numpy(np.int64))
        running = subtract(IntervalSet.of(np.concatenate((r["start_ns"].to_numpy(np.int64), ss)),
                                          np.concatenate((r["end_ns"].to_numpy(np.int64), se))), wait)
    return HostSide(thread, h.traced, wait, calls[["name", "start_ns", "end_ns"]].reset_index(drop=True), running,
                    s[["start_ns", "function", "module"]].reset_index(drop=True))


def wait_text(side: HostSide, gs: np.ndarray, ge: np.ndarray, steps: int, top: int = 2) -> str:
    """The blocking calls covering the spans most: `poll 35.2 ms (95%)` per step, by covered time."""
    c = side.wait_calls
    if not len(c) or gs.size == 0:
        return ""
    total = float((ge - gs).sum())
    covered = {}
    for name, g in c.groupby(c["name"].astype(str), sort=True):
        covered[name] = float(IntervalSet.of(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
                              .overlap(gs, ge).sum())
    ranked = sorted(((ns, n) for n, ns in covered.items() if ns > 0), key=lambda x: (-x[0], x[1]))[:top]
    return ", ".join(f"{n} {ns / 1e6 / steps:.1f} ms ({100.0 * ns / total:.0f}%)" for ns, n in ranked)


def _without_groups(text: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_function(function: str, module: str) -> str:
    """`name (module)` with C++ template and argument lists and a return type dropped, the module without
    its directory and shared-object suffix; an unresolved address is named by its module alone."""
    mod = SO_SUFFIX.sub("", module) or "?"
    if not function or ADDRESS.match(function):
        return f"({mod})"
    name = _without_groups(_without_groups(function, "<", ">"), "(", ")").strip()
    name = name.split(" ")[-1] if " " in name else name  # drop a return type (`void ns::f`)
    return f"{name or function} ({mod})"


def function_text(side: HostSide, gs: np.ndarray, ge: np.ndarray, top: int = 3) -> str:
    """The functions most sampled inside the spans (leaf frames), with their share of those samples:
    `mapiter_get (_multiarray_umath) 12%`; "" without samples in them."""
    s = side.samples
    if not len(s) or gs.size == 0:
        return ""
    t = s["start_ns"].to_numpy(np.int64)
    inside = IntervalSet.of(gs, ge).contains(t)
    if not inside.any():
        return ""
    picked = s[inside]
    per_frame = picked.groupby(["function", "module"], observed=True).size()  # each distinct frame shortened once
    counts = pd.Series(per_frame.to_numpy(), index=[short_function(str(f), str(m)) for f, m in per_frame.index])
    counts = counts.groupby(level=0).sum()
    n = int(inside.sum())
    rows = sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:top]
    mods = picked.groupby("module", observed=True).size()
    mods = pd.Series(mods.to_numpy(), index=[SO_SUFFIX.sub("", str(m)) or "?" for m in mods.index]).groupby(level=0).sum()
    by_module = sorted(mods.items(), key=lambda x: (-x[1], x[0]))[:2]
    return (", ".join(f"{k} {100.0 * v / n:.0f}%" for k, v in rows) + f" of {n} samples (by module "
            + ", ".join(f"{k} {100.0 * v / n:.0f}%" for k, v in by_module) + ")")
