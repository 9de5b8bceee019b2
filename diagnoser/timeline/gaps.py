"""GPU busy time and GPU idle gaps, each gap classified by what the host was doing during it.

A gap is a span inside a steady step where no kernel, copy or memset runs on a device. Its class
says why the GPU had nothing to do, judged from the host side, in this order (docs/gap_classes.md):
  communication  an NCCL kernel is the only thing running (waiting for a peer), or the host waits
                 in a collective
  sync           the host is blocked in a host-device synchronization for most of the gap (stream /
                 device / event synchronize, a blocking or device-to-host copy)
  alloc          the host is in device malloc/free for most of the gap (allocator churn)
  data           the host is loading/preprocessing input: NVTX/annotation data ranges, DataLoader,
                 CPU operators that launch no GPU work, or a gap that ends with the host-to-device
                 copy of the next input while the host made (almost) no CUDA calls
  host           the host computes something that is not input, making (almost) no CUDA calls: it is
                 inside an optimizer step range for most of the gap (an optimizer on CPU tensors,
                 ZeRO-offload style; its CPU operators are not counted as data), or the gap began as a
                 sync returned (results read back) and does not end in the next input's copy nor lie in
                 marked data ranges: the host computes on what it read back (post-processing, metrics
                 in NumPy or on CPU tensors); its CPU operators there are not input either. Seen
                 computing: CPU operators / Python frames that launch nothing (a torch trace), or the
                 launching thread scheduled in or sampled running outside blocking OS calls (an nsys
                 export with CPU samples / context switches); a thread in a blocking OS call (poll,
                 futex, read ...) for most of the gap waits: the gap keeps its other class
  sync           (again, weaker) the gap began while the host was blocked in a sync: the sync drained
                 the queue and the host must launch anew (`.item()` in a loop)
  launch         short gaps, or gaps the host spends launching: the GPU waits for the next launch
  unexplained    long gaps with no recognized host activity (Python work, sleeps, other threads)
API calls are recognized by kind (timeline/api_kinds.py), the same for CUDA and HIP.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from .. import settings
from ..idle_classes import IDLE_CLASSES
from .intervals import GapRange, IntervalSet, searchsorted
from .host_threads import C_LIBRARY, COLLECT, HostSide, function_text, host_side, wait_text
from .op_tree import calls_inside
from .names import COMM_KERNEL, lazy_pattern, name_mask, optimizer_ranges
from .recompiles import compile_intervals
from .steps import NVTX_STEP, PHASE_PATTERNS, PROFILER_STEP, Steps
from .view import Names, TimelineView, is_sorted, true_rows

# ops that read a value back to the host; they sync only when they copy (the API calls say so),
# so they are never counted as CPU-side data work
SYNC_OPS = re.compile(r"^aten::(?:item|_local_scalar_dense|is_nonzero|nonzero)$")
COMM_RANGES = re.compile(r"^nccl:|ProcessGroupNCCL|^c10d::|record_param_comms", re.I)
DATA_RANGE = PHASE_PATTERNS["data"]
# torch.autograd.profiler.emit_nvtx names each range `op, seq = N, op_id = M, sizes = [...]`
OBJECT_ADDRESS = lazy_pattern(r" object at 0x[0-9a-fA-F]+")
EMIT_NVTX_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$")

LAUNCH_GAP_MAX_NS = settings.register("timeline.launch_gap_max_ns", 100_000, "ns", "an idle gap this short is launch overhead (the GPU waits for the next launch); longer ones are classified by the host evidence")
MIN_GAP_SAMPLES = settings.register("timeline.min_gap_samples", 5, "samples", "fewest CPU samples of the launching threads inside a set of idle gaps to say what code the host ran there")
MAJORITY = settings.register("timeline.gap_majority", 0.5, "share", "share of an idle gap a host activity (sync, malloc/free, data ranges, launches) must cover to explain it")


@dataclass
class CallSpans:
    """Host calls (and operators) before they are merged: a mask over the timeline's host columns, merged only
    `around` the long gaps they may explain (merged whole, a 10M-kernel export's launch calls were 160 MB and its
    every call 340 MB held through the idle gaps' classification)."""

    start: np.ndarray  # every host call's start and end (the timeline view's columns)
    end: np.ndarray
    calls: np.ndarray | None  # mask over them: the calls meant (None: every call)
    ops: IntervalSet   # operators besides (the launching ones of a torch trace's op tree; else empty)

    def around(self, starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
        """The spans that overlap the intervals (sorted and disjoint), merged: within those intervals, the same set
        as every span merged."""
        hit = _meets(self.ops.starts, self.ops.ends, starts, ends)
        got_s, got_e = [self.ops.starts[hit]], [self.ops.ends[hit]]
        for a in range(0, self.start.size, GAP_CHUNK):
            s, e = self.start[a:a + GAP_CHUNK], self.end[a:a + GAP_CHUNK]
            if self.calls is not None:
                m = self.calls[a:a + GAP_CHUNK]
                s, e = s[m], e[m]
            hit = _meets(s, e, starts, ends)
            got_s.append(s[hit])
            got_e.append(e[hit])
        return IntervalSet.of(np.concatenate(got_s), np.concatenate(got_e))


def _meets(s: np.ndarray, e: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which spans (s, e) overlap one of the intervals (sorted and disjoint) for a positive length."""
    if not starts.size or not s.size:
        return np.zeros(s.size, dtype=bool)
    j = np.searchsorted(ends, s, side="right")  # the first interval ending after the span starts
    hit = j < ends.size
    np.minimum(j, ends.size - 1, out=j)
    hit &= starts[j] < e
    return hit


@dataclass
class HostActivity:
    """Where on the host clock each recognized activity happens (any host thread)."""

    data: IntervalSet           # marked data ranges and CPU operators that launch nothing
    sync: IntervalSet
    launch: IntervalSet | CallSpans  # spans until merged around the long gaps (merged_around)
    comm: IntervalSet
    pageable_copy: IntervalSet  # host calls that copied from pageable memory to the device
    alloc: IntervalSet          # device malloc/free and pinned host allocation calls
    cuda: IntervalSet | CallSpans  # every host API call (to tell a host busy without CUDA calls; as launch)
    input_copy: np.ndarray      # sorted GPU start times of host-to-device copies
    input_copy_bytes: np.ndarray  # their sizes, in the same order
    sync_rows: np.ndarray       # host rows of the synchronizing calls (for naming them)
    host: IntervalSet | None = None  # host work that is not input: optimizer step ranges
    marked_data: IntervalSet | None = None  # the data ranges alone (NVTX / annotations: DataLoader, `data`)
    host_cpu: IntervalSet | None = None  # the host seen computing: CPU operators and Python frames that launch nothing
    # (torch); an nsys export's threads are judged per gap (side)
    side: HostSide | None = None  # what the export recorded of the launching threads (None: not an nsys export)
    compile: IntervalSet | None = None  # torch.compile compiling (Dynamo's compile ranges): neither launching nor input


def python_frames_without_calls(tv: TimelineView) -> pd.DataFrame:
    """The Python frames (traces with stacks) inside which no CUDA call starts: the host computing."""
    r = tv.tl.ranges
    py = r[(r["kind"] == "python").to_numpy()].reset_index(drop=True)
    return py[calls_inside(py, tv) == 0] if len(py) else py


def _calls_with_corr(tv: TimelineView, calls: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """Of the host rows `calls` (a mask), those whose correlation id is one of `corr` (a mask)."""
    rows = np.flatnonzero(calls)
    out = np.zeros(calls.size, dtype=bool)
    out[rows[np.isin(tv.host_corr[rows], np.unique(corr))]] = True
    return out


def host_activity(tv: TimelineView) -> HostActivity:
    tl = tv.tl
    ranges = tl.ranges
    copies = np.flatnonzero(tv.is_memcpy)
    pageable = tl.gpu["pageable"].to_numpy()[copies]
    dtoh = Names.of(tl.gpu["copy_kind"].iloc[copies]).equals("DtoH")
    blocking_corr = tv.gpu_corr[copies][dtoh | pageable]
    # the host time of a pageable copy call is its cost only towards the device: a device-to-host copy
    # blocks until the queued work is done (a sync, counted as one); its own cost is the copy's GPU time
    pageable_corr = tv.gpu_corr[copies][pageable & ~dtoh]
    hs, he = tv.host_start, tv.host_end
    is_copy_call = tv.host_is("copy_async", "copy_sync")
    sync_mask = tv.host_is("sync", "copy_sync") | _calls_with_corr(tv, is_copy_call, blocking_corr)
    sync = IntervalSet.of(hs[sync_mask], he[sync_mask])

    marked_data = ranges[ranges["kind"].isin(["nvtx", "annotation"]).to_numpy() & name_mask(ranges["name"], DATA_RANGE)]
    tree = tv.op_tree  # the operators not nested in an earlier one of their thread
    # (no copy of every operator: most ranges are; their rows found once the tree is built, not held through it)
    top = ranges.iloc[true_rows((ranges["kind"] == "op").to_numpy(), tree.rows[tree.top_level])]
    top = top.set_axis(pd.RangeIndex(len(top)))
    launches = calls_inside(top, tv) if len(top) else np.zeros(0, np.int64)
    cpu_only = top[launches == 0] if len(top) else top
    cpu_only = cpu_only[~name_mask(cpu_only["name"], SYNC_OPS)]
    # positive evidence of the host computing (a trace with an op tree or Python stacks): CPU operators and
    # Python frames inside which no CUDA call starts
    # operators that are mostly torch.compile compiling (Dynamo's ranges; the Triton benchmark launches inside
    # them) neither launch the step's work nor prepare input: the gaps they cover are compile time
    compiling = compile_intervals(tl)
    if len(compiling) and len(top):
        ts, te = top["start_ns"].to_numpy(np.int64), top["end_ns"].to_numpy(np.int64)
        in_compile = compiling.overlap(ts, te) >= MAJORITY.value * np.maximum(te - ts, 1)
        top, launches = top[~in_compile], launches[~in_compile]
        cpu_only = cpu_only[~compiling.contains(cpu_only["start_ns"].to_numpy(np.int64))]
    py = python_frames_without_calls(tv)
    side = host_side(tl)
    host_cpu = IntervalSet.of(np.concatenate((cpu_only["start_ns"], py["start_ns"])),
                              np.concatenate((cpu_only["end_ns"], py["end_ns"])))
    # host work that is not input: an optimizer step's CPU operators (ops on CPU tensors) where the trace
    # has an op tree, else the optimizer step ranges themselves (the gap must also be free of CUDA calls)
    opt = optimizer_ranges(tl)
    host = IntervalSet.of(opt["start_ns"], opt["end_ns"])
    if len(tree) and len(host):
        in_opt = host.contains(cpu_only["start_ns"].to_numpy(np.int64)) if len(cpu_only) else np.zeros(0, bool)
        host = IntervalSet.of(cpu_only["start_ns"][in_opt], cpu_only["end_ns"][in_opt])
        cpu_only = cpu_only[~in_opt]
    data = IntervalSet.of(np.concatenate((marked_data["start_ns"], cpu_only["start_ns"])),
                          np.concatenate((marked_data["end_ns"], cpu_only["end_ns"])))

    launch_mask = tv.host_is("launch", "graph_launch", "memset", "copy_async")
    launching_ops = top[launches > 0] if len(top) else top
    launch = CallSpans(hs, he, launch_mask, IntervalSet.of(launching_ops["start_ns"].to_numpy(np.int64),
                                                           launching_ops["end_ns"].to_numpy(np.int64)))

    comm_r = ranges[name_mask(ranges["name"], COMM_RANGES)]
    comm_calls = tv.host_is("nccl")
    comm = IntervalSet.of(np.concatenate((comm_r["start_ns"], hs[comm_calls])),
                          np.concatenate((comm_r["end_ns"], he[comm_calls])))
    pc = _calls_with_corr(tv, is_copy_call, pageable_corr)
    alloc = tv.host_is("malloc", "free", "host_alloc")
    htod = copies[Names.of(tl.gpu["copy_kind"].iloc[copies]).equals("HtoD")]
    htod = htod[np.argsort(tv.gpu_start[htod], kind="stable")]
    return HostActivity(data, sync, launch, comm, IntervalSet.of(hs[pc], he[pc]), IntervalSet.of(hs[alloc], he[alloc]),
                        CallSpans(hs, he, None, IntervalSet.of([], [])), tv.gpu_start[htod], tl.gpu["bytes"].to_numpy()[htod],
                        np.flatnonzero(sync_mask), host, IntervalSet.of(marked_data["start_ns"], marked_data["end_ns"]),
                        host_cpu, side, compiling if len(compiling) else None)


@dataclass
class DeviceBusy:
    """One device's busy time (all activity, compute, communication) and where each compute activity was
    launched from."""

    device: int
    busy: IntervalSet      # any activity (kernels, copies, memsets, NCCL included)
    compute: IntervalSet   # activity other than communication kernels
    comm: IntervalSet      # NCCL kernels
    compute_start: np.ndarray      # start of each compute activity, sorted
    compute_launch: np.ndarray     # the host row of its launch call (-1: unknown; the view's launch_row where in order)
    host_end: np.ndarray           # the timeline's host columns (views): when each call returned, its thread
    host_thread: np.ndarray

    def launched(self, i: np.ndarray) -> np.ndarray:
        """When the launch call of compute activity i returned on the host (-1: unknown)."""
        return self._of_call(self.host_end, i)

    def thread(self, i: np.ndarray) -> np.ndarray:
        """The host thread of the launch call of compute activity i (-1: unknown)."""
        return self._of_call(self.host_thread, i)

    def _of_call(self, column: np.ndarray, i: np.ndarray) -> np.ndarray:
        row = self.compute_launch[i]
        if not column.size:
            return np.full(row.size, -1, np.int64)
        return np.where(row >= 0, column[np.maximum(row, 0)], -1)


def device_busy(tv: TimelineView) -> list[DeviceBusy]:
    """Per device, its busy, compute and communication intervals and the launch call of each compute
    activity (its row: what the gaps need of the call is looked up per gap, not kept per activity)."""
    out = []
    dev_col = tv.tl.gpu["device"].to_numpy()
    if dev_col.size == 0:
        return out
    one = int(dev_col.min()) == int(dev_col.max())
    comm_all = tv.is_kernel & tv.gpu_names.mask(COMM_KERNEL)
    host_end, host_thread = tv.host_end, tv.tl.host["thread"].to_numpy()
    row = tv.launch_row
    for dev in ([int(dev_col[0])] if one else np.unique(dev_col).tolist()):
        rows = slice(None) if one else np.flatnonzero(dev_col == dev)
        s, e, is_comm = tv.gpu_start[rows], tv.gpu_end[rows], comm_all[rows]
        launch = row[rows]
        busy = IntervalSet.of(s, e)
        if is_comm.any():
            cs, ce, cl = s[~is_comm], e[~is_comm], launch[~is_comm]
            compute, comm = IntervalSet.of(cs, ce), IntervalSet.of(s[is_comm], e[is_comm])
        else:  # no NCCL kernels: compute is everything
            cs, cl, compute, comm = s, launch, busy, IntervalSet.of([], [])
        if not is_sorted(cs):
            order = np.argsort(cs, kind="stable")
            cs, cl = cs[order], cl[order]
        out.append(DeviceBusy(int(dev), busy, compute, comm, cs, cl, host_end, host_thread))
    return out


@dataclass
class Gaps:
    """Idle gaps of one device in the steady steps, in time order; times in ns. A gap is kept as its start and
    its length, int32 (4 bytes a gap less than an end: a long trace has millions of gaps); the few of 2**31 ns or
    more keep their whole length aside (`long_rows`, `long_ns`). Ends and exact lengths are built for the gaps
    asked for: `lengths`, `end_of`, `spans`."""

    device: int
    start: np.ndarray
    length: np.ndarray  # int32, clipped at INT32_MAX: read it through lengths()
    cls: np.ndarray  # per gap, its class as an index into IDLE_CLASSES
    after_sync: np.ndarray | None = None  # per gap: the (whole) gap began as a sync returned, outside optimizer steps
    thread_code: np.ndarray | None = None  # per gap: the host thread that launched the work ending it, as an index
    # into thread_ids (int8 for up to 127 threads: a trace has a few; read through threads())
    long_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sorted: gaps of 2**31 ns or more
    long_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ... and their lengths
    thread_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the threads' ids (-1: unknown)

    def __len__(self) -> int:
        return int(self.start.size)

    def threads(self, sel) -> np.ndarray | None:
        """The launching thread's id (-1: unknown) of each selected gap; None where the trace has no host threads."""
        return None if self.thread_code is None else self.thread_ids[self.thread_code[sel]]

    def lengths(self, sel) -> np.ndarray:
        """The exact lengths (int64) of the selected gaps (a mask, indices or a slice)."""
        out = self.length[sel].astype(np.int64)
        if self.long_rows.size:
            rows = _rows_of(sel, self.start.size)
            hit = np.flatnonzero(np.isin(rows, self.long_rows))
            out[hit] = self.long_ns[np.searchsorted(self.long_rows, rows[hit])]
        return out

    def end_of(self, sel) -> np.ndarray:
        """The ends (int64) of the selected gaps."""
        out = self.lengths(sel)
        out += self.start[sel]
        return out

    def spans(self, sel) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the selected gaps."""
        return self.start[sel], self.end_of(sel)

    def ends(self) -> np.ndarray:
        """Every gap's end (a new array: for a pass that needs all of them)."""
        return self.end_of(slice(None))

    def overlapping(self, lo: int, hi: int) -> np.ndarray:
        """Mask of the gaps that overlap [lo, hi), a chunk at a time (no end of every gap)."""
        out = np.empty(self.start.size, dtype=bool)
        for a in range(0, self.start.size, GAP_CHUNK):
            s = self.start[a:a + GAP_CHUNK]
            out[a:a + GAP_CHUNK] = (s < hi) & (s + self.lengths(slice(a, a + GAP_CHUNK)) > lo)
        return out

    def ns(self, sel: np.ndarray) -> int:
        """The summed length of the selected gaps (a mask or indices), without a temporary of every gap."""
        if sel.dtype != bool:
            return int(self.lengths(sel).sum())
        total = 0
        for a in range(0, sel.size, GAP_CHUNK):
            b = a + GAP_CHUNK
            total += int(self.lengths(slice(a, b))[sel[a:b]].sum())
        return total

    def ns_by_class(self) -> dict[str, int]:
        sums = [0] * len(IDLE_CLASSES)
        for a in range(0, self.start.size, GAP_CHUNK):  # (a chunk at a time: no temporaries the size of the gaps)
            dur, cls = self.lengths(slice(a, a + GAP_CHUNK)), self.cls[a:a + GAP_CHUNK]
            for i in range(len(IDLE_CLASSES)):
                sums[i] += int(dur[cls == i].sum())
        return dict(zip(IDLE_CLASSES, sums))


def _rows_of(sel, n: int) -> np.ndarray:
    """The rows a selection picks, in its order (a mask, indices or a slice of n rows)."""
    if isinstance(sel, slice):
        return np.arange(*sel.indices(n))
    sel = np.asarray(sel)
    return np.flatnonzero(sel) if sel.dtype == bool else sel.astype(np.int64, copy=False)


_INT32_MAX = (1 << 31) - 1


DATA, HOST, SYNC, ALLOC, LAUNCH, COMM, UNEXPLAINED = (
    IDLE_CLASSES.index(c) for c in ("data", "host", "sync", "alloc", "launch", "communication", "unexplained"))
INPUT_COPY_WINDOW_NS = settings.register("timeline.input_copy_window_ns", 50_000, "ns", "a gap ends in the next input's host-to-device copy when the copy starts this close to its end")


def _share(sets, starts: np.ndarray, ends: np.ndarray, dur: np.ndarray) -> np.ndarray | None:
    """Share of each gap the sets cover together; None when they are all empty (share 0)."""
    sets = [s for s in sets if len(s)]
    if not sets:
        return None
    covered = sets[0].overlap(starts, ends)
    for s in sets[1:]:
        covered = covered + s.overlap(starts, ends)
    return covered / dur


def _input_copy_at(ends: np.ndarray, act: HostActivity) -> np.ndarray:
    """For each gap, the host-to-device copy that starts at its end (the next input arriving), as an
    index into act.input_copy; -1 where there is none."""
    c = act.input_copy
    if c.size == 0:
        return np.full(ends.size, -1, dtype=np.int64)
    i = np.searchsorted(c, ends, side="left")
    ok = i < c.size
    np.minimum(i, c.size - 1, out=i)
    near = c[i]
    near -= ends
    ok &= near <= INPUT_COPY_WINDOW_NS.value
    del near
    i[~ok] = -1
    return i


def classify_gaps(starts: np.ndarray, ends: np.ndarray, act: HostActivity, comm_kernels: IntervalSet,
                  queued: np.ndarray | None = None, thread: np.ndarray | None = None) -> np.ndarray:
    """Class of each idle gap (see module doc; an index into IDLE_CLASSES). Later assignments take
    precedence: launch, sync at the gap's start, data, alloc, sync for most of the gap, communication.

    `queued` marks gaps whose next work was already launched when the GPU went idle: the host did
    not hold the GPU up there, so whatever the host was doing, the gap is launch latency. `thread`
    (per gap, the host thread that launched the work ending it) is the thread whose OS calls and
    samples say whether the host computed or waited (an nsys export's side).
    """
    dur = np.maximum(ends - starts, 1)
    cls = np.full(starts.size, UNEXPLAINED, dtype=np.int8)
    short = (ends - starts) <= LAUNCH_GAP_MAX_NS.value
    launch = short.copy()  # short gaps, and long ones the host spends launching
    long_gaps = np.flatnonzero(~short)
    share = _share([act.launch], starts[long_gaps], ends[long_gaps], dur[long_gaps])
    if share is not None:
        launch[long_gaps] = share >= MAJORITY.value
    cls[launch] = LAUNCH
    host_held = np.ones(starts.size, dtype=bool) if queued is None else ~queued
    sync_share = _share([act.sync], starts, ends, dur) if len(act.sync) else None
    sync_at_start = began_at_sync(starts, act)
    if sync_share is not None:  # the queue drained at a sync, then the host had to launch anew
        cls[sync_at_start & host_held] = SYNC
    data = _share([act.data], starts, ends, dur)
    if data is not None:
        cls[(data >= MAJORITY.value) & host_held] = DATA
    # a long gap that ends when the next input is copied in, while the host made (almost) no CUDA
    # calls: the host was preparing that input (a DataLoader, tokenization, Python preprocessing)
    # (the CUDA-call and optimizer shares decide long gaps only: they are measured there, and quiet is
    # False on every short gap)
    cuda = _share([act.cuda], starts[long_gaps], ends[long_gaps], dur[long_gaps])
    quiet = np.zeros(starts.size, dtype=bool)
    quiet[long_gaps] = True if cuda is None else cuda < 1.0 - MAJORITY.value
    input_next = _input_copy_at(ends, act) >= 0
    cls[quiet & host_held & input_next & ~staging_copy(starts, ends, act, thread)] = DATA
    # a long gap that began as a sync returned (results read back), where the host then makes (almost) no
    # CUDA calls and is not inside operators that launch (those are launch latency) but is seen computing
    # (CPU operators, Python frames that launch nothing), outside marked data ranges, and that does not end
    # in the next input's copy: the host computes on what it read back, not on the next input. Without such
    # evidence (an Nsight Systems export: no op tree, no stacks) the host may as well be waiting (on I/O,
    # a sleep): the gap stays with the sync that began it
    marked = _share([act.marked_data], starts, ends, dur) if act.marked_data is not None else None
    unmarked = np.ones(starts.size, dtype=bool) if marked is None else marked < MAJORITY.value
    computing = _share([act.host_cpu], starts, ends, dur) if act.host_cpu is not None else None
    waiting = _waiting(starts, ends, act, thread)
    if act.side is not None and act.side.sees_compute:
        running = act.side.running_share(starts, ends, thread)
        computing = running if computing is None else np.maximum(computing, running)
    if computing is not None:
        cls[~launch & quiet & host_held & sync_at_start & ~input_next & unmarked & ~waiting
            & (computing >= MAJORITY.value)] = HOST
    # the host computes in an optimizer step without CUDA calls (the optimizer runs on CPU tensors); the
    # copies of weights back to the device that end such a gap are not the next input
    host = _share([act.host], starts[long_gaps], ends[long_gaps], dur[long_gaps]) \
        if act.host is not None and len(act.host) else None
    if host is not None:
        mostly_host = np.zeros(starts.size, dtype=bool)
        mostly_host[long_gaps] = host >= MAJORITY.value
        cls[quiet & host_held & mostly_host & (cls != LAUNCH)] = HOST
    if len(act.alloc):
        cls[(_share([act.alloc], starts, ends, dur) >= MAJORITY.value) & host_held] = ALLOC
    if sync_share is not None:  # blocked in a sync for most of the gap: nothing else explains it
        cls[sync_share >= MAJORITY.value] = SYNC  # (even with work queued: it waits on what the sync waits for)
    comm = _share([comm_kernels, act.comm], starts, ends, dur)
    if comm is not None:
        cls[comm >= MAJORITY.value] = COMM
    return cls


def may_stage(act: HostActivity) -> bool:
    """Whether staging_copy can find a gap at all: an export with CPU samples and host-to-device input copies."""
    return act.side is not None and bool(len(act.side.samples)) and bool(len(act.input_copy))


def staging_copy(starts: np.ndarray, ends: np.ndarray, act: HostActivity, thread: np.ndarray | None) -> np.ndarray:
    """Long gaps ending in a host-to-device copy whose launching thread, sampled, sat in the C library (copying the
    host array into a staging buffer) for most of them, outside marked data ranges: the upload of data already in
    host memory, not input being prepared (an export with CPU samples; pooled: samples are sparse)."""
    out = np.zeros(starts.size, dtype=bool)
    side = act.side
    if not may_stage(act):
        return out
    long = (ends - starts) > LAUNCH_GAP_MAX_NS.value
    if not long.any():
        return out
    cand = np.flatnonzero(long & (_input_copy_at(ends, act) >= 0))
    if act.marked_data is not None and len(act.marked_data) and cand.size:
        d = np.maximum(ends[cand] - starts[cand], 1)
        cand = cand[act.marked_data.overlap(starts[cand], ends[cand]) / d < MAJORITY.value]
    if not cand.size:
        return out
    share, n = side.module_share(starts[cand], ends[cand], thread[cand] if thread is not None else None, C_LIBRARY())
    if int(n.sum()) >= MIN_GAP_SAMPLES.value and float((share * n).sum()) >= MAJORITY.value * float(n.sum()):
        out[cand[share >= MAJORITY.value]] = True
    return out


def _waiting(starts: np.ndarray, ends: np.ndarray, act: HostActivity, thread: np.ndarray | None) -> np.ndarray:
    """Gaps the launching thread spends mostly in blocking OS calls (it waits, it does not compute)."""
    if act.side is None or not act.side.sees_waits:
        return np.zeros(starts.size, dtype=bool)
    return act.side.wait_share(starts, ends, thread) >= MAJORITY.value


def _launch_side_host_time(cls: np.ndarray, starts: np.ndarray, ends: np.ndarray, thread: np.ndarray | None,
                           act: HostActivity) -> np.ndarray:
    """Long gaps nothing else explains, in which the thread that launches next runs (outside blocking OS
    calls) and its CPU samples lie mostly in GPU-library host code (cuBLAS-Lt planning for a new shape, the
    CUDA operators' dispatch, the driver): the host is on its way to the next launch, the launch class (a
    torch trace shows the same time inside the launching operator). Samples are sparse (1 kHz against
    sub-millisecond gaps), so they are pooled over all such gaps; too few say nothing."""
    side = act.side
    if side is None or not side.sees_compute or not len(side.samples):
        return cls
    cand = (cls == UNEXPLAINED) & ((ends - starts) > LAUNCH_GAP_MAX_NS.value)
    if not cand.any():
        return cls
    th = thread[cand] if thread is not None else None
    cand[cand] = side.running_share(starts[cand], ends[cand], th) >= MAJORITY.value
    if not cand.any():
        return cls
    in_lib, n = side.library_samples(starts[cand], ends[cand], thread[cand] if thread is not None else None)
    if n >= MIN_GAP_SAMPLES.value and in_lib >= MAJORITY.value * n:
        cls = cls.copy()
        cls[cand] = LAUNCH
    return cls


def began_at_sync(starts: np.ndarray, act: HostActivity) -> np.ndarray:
    """Gaps that began while the host was blocked in a synchronizing call (or as it returned)."""
    if not len(act.sync):
        return np.zeros(starts.size, dtype=bool)
    return act.sync.contains(starts) | act.sync.contains(starts - 1)


def _in_optimizer(starts: np.ndarray, ends: np.ndarray, act: HostActivity) -> np.ndarray:
    """Gaps the host spends mostly inside an optimizer step's CPU work (act.host)."""
    if act.host is None or not len(act.host):
        return np.zeros(starts.size, dtype=bool)
    return _share([act.host], starts, ends, np.maximum(ends - starts, 1)) >= MAJORITY.value


def _cut(gs: np.ndarray, ge: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Split sorted disjoint gaps at the (sorted, distinct) cut points strictly inside them:
    (starts, ends, gap of each piece; None when nothing was cut)."""
    gap = np.searchsorted(gs, cuts, side="left") - 1  # the last gap starting before each cut
    inner = (gap >= 0) & (cuts < ge[np.maximum(gap, 0)])
    cuts, gap = cuts[inner], gap[inner]
    if cuts.size == 0:
        return gs, ge, None
    return (np.insert(gs, gap + 1, cuts), np.insert(ge, gap, cuts),
            np.insert(np.arange(gs.size), gap + 1, gap))


def next_work(dev: DeviceBusy, ge: np.ndarray) -> np.ndarray:
    """Per gap, the compute work ending it: an index into dev.compute_start (its size: none)."""
    return searchsorted(dev.compute_start, ge, "left")  # (gaps in time order: the extension's sorted search)


def next_thread(dev: DeviceBusy, ge: np.ndarray, nxt: np.ndarray | None = None) -> np.ndarray:
    """Per gap, the host thread that launched the compute work ending it (-1: unknown or none); `nxt`:
    next_work's answer, when the caller has it."""
    n = dev.compute_start.size
    if n == 0:
        return np.full(ge.size, -1, np.int64)
    nxt = next_work(dev, ge) if nxt is None else nxt
    return np.where(nxt < n, dev.thread(np.minimum(nxt, n - 1)), -1)


def queued_mask(dev: DeviceBusy, gs: np.ndarray, ge: np.ndarray, nxt: np.ndarray | None = None) -> np.ndarray:
    """Gaps whose next compute work had been launched (its launch call returned) when they began."""
    n = dev.compute_start.size
    if n == 0:
        return np.zeros(gs.size, dtype=bool)
    nxt = next_work(dev, ge) if nxt is None else nxt
    launched = dev.launched(np.minimum(nxt, n - 1))
    return (nxt < n) & (launched >= 0) & (launched <= gs)


GAP_CHUNK = 1 << 16  # gaps classified at a time (bounds the temporaries: ~20 arrays of a chunk's size)
# with CPU samples, a chunk is the pool the sample-based classes are judged over (staging_copy,
# _launch_side_host_time): those keep the larger chunk they were written for
POOLED_GAP_CHUNK = 1 << 20


def merged_around(dev: DeviceBusy, steps: Steps, act: HostActivity) -> HostActivity:
    """act with its host call spans (launches, every call) merged around the long idle gaps of the device's steady
    steps: the only gaps whose class they decide (a short gap is launch whatever the host did), the pieces of
    them, and the sync gaps quiet_after_sync reads."""
    if not isinstance(act.launch, CallSpans) and not isinstance(act.cuda, CallSpans):
        return act
    lo, hi = steps.steady_span
    gaps = GapRange.of(dev.compute, lo, hi)
    starts, ends = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for a in range(0, len(gaps), GAP_CHUNK):
        s, e = gaps.chunk(a, a + GAP_CHUNK)
        long = (e - s) > LAUNCH_GAP_MAX_NS.value
        starts.append(s[long])
        ends.append(e[long])
    starts, ends = np.concatenate(starts), np.concatenate(ends)
    return replace(act, **{name: spans.around(starts, ends) for name in ("launch", "cuda")
                           for spans in [getattr(act, name)] if isinstance(spans, CallSpans)})


def idle_gaps(dev: DeviceBusy, steps: Steps, act: HostActivity) -> Gaps:
    """Spans of the steady steps with no compute work on the device, classified."""
    act = merged_around(dev, steps, act)
    lo, hi = steps.steady_span
    gaps = GapRange.of(dev.compute, lo, hi)  # built a chunk at a time: never held whole beside the pieces
    windows = steps.steady_windows
    cuts = np.unique(np.concatenate((windows.starts, windows.ends)))
    cols, n = None, 0  # start, length, class, after_sync, thread of the kept pieces, filled chunk by chunk
    long_rows, long_ns = [], []  # the kept pieces of 2**31 ns or more: their rows and whole lengths
    thread_ids: dict[int, int] = {}  # launching thread id -> its code
    chunk = POOLED_GAP_CHUNK if act.side is not None and len(act.side.samples) else GAP_CHUNK
    for a in range(0, len(gaps), chunk):
        s, e = gaps.chunk(a, a + chunk)
        nxt = next_work(dev, e)
        by = next_thread(dev, e, nxt)
        cls = classify_gaps(s, e, act, dev.comm, queued_mask(dev, s, e, nxt), by)
        del nxt
        cls = _launch_side_host_time(cls, s, e, by, act)
        at_sync = began_at_sync(s, act) & ~_in_optimizer(s, e, act)  # host work on read-back results
        # classify whole gaps, then cut them at step boundaries so per-step accounting stays exact,
        # keeping only the pieces inside steady step windows
        ps, pe, gap = _cut(s, e, cuts)
        inside = windows.contains(ps + (pe - ps) // 2)
        length = pe - ps  # (a new array: the pieces may be views of the device's intervals)
        pieces = (ps, length, cls if gap is None else cls[gap], at_sync if gap is None else at_sync[gap],
                  None if by is None else (by if gap is None else by[gap]))
        if cols is None:  # sized once (each cut adds at most one piece): no list of chunks to join at the end
            narrow = {1: np.int32, 4: np.int8}  # the lengths (the long ones aside) and the thread codes (widened)
            cols = [None if p is None else np.empty(len(gaps) + cuts.size, narrow.get(i, p.dtype))
                    for i, p in enumerate(pieces)]
        if pieces[4] is not None:  # the threads as codes into the ids seen (a few: int8, wider past 127)
            code, ids = pd.factorize(pieces[4])  # (hashed, in one pass: no sort of the chunk)
            pieces = pieces[:4] + (np.array([thread_ids.setdefault(t, len(thread_ids)) for t in ids.tolist()],
                                            dtype=np.int64)[code],)
            if len(thread_ids) > np.iinfo(cols[4].dtype).max:
                cols[4] = cols[4].astype(np.int16 if len(thread_ids) <= np.iinfo(np.int16).max else np.int32)
        k = int(np.count_nonzero(inside))
        kept = length[inside]
        long = np.flatnonzero(kept > _INT32_MAX)
        if long.size:  # (their lengths aside, clipped in the column)
            long_rows.append(long + n)
            long_ns.append(kept[long])
            np.minimum(length, _INT32_MAX, out=length)
        del kept
        for col, p in zip(cols, pieces):
            if col is not None:
                np.compress(inside, p, out=col[n:n + k])
        n += k
    if cols is None:
        return Gaps(dev.device, np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, dtype=np.int8),
                    np.zeros(0, dtype=bool))
    return Gaps(dev.device, *(None if c is None else c[:n].copy() if n < c.size // 2 else c[:n] for c in cols),
                *((np.concatenate(long_rows), np.concatenate(long_ns)) if long_rows else (np.zeros(0, np.int64),) * 2),
                np.array(list(thread_ids), dtype=np.int64))


def quiet_after_sync(gaps: Gaps, act: HostActivity) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Sync-class long gaps that began at a sync but were not spent in it: the host was out of the sync
    and made (almost) no CUDA calls, with nothing recorded to show it computing (no op tree or stacks,
    no CPU samples): it computed on what it read back, or waited on something else (starts, ends, the
    thread that launched next, when known)."""
    sel = gaps.cls == SYNC
    if gaps.after_sync is not None:
        sel &= gaps.after_sync
    sel = np.flatnonzero(sel)  # (the long ones among these: no temporary of every gap's length)
    sel = sel[gaps.lengths(sel) > LAUNCH_GAP_MAX_NS.value]
    if not sel.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), None
    s, e = gaps.spans(sel)
    th = gaps.threads(sel)
    dur = np.maximum(e - s, 1)
    blocked = _share([act.sync], s, e, dur)
    cuda = _share([act.cuda], s, e, dur)
    quiet = np.ones(s.size, dtype=bool) if cuda is None else cuda < 1.0 - MAJORITY.value
    if blocked is not None:
        quiet &= blocked < MAJORITY.value
    return s[quiet], e[quiet], (th[quiet] if th is not None else None)


def quiet_after_sync_ns(gaps: Gaps, act: HostActivity) -> int:
    """The quiet_after_sync idle the host is not seen waiting in (no blocking OS call covers most of
    the gap): what it did there, the trace does not show. ns over the steady steps."""
    s, e, th = quiet_after_sync(gaps, act)
    return int((e - s)[~_waiting(s, e, act, th)].sum())


def per_step_breakdown(dev: DeviceBusy, steps: Steps, gaps: Gaps, limit: int | None = None) -> list[dict]:
    """For each steady step (the first `limit` only: one dict per step does not scale to the
    millions of "steps" of a degenerate trace): window, busy time, idle time by class (ns). Only the
    steps returned are measured (a gap belongs to the last step that starts at or before it)."""
    idx = steps.steady if limit is None else steps.steady[:limit]
    s, e = steps.start[idx], steps.end[idx]
    busy = dev.busy.overlap(s, e)
    compute = dev.compute.overlap(s, e)
    gs, cls = gaps.start, gaps.cls
    if idx.size < steps.steady.size and is_sorted(gs):  # only the gaps before the first step left out (sorted)
        n = int(np.searchsorted(gs, steps.start[steps.steady[idx.size]], side="left"))
        gs, cls = gs[:n], cls[:n]
    # gap -> (its step, its class) as one bin; the same per-bin sums as one pass per class. A chunk of gaps
    # at a time when the bins are few (each chunk's sums are whole nanoseconds: exact in float64)
    bins = idx.size * len(IDLE_CLASSES)
    chunk = GAP_CHUNK if bins <= GAP_CHUNK else max(gs.size, 1)
    sums = np.zeros(bins)
    for a in range(0, gs.size, chunk):
        cs = gs[a:a + chunk]
        key = np.searchsorted(s, cs, side="right") - 1
        inside = key >= 0
        if idx.size < steps.steady.size:  # gaps from the first step left out on belong to the steps left out
            inside &= cs < steps.start[steps.steady[idx.size]]
        key *= len(IDLE_CLASSES)
        key += cls[a:a + chunk]
        sums += np.bincount(key[inside], weights=gaps.lengths(slice(a, a + cs.size))[inside], minlength=bins)
    sums = sums.reshape(-1, len(IDLE_CLASSES))
    by_cls = {c: sums[:, i] for i, c in enumerate(IDLE_CLASSES)}
    return [{"index": int(i), "label": steps.labels[i], "start_ns": int(s[k]), "end_ns": int(e[k]),
             "busy_ns": int(busy[k]), "compute_ns": int(compute[k]),
             "idle_ns_by_class": {c: int(by_cls[c][k]) for c in IDLE_CLASSES}}
            for k, i in enumerate(idx.tolist())]


def host_gap_evidence(tv: TimelineView, gaps: Gaps, steps: int, act: HostActivity | None = None) -> dict:
    """What the host computed in the host-class gaps: the ranges that cover them most
    (`Optimizer.step#AdamW.step`, the CPU operators inside it), when one covers most of them, the
    innermost Python frame spanning most of them (a trace with stacks), and the functions the launching
    thread was sampled in there (an nsys export with CPU samples). Per steady step."""
    sel = gaps.cls == HOST
    if not sel.any():
        return {}
    gs, ge = gaps.spans(sel)
    out = {}
    text = _covering_ranges(tv, gs, ge, steps, min_top=MAJORITY.value * float((ge - gs).sum()))
    if text:
        out["host_gap_ranges"] = text
    frames = _frames_covering(python_frames_without_calls(tv), gs, ge, steps, MAJORITY.value * float((ge - gs).sum()))
    frame = frames or _python_frame(tv, gs, ge, steps)
    if frame:
        out["host_gap_python"] = frame
    if act is not None and act.side is not None:
        functions = function_text(act.side, gs, ge, gaps.threads(sel))
        if functions:
            out["host_gap_functions"] = functions
    return out


def sync_wait_evidence(gaps: Gaps, act: HostActivity, steps: int, source: str, sync_ns: int, unknown: bool) -> dict:
    """For the sync-class idle after the syncs returned (quiet_after_sync), when it is most of the
    sync-class idle (`sync_ns`): the blocking OS calls the launching thread waited in there, and, where
    part of it stays unknown (`unknown`) and the export recorded no CPU samples or scheduling, how to
    record them (without them the report cannot tell computing from waiting). Nsys exports only: a
    torch trace shows the host computing by its op tree and stacks."""
    s, e, th = quiet_after_sync(gaps, act)
    if s.size == 0 or source != "nsys" or float((e - s).sum()) < MAJORITY.value * sync_ns:
        return {}
    out = {}
    if act.side is not None and act.side.sees_waits:
        text = wait_text(act.side, s, e, th, steps)
        if text:
            out["host_wait_calls"] = text
    if unknown and (act.side is None or not act.side.sees_compute):
        out["host_side_collect"] = COLLECT
    return out


def _frames_covering(py: pd.DataFrame, gs: np.ndarray, ge: np.ndarray, steps: int, min_total: float) -> str:
    """`frame T ms, frame T ms`: the two Python functions that launch nothing and cover the gaps most,
    per steady step; "" unless those frames together cover `min_total` ns of them."""
    if not len(py):
        return ""
    cover = IntervalSet.of(gs, ge).overlap(py["start_ns"].to_numpy(np.int64), py["end_ns"].to_numpy(np.int64))
    hit = cover > 0
    if not hit.any() or IntervalSet.of(py["start_ns"][hit], py["end_ns"][hit]).overlap(gs, ge).sum() < min_total:
        return ""
    by: dict[str, int] = {}
    for n, c in zip(py["name"].to_numpy()[hit].tolist(), cover[hit].tolist()):
        n = OBJECT_ADDRESS().sub("", str(n))  # `<built-in method argsort of numpy.ndarray object at 0x7f..>`
        by[n] = by.get(n, 0) + int(c)
    top = sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
    return ", ".join(f"{n} {ns / 1e6 / steps:.1f} ms" for n, ns in top)


def _python_frame(tv: TimelineView, gs: np.ndarray, ge: np.ndarray, steps: int) -> str:
    """`frame T ms`: the innermost Python frame that spans most of the gaps ("" when none does)."""
    py = tv.tl.ranges
    py = py[(py["kind"] == "python").to_numpy()]
    if not len(py):
        return ""
    total = int((ge - gs).sum())
    cover = IntervalSet.of(gs, ge).overlap(py["start_ns"].to_numpy(np.int64), py["end_ns"].to_numpy(np.int64))
    spans = np.flatnonzero(cover >= MAJORITY.value * total)
    if not spans.size:
        return ""
    length = (py["end_ns"].to_numpy(np.int64) - py["start_ns"].to_numpy(np.int64))[spans]
    inner = spans[np.argmin(length)]
    return f"{py['name'].iloc[inner]} {cover[inner] / 1e6 / steps:.1f} ms"


RANGE_CHUNK = 1 << 16  # ranges measured against the gaps at a time


def ranges_over(r: pd.DataFrame, gs: np.ndarray, ge: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows (ascending) of the host ranges that can name a gap (NVTX, annotations, ops; not steps: a step
    range covers every gap, it names nothing) and overlap the gaps [gs, ge), with that overlap (ns). A chunk of
    rows at a time: no row list or column of every op, only of those inside the gaps."""
    pick = r["kind"].isin(["nvtx", "annotation", "op"]).to_numpy() & ~name_mask(r["name"], PROFILER_STEP) \
        & ~name_mask(r["name"], NVTX_STEP)
    rs, re_ = r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)
    gaps = IntervalSet.of(gs, ge)
    rows, cover = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for lo in range(0, pick.size, RANGE_CHUNK):
        at = np.flatnonzero(pick[lo:lo + RANGE_CHUNK]) + lo
        c = gaps.overlap(rs[at], re_[at])
        hit = c > 0
        rows.append(at[hit])
        cover.append(c[hit])
    return np.concatenate(rows), np.concatenate(cover)


def _covering_ranges(tv: TimelineView, gs: np.ndarray, ge: np.ndarray, steps: int, min_top: float = 0.0) -> str:
    """`name T ms, name T ms`: the two host ranges (NVTX, annotations, ops; not steps) that cover the
    gaps most, per steady step ("" when the first covers less than `min_top` ns in all)."""
    r = tv.tl.ranges
    rows, cover = ranges_over(r, gs, ge)
    by: dict[str, int] = {}
    for n, c in zip(r["name"].iloc[rows].tolist(), cover.tolist()):
        n = EMIT_NVTX_SUFFIX.sub("", str(n))  # one name per op, not per call
        by[n] = by.get(n, 0) + int(c)
    top = sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
    if not top or top[0][1] < min_top:
        return ""
    return ", ".join(f"{n} {ns / 1e6 / steps:.1f} ms" for n, ns in top)


def data_gap_evidence(tv: TimelineView, gaps: Gaps, act: HostActivity, steps: int) -> dict:
    """What the host did in the data-class gaps, for the finding's evidence: the host ranges that
    cover them most (DataLoader `__next__`, an NVTX `data` range, CPU ops) and how many of them end
    in the next input's host-to-device copy, with its size. Per steady step."""
    sel = gaps.cls == DATA
    if not sel.any():
        return {}
    gs, ge = gaps.spans(sel)
    out: dict = {}
    text = _covering_ranges(tv, gs, ge, steps)
    if text:
        out["data_gap_ranges"] = text
    frame = _python_frame(tv, gs, ge, steps)  # the innermost Python frame spanning most of the data gaps
    if frame:
        out["data_gap_python"] = frame
    copy = _input_copy_at(ge, act)
    copy = copy[copy >= 0]
    if copy.size:
        out["data_gaps_ending_in_input_copy"] = float(copy.size) / steps
        out["input_copy_mb"] = float(act.input_copy_bytes[copy].sum()) / 1e6 / steps
    return out
