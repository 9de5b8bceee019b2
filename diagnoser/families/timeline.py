"""The timeline family: Nsight Systems exports and PyTorch traces, one rank per input, read into one
table schema (diagnoser.timeline.tables) and measured where they are read (diagnoser.timeline.measure);
the ranks of a run analysed together (diagnoser.timeline.rank_scale)."""
from __future__ import annotations

from ..errors import InputError
from ..input_family import Family, Reader, RunRole
from ..timeline.catalogue import CATALOGUE
from . import reading


def _nsys_sqlite(path, progress: bool = False):
    from ..ingest.nsys_sqlite import read_nsys_sqlite
    return read_nsys_sqlite(path, progress=progress)


def _nsys_rep(path, progress: bool = False):
    from ..ingest.nsys_rep import read_nsys_rep
    return read_nsys_rep(path, progress=progress)


def _torch_trace(path, progress: bool = False):
    from ..ingest.torch_trace import read_torch_trace
    return read_torch_trace(path, progress=progress)


NO_GPU_ACTIVITY = {
    "torch-trace": "no GPU activity: the trace holds no kernel, copy or memset, so there is nothing to diagnose; "
                   "record the GPU too: torch.profiler.profile(activities=[ProfilerActivity.CPU, "
                   "ProfilerActivity.CUDA]) around a few steady steps",
    "nsys-sqlite": "no GPU activity: the export holds no kernel, copy or memset, so there is nothing to diagnose; "
                   "trace CUDA: `nsys profile -t cuda,nvtx,osrt` around a few steady steps",
}
NO_GPU_ACTIVITY["nsys-rep"] = NO_GPU_ACTIVITY["nsys-sqlite"]

READERS = (Reader("nsys-sqlite", _nsys_sqlite), Reader("nsys-rep", _nsys_rep), Reader("torch-trace", _torch_trace))
_BY_KIND = {r.kind: r for r in READERS}


def measure(source: str, local: str, kind: str, progress: bool = False):
    """One rank's trace read, its claimed rank checked, measured (timeline.measure.MeasuredTimeline);
    its tables dropped. `source` names it in the report, `local` is where this process reads it."""
    from ..timeline.measure import measure_timeline
    tl = reading.read_with(_BY_KIND[kind], local, progress)
    tl.path = source
    if not len(tl.gpu):  # nothing ran on a GPU: nothing to diagnose, never a quiet "no rule fired"
        raise InputError(source, NO_GPU_ACTIVITY.get(kind, NO_GPU_ACTIVITY["torch-trace"]))
    if tl.rank is not None and tl.world_size:
        reading.check_ranks(source, tl)  # a rank outside its world is a corrupt rank: named, the others go on
    return measure_timeline(tl)


def analyse(measured: list):
    from ..timeline.rank_scale import ranks_analysis
    return ranks_analysis(measured)


def settings() -> tuple:
    from ..timeline import attention, autotune, decode_prefix, gaps, gil, kernels, measure, roofline, setup, steps, sync
    return attention, autotune, decode_prefix, gaps, gil, kernels, measure, roofline, setup, steps, sync


FAMILY = Family("timeline", READERS, measure, analyse, tuple(CATALOGUE), settings, RunRole.TIMELINE, per_rank=True,
                worker_preload=("diagnoser.ingest.torch_trace", "diagnoser.ingest.nsys_sqlite",
                                "diagnoser.timeline.measure", "diagnoser.timeline.rank_scale"))
