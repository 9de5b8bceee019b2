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
from .names import lazy_pattern

# OS calls that put the calling thread to sleep until something else happens (I/O, a peer, a timer)
BLOCKING_CALLS = lazy_pattern(
    r"^(?:poll|ppoll|epoll_wait|epoll_pwait2?|select|pselect6?|futex|pthread_cond_(?:timed|clock)?wait|"
    r"pthread_mutex_(?:timed|clock)?lock|pthread_rwlock_(?:timed)?(?:rd|wr)lock|pthread_join|pthread_barrier_wait|"
    r"sem_(?:timed|clock)?wait|read|pread(?:64)?|readv|preadv2?|recv|recvfrom|recvmsg|recvmmsg|write|pwrite(?:64)?|"
    r"writev|send|sendto|sendmsg|fsync|fdatasync|msync|nanosleep|clock_nanosleep|usleep|sleep|wait|waitpid|"
    r"waitid|wait4|accept4?|connect|sigwait|sigwaitinfo|sigtimedwait|sigsuspend|pause|msgrcv|semop|semtimedop|"
    r"flock|lockf)$")
ADDRESS = lazy_pattern(r"^0x[0-9a-fA-F]+$")
SO_SUFFIX = lazy_pattern(r"(?:\.cpython-[^.]*)?\.so(?:\.[0-9.]+)?$")
# host code of the GPU libraries and runtimes: a thread sampled there prepares a launch (a cuBLAS-Lt plan
# for a new shape, the dispatcher of a CUDA operator, a driver call), it does not compute for itself
LAUNCH_LIBRARIES = lazy_pattern(r"^(?:libcuda|libcudart|libcublas(?:Lt)?|libcudnn\w*|libnccl|libcufft\w*|libcusparse\w*|"
                                r"libcusolver\w*|libcurand|libnvrtc\w*|libnvJitLink|libtorch_cuda\w*|libc10_cuda|"
                                r"libamdhip64|libhipblas\w*|librocblas|libMIOpen)(?:[.-]|$)")
# the C library: a thread sampled there for a whole gap, with no CUDA call, copies or fills memory (CuPy staging a
# NumPy array into its pinned buffer before the upload), it does not prepare anything
C_LIBRARY = lazy_pattern(r"^libc(?:[.-]|$)")
COLLECT = "nsys profile -t cuda,nvtx,osrt --sample=process-tree --cpuctxsw=process-tree"


@dataclass
class ThreadSide:
    """One launching thread's waits and running spans (times in ns, the timeline's clock)."""

    wait: IntervalSet            # its blocking OS calls
    running: IntervalSet | None  # spans it was seen running outside them; None: neither sampled nor scheduled


@dataclass
class HostSide:
    """What the export recorded of the threads that make CUDA calls (the launching threads). A gap is
    judged on the thread that launched the work ending it (training: the autograd thread launches the
    backward pass while the main thread waits on it); `main`, the one with the most CUDA calls, stands in
    where that is unknown."""

    main: int
    traced: frozenset            # of "osrt", "samples", "sched"
    threads: dict                # thread id -> ThreadSide
    wait_calls: pd.DataFrame     # their blocking calls (name, start_ns, end_ns, thread), sorted by start
    samples: pd.DataFrame        # their CPU samples taken while running (start_ns, thread, function, module)

    @property
    def sees_compute(self) -> bool:
        return bool({"samples", "sched"} & self.traced)

    @property
    def sees_waits(self) -> bool:
        return "osrt" in self.traced

    def _of(self, thread: np.ndarray | None, n: int) -> np.ndarray:
        t = np.full(n, self.main, np.int64) if thread is None else np.asarray(thread, np.int64).copy()
        t[~np.isin(t, list(self.threads))] = self.main
        return t

    def _share(self, what: str, starts: np.ndarray, ends: np.ndarray, thread: np.ndarray | None) -> np.ndarray:
        out = np.zeros(starts.size)
        t = self._of(thread, starts.size)
        dur = np.maximum(ends - starts, 1)
        for k in np.unique(t).tolist():
            sel = t == k
            spans = getattr(self.threads[k], what)
            if spans is not None and len(spans):
                out[sel] = spans.overlap(starts[sel], ends[sel]) / dur[sel]
        return out

    def running_share(self, starts, ends, thread=None) -> np.ndarray:
        """Per gap, the share its launching thread was seen running outside blocking calls."""
        return self._share("running", starts, ends, thread)

    def wait_share(self, starts, ends, thread=None) -> np.ndarray:
        """Per gap, the share its launching thread spent in blocking OS calls."""
        return self._share("wait", starts, ends, thread)

    def library_samples(self, starts: np.ndarray, ends: np.ndarray, thread: np.ndarray | None) -> tuple[int, int]:
        """(samples in GPU-library host code, all samples) of the launching threads inside the gaps."""
        n = in_lib = 0
        for smp, s, e in self.inside(self.samples, starts, ends, thread, None):
            if len(smp) and s.size:
                hit = IntervalSet.of(s, e).contains(smp["start_ns"].to_numpy(np.int64))
                n += int(hit.sum())
                in_lib += int(_name_matches(smp["module"][hit], LAUNCH_LIBRARIES()).sum())
        return in_lib, n

    def module_share(self, starts: np.ndarray, ends: np.ndarray, thread: np.ndarray | None,
                     pattern: re.Pattern) -> tuple[np.ndarray, np.ndarray]:
        """Per gap: (share of the launching thread's CPU samples in it whose module matches, samples in it)."""
        share, count = np.zeros(starts.size), np.zeros(starts.size, np.int64)
        t = self._of(thread, starts.size)
        for k in np.unique(t).tolist():
            sel = np.flatnonzero(t == k)
            smp = self.samples[(self.samples["thread"] == k).to_numpy()]
            if not len(smp):
                continue
            ts = smp["start_ns"].to_numpy(np.int64)
            order = np.argsort(ts, kind="stable")
            ts, hit = ts[order], _name_matches(smp["module"], pattern)[order]
            cum = np.concatenate(([0], np.cumsum(hit)))
            lo, hi = np.searchsorted(ts, starts[sel], "left"), np.searchsorted(ts, ends[sel], "right")
            count[sel] = hi - lo
            share[sel] = (cum[hi] - cum[lo]) / np.maximum(hi - lo, 1)
        return share, count

    def inside(self, table: pd.DataFrame, starts: np.ndarray, ends: np.ndarray, thread: np.ndarray | None,
               end_col: str | None) -> list[tuple[pd.DataFrame, np.ndarray, np.ndarray]]:
        """Per launching thread: its rows of `table` and the gaps it launched after."""
        t = self._of(thread, starts.size)
        return [(table[(table["thread"] == k).to_numpy()], starts[t == k], ends[t == k]) for k in np.unique(t).tolist()]


def _thread_runs(th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The host thread column as runs of one thread: (the thread of each run, its length). A thread makes
    its calls in runs, so the distinct threads are found among far fewer values than calls."""
    head = np.empty(th.size, dtype=bool)
    if th.size:
        head[0] = True
        np.not_equal(th[1:], th[:-1], out=head[1:])
    first = np.flatnonzero(head)
    return th[first], np.diff(np.append(first, th.size))


def launching_thread(tl: Timeline) -> int | None:
    """The host thread with the most CUDA calls (the lowest id among equals)."""
    th = tl.host["thread"].to_numpy()
    if th.size == 0:
        return None
    heads, lengths = _thread_runs(th)
    ids, inv = np.unique(heads, return_inverse=True)
    counts = np.bincount(inv.reshape(-1), weights=lengths, minlength=ids.size)  # (exact: fewer than 2**53 calls)
    return int(ids[np.argmax(counts)])


def _sample_spans(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each sample stands for the sampling period before it (the median spacing of the thread's samples)."""
    if t.size < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    period = int(np.median(np.diff(t)))
    return t - max(period, 1), t


def _name_matches(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Rows whose name matches, each distinct name tested once (the column is a Categorical)."""
    if not len(names):
        return np.zeros(0, bool)
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = np.array([bool(pattern.match(str(c))) for c in names.cat.categories] + [False])
        return cats[names.cat.codes.to_numpy()]  # code -1 (missing) -> the trailing False
    return names.astype(str).str.match(pattern).to_numpy(bool)


def launching_threads(tl: Timeline) -> np.ndarray:
    """The distinct threads of the CUDA calls, sorted (np.unique's answer, of the runs' threads only)."""
    return np.unique(_thread_runs(tl.host["thread"].to_numpy())[0])



def host_side(tl: Timeline) -> HostSide | None:
    """The launching threads' waits and running spans; None when the source records neither (not nsys)."""
    h = tl.host_threads
    main = launching_thread(tl)
    if h is None or main is None or not h.traced:
        return None
    launching = launching_threads(tl)
    calls = h.os_calls[np.isin(h.os_calls["thread"].to_numpy(), launching)]
    blocking = _name_matches(calls["name"], BLOCKING_CALLS())
    calls = calls[blocking]
    samples = h.samples[np.isin(h.samples["thread"].to_numpy(), launching) & h.samples["running"].to_numpy(bool)]
    threads = {}
    for k in launching.tolist():
        c = calls[(calls["thread"] == k).to_numpy()]
        wait = IntervalSet.of(c["start_ns"].to_numpy(np.int64), c["end_ns"].to_numpy(np.int64))
        running = None
        if {"samples", "sched"} & h.traced:
            r = h.running[(h.running["thread"] == k).to_numpy()]
            ss, se = _sample_spans(samples["start_ns"].to_numpy(np.int64)[(samples["thread"] == k).to_numpy()])
            running = subtract(IntervalSet.of(np.concatenate((r["start_ns"].to_numpy(np.int64), ss)),
                                              np.concatenate((r["end_ns"].to_numpy(np.int64), se))), wait)
        threads[int(k)] = ThreadSide(wait, running)
    return HostSide(main, h.traced, threads, calls[["name", "start_ns", "end_ns", "thread"]].reset_index(drop=True),
                    samples[["start_ns", "thread", "function", "module"]].reset_index(drop=True))


def wait_text(side: HostSide, gs: np.ndarray, ge: np.ndarray, thread: np.ndarray | None, steps: int, top: int = 2) -> str:
    """The blocking calls covering the gaps most, on the thread that launched after each: `poll 35.2 ms (95%)`
    per step, by covered time."""
    if not len(side.wait_calls) or gs.size == 0:
        return ""
    total = float((ge - gs).sum())
    covered: dict[str, float] = {}
    for c, s, e in side.inside(side.wait_calls, gs, ge, thread, "end_ns"):
        for name, g in c.groupby(c["name"].astype(str), sort=True):
            ns = float(IntervalSet.of(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)).overlap(s, e).sum())
            covered[name] = covered.get(name, 0.0) + ns
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
    mod = SO_SUFFIX().sub("", module) or "?"
    if not function or ADDRESS().match(function):
        return f"({mod})"
    name = _without_groups(_without_groups(function, "<", ">"), "(", ")").strip()
    name = name.split(" ")[-1] if " " in name else name  # drop a return type (`void ns::f`)
    return f"{name or function} ({mod})"


def function_text(side: HostSide, gs: np.ndarray, ge: np.ndarray, thread: np.ndarray | None = None, top: int = 3) -> str:
    """The functions most sampled inside the gaps (leaf frames, on the thread that launched after each), with
    their share of those samples: `mapiter_get (_multiarray_umath) 12%`, then the top modules; "" without
    samples in them."""
    if not len(side.samples) or gs.size == 0:
        return ""
    parts = []
    for smp, s, e in side.inside(side.samples, gs, ge, thread, None):
        if len(smp) and s.size:
            parts.append(smp[IntervalSet.of(s, e).contains(smp["start_ns"].to_numpy(np.int64))])
    picked = pd.concat(parts) if parts else side.samples.iloc[:0]
    n = len(picked)
    if n == 0:
        return ""
    per_frame = picked.groupby(["function", "module"], observed=True).size()  # each distinct frame shortened once
    counts = pd.Series(per_frame.to_numpy(), index=[short_function(str(f), str(m)) for f, m in per_frame.index])
    counts = counts.groupby(level=0).sum()
    rows = sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:top]
    mods = picked.groupby("module", observed=True).size()
    suffix = SO_SUFFIX().sub
    mods = pd.Series(mods.to_numpy(), index=[suffix("", str(m)) or "?" for m in mods.index]).groupby(level=0).sum()
    by_module = sorted(mods.items(), key=lambda x: (-x[1], x[0]))[:2]
    return (", ".join(f"{k} {100.0 * v / n:.0f}%" for k, v in rows) + f" of {n} samples (by module "
            + ", ".join(f"{k} {100.0 * v / n:.0f}%" for k, v in by_module) + ")")
