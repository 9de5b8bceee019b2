"""GPU busy time and GPU idle gaps, each gap classified by what the host was doing during it.

A gap is a span inside a steady step where no kernel, copy or memset runs on a device. Its class
says why the GPU had nothing to do, judged from the host side:
  communication  an NCCL kernel is the only thing running (waiting for a peer), or the host waits
                 in a collective
  data           the host is loading/preprocessing input: NVTX/annotation data ranges, DataLoader,
                 or CPU operators that launch no GPU work (ops on host tensors)
  sync           the host is blocked in a host-device synchronization when the GPU runs dry
                 (cudaStreamSynchronize / cudaDeviceSynchronize, blocking, device-to-host or pageable
                 copies; `.item()` shows up as its device-to-host copy plus stream sync)
  launch         short gaps while the host is launching work: the GPU waits for the next launch
  unexplained    long gaps with no recognized host activity (Python work, sleeps, other threads)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..timeline.tables import Timeline
from .timeline_intervals import IntervalSet
from .timeline_names import name_mask
from .timeline_steps import PHASE_PATTERNS, Steps

IDLE_CLASSES = ("data", "sync", "launch", "communication", "unexplained")

SYNC_API = re.compile(r"^(?:cuda|cu)(?:Stream|Device|Event|Ctx)Synchronize|^cudaMemcpy(?:2D|3D)?(?:_v\d+)?$|"
                      r"^cuMemcpy(?:DtoH|HtoD|DtoD)?(?:_v\d+)?$")
MEMCPY_API = re.compile(r"^(?:cudaMemcpy|cuMemcpy)")
# ops that read a value back to the host; they sync only when they copy (the API calls say so),
# so they are never counted as CPU-side data work
SYNC_OPS = re.compile(r"^aten::(?:item|_local_scalar_dense|is_nonzero|nonzero)$")
LAUNCH_API = re.compile(r"^(?:cudaLaunch|cuLaunch|cudaGraphLaunch|cuGraphLaunch|cudaMemsetAsync|cudaMemcpyAsync|"
                        r"cuMemsetD)")
COMM_RANGES = re.compile(r"^nccl:|ProcessGroupNCCL|^c10d::|record_param_comms", re.I)
COMM_KERNEL = re.compile(r"nccl", re.I)
NCCL_API = re.compile(r"^nccl")
DATA_RANGE = PHASE_PATTERNS["data"]

LAUNCH_GAP_MAX_NS = 100_000   # a gap this short with the host busy launching is launch overhead
MAJORITY = 0.5                # share of a gap a host activity must cover to explain it


@dataclass
class HostActivity:
    """Where on the host clock each recognized activity happens (any host thread)."""

    data: IntervalSet
    sync: IntervalSet
    launch: IntervalSet
    comm: IntervalSet
    pageable_copy: IntervalSet  # host calls that copied from/to pageable memory


def _top_level_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """Operators not nested in an earlier operator of the same thread."""
    out = []
    for _, g in ops.groupby("thread", sort=True):
        g = g.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable")
        e = g["end_ns"].to_numpy()
        prev_max = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]))
        out.append(g[e > prev_max])
    return pd.concat(out) if out else ops


def _calls_inside(ops: pd.DataFrame, host: pd.DataFrame) -> np.ndarray:
    """How many host API calls start inside each op, on the op's own thread."""
    counts = np.zeros(len(ops), dtype=np.int64)
    for thread, g in ops.groupby("thread", sort=False):
        calls = np.sort(host.loc[host["thread"] == thread, "start_ns"].to_numpy())
        lo = np.searchsorted(calls, g["start_ns"].to_numpy(), side="left")
        hi = np.searchsorted(calls, g["end_ns"].to_numpy(), side="right")
        counts[ops.index.get_indexer(g.index)] = hi - lo
    return counts


def host_activity(tl: Timeline) -> HostActivity:
    host, ranges, gpu = tl.host, tl.ranges, tl.gpu
    copies = gpu[gpu["kind"] == "memcpy"]
    blocking_corr = set(copies.loc[(copies["copy_kind"] == "DtoH") | copies["pageable"], "correlation"].tolist())
    pageable_corr = set(copies.loc[copies["pageable"], "correlation"].tolist())
    is_copy_call = name_mask(host["name"], MEMCPY_API)
    sync_calls = host[name_mask(host["name"], SYNC_API) | (is_copy_call & host["correlation"].isin(blocking_corr).to_numpy())]
    ops = ranges[ranges["kind"] == "op"]
    sync = IntervalSet.of(sync_calls["start_ns"], sync_calls["end_ns"])

    marked_data = ranges[ranges["kind"].isin(["nvtx", "annotation"]).to_numpy() & name_mask(ranges["name"], DATA_RANGE)]
    top = _top_level_ops(ops.reset_index(drop=True))
    cpu_only = top[_calls_inside(top, host) == 0] if len(top) else top
    cpu_only = cpu_only[~name_mask(cpu_only["name"], SYNC_OPS)]
    data = IntervalSet.of(np.concatenate((marked_data["start_ns"], cpu_only["start_ns"])),
                          np.concatenate((marked_data["end_ns"], cpu_only["end_ns"])))

    launch_calls = host[name_mask(host["name"], LAUNCH_API)]
    launching_ops = top[_calls_inside(top, host) > 0] if len(top) else top
    launch = IntervalSet.of(np.concatenate((launch_calls["start_ns"], launching_ops["start_ns"])),
                            np.concatenate((launch_calls["end_ns"], launching_ops["end_ns"])))

    comm_r = ranges[name_mask(ranges["name"], COMM_RANGES)]
    comm_calls = host[name_mask(host["name"], NCCL_API)]
    comm = IntervalSet.of(np.concatenate((comm_r["start_ns"], comm_calls["start_ns"])),
                          np.concatenate((comm_r["end_ns"], comm_calls["end_ns"])))
    pc = host[is_copy_call & host["correlation"].isin(pageable_corr)]
    return HostActivity(data, sync, launch, comm, IntervalSet.of(pc["start_ns"], pc["end_ns"]))


@dataclass
class DeviceBusy:
    device: int
    busy: IntervalSet      # any activity (kernels, copies, memsets, NCCL included)
    compute: IntervalSet   # activity other than communication kernels
    comm: IntervalSet      # NCCL kernels
    compute_start: np.ndarray      # start of each compute activity, sorted
    compute_launched: np.ndarray   # when its launch call returned on the host (-1: unknown)


def device_busy(tl: Timeline) -> list[DeviceBusy]:
    out = []
    gpu = tl.gpu
    calls = tl.host[tl.host["correlation"] >= 0].drop_duplicates("correlation")
    returned = pd.Series(calls["end_ns"].to_numpy(), index=calls["correlation"].to_numpy())
    for dev, g in gpu.groupby("device", sort=True):
        is_comm = (g["kind"] == "kernel").to_numpy() & name_mask(g["name"], COMM_KERNEL)
        s, e = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
        launched = g["correlation"].map(returned).fillna(-1).to_numpy(dtype=np.int64)
        cs, cl = s[~is_comm], launched[~is_comm]
        order = np.argsort(cs, kind="stable")
        out.append(DeviceBusy(int(dev), IntervalSet.of(s, e), IntervalSet.of(s[~is_comm], e[~is_comm]),
                              IntervalSet.of(s[is_comm], e[is_comm]), cs[order], cl[order]))
    return out


@dataclass
class Gaps:
    """Idle gaps of one device in the steady steps; times in ns."""

    device: int
    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray  # one of IDLE_CLASSES per gap


def classify_gaps(starts: np.ndarray, ends: np.ndarray, act: HostActivity, comm_kernels: IntervalSet,
                  queued: np.ndarray | None = None) -> np.ndarray:
    """Class of each idle gap (see module doc), decided in order: communication, data, sync, launch.

    `queued` marks gaps whose next work was already launched when the GPU went idle: the host did
    not hold the GPU up there, so whatever the host was doing, the gap is launch latency.
    """
    dur = np.maximum(ends - starts, 1)
    comm = (comm_kernels.overlap(starts, ends) + act.comm.overlap(starts, ends)) / dur
    data = act.data.overlap(starts, ends) / dur
    sync_share = act.sync.overlap(starts, ends) / dur
    sync_at_start = act.sync.contains(starts) | act.sync.contains(starts - 1)
    launch_share = act.launch.overlap(starts, ends) / dur
    cls = np.full(starts.size, "unexplained", dtype=object)
    short = (ends - starts) <= LAUNCH_GAP_MAX_NS
    launch = short | (launch_share >= MAJORITY)
    cls[launch] = "launch"
    host_held = np.ones(starts.size, dtype=bool) if queued is None else ~queued
    sync = (sync_at_start | (sync_share >= MAJORITY)) & host_held
    cls[sync] = "sync"
    cls[(data >= MAJORITY) & host_held] = "data"
    cls[comm >= MAJORITY] = "communication"
    return cls


def idle_gaps(dev: DeviceBusy, steps: Steps, act: HostActivity) -> Gaps:
    """Spans of the steady steps with no compute work on the device, classified."""
    lo, hi = steps.steady_span
    gs, ge = dev.compute.gaps(lo, hi)
    windows = steps.steady_windows
    nxt = np.searchsorted(dev.compute_start, ge, side="left")
    launched = dev.compute_launched[np.minimum(nxt, max(dev.compute_start.size - 1, 0))] if dev.compute_start.size else np.full(ge.size, -1)
    queued = (nxt < dev.compute_start.size) & (launched >= 0) & (launched <= gs)
    cls = classify_gaps(gs, ge, act, dev.comm, queued)
    # classify whole gaps, then cut them at step boundaries so per-step accounting stays exact,
    # keeping only the pieces inside steady step windows
    cuts = np.concatenate((windows.starts, windows.ends))
    if gs.size:
        edges = np.sort(np.concatenate((gs, ge, cuts)))
        edges = edges[np.concatenate(([True], edges[1:] != edges[:-1]))]
        mids = edges[:-1] + (edges[1:] - edges[:-1]) // 2
        owner = np.searchsorted(gs, mids, side="right") - 1
        inside = (owner >= 0) & (mids < ge[np.maximum(owner, 0)]) & windows.contains(mids)
        gs, ge, cls = edges[:-1][inside], edges[1:][inside], cls[owner[inside]]
    return Gaps(dev.device, gs, ge, cls)


def per_step_breakdown(dev: DeviceBusy, steps: Steps, gaps: Gaps) -> list[dict]:
    """For each steady step: window, busy time, idle time by class (ns)."""
    idx = steps.steady
    s, e = steps.start[idx], steps.end[idx]
    busy = dev.busy.overlap(s, e)
    compute = dev.compute.overlap(s, e)
    step_of_gap = np.searchsorted(s, gaps.start, side="right") - 1
    dur = gaps.end - gaps.start
    by_cls = {}
    for c in IDLE_CLASSES:
        sel = (gaps.cls == c) & (step_of_gap >= 0)
        by_cls[c] = np.bincount(step_of_gap[sel], weights=dur[sel], minlength=idx.size)
    return [{"index": int(i), "label": steps.labels[i], "start_ns": int(s[k]), "end_ns": int(e[k]),
             "busy_ns": int(busy[k]), "compute_ns": int(compute[k]),
             "idle_ns_by_class": {c: int(by_cls[c][k]) for c in IDLE_CLASSES}}
            for k, i in enumerate(idx.tolist())]
