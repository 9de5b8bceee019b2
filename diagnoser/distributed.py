"""Per-rank work in parallel: one function, `measure_trace`, run in-process, on a local process pool,
or on a Dask cluster.

Each rank's trace is read, normalized and reduced to a MeasuredTimeline (its metrics: step times,
busy / idle classes, NCCL kernels with their times, top kernels...) where it is run; only that
summary travels back, never the tables. At most `jobs` traces (local pool) or the cluster's worker
threads (Dask) are held at once, so memory grows with the workers, not with the ranks; the
cross-rank analysis (the family's `analyse`: timeline.rank_scale.ranks_analysis) then runs on the summaries.

The local pool starts its workers from a fork server, which imports the calling program's main
module as `__mp_main__`: a script that uses `executing(jobs=N)` needs the usual
`if __name__ == "__main__":` guard (the `diagnose` command has it).

Dask (`pip install "diagnoser[dask]"`): `--scheduler tcp://HOST:8786` or DIAGNOSER_SCHEDULER. The
workers need diagnoser installed and must see the traces: a shared filesystem path, or an fsspec
URL (`s3://...`) each worker opens itself. Dask's own futures, retries (DIAGNOSER_DASK_RETRIES,
default 1: a lost worker's ranks run again elsewhere) and worker resources (DIAGNOSER_DASK_RESOURCES,
e.g. `trace=1` with workers started `--resources trace=2`: two traces per worker at a time).
"""
from __future__ import annotations

import os
import re
import resource
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass

from . import run_context
from .errors import DiagnoserError, InputError, unexpected_problem
from .ingest.expansion import is_url
from .text_safety import visible_line

SCHEDULER_ENV = "DIAGNOSER_SCHEDULER"
SCHEDULER_ADDRESS = r"^(?:[a-z]+://)?(?:\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):\d{1,5}$"  # compiled where a scheduler is named
# with --jobs 0 (auto), local rank traces smaller than this in all are measured in-process: starting
# the workers would cost more than they save
AUTO_POOL_MIN_BYTES = 64 << 20


def settings_overrides() -> dict:
    from . import settings
    return settings.current_overrides()


@contextmanager
def executing(jobs: int | None = 1, scheduler: str | None = None):
    """Within this block, load_groups measures rank traces on `jobs` local processes (None or 0: one
    per core) or, when named (or DIAGNOSER_SCHEDULER is set), on the Dask scheduler at `scheduler`: set in
    this diagnosis's run context (diagnoser.run_context), so another thread's diagnosis keeps its own."""
    with run_context.running(run_context.with_execution(jobs, scheduler or os.environ.get(SCHEDULER_ENV) or None)):
        yield


@dataclass
class RankOutcome:
    """What one per-rank task sends back: the summary (or the one-line problem) and what it cost."""

    source: str                 # the input as the user named it
    kind: str | None            # its input kind (sniffed where it was read)
    measured: object | None     # the family's summary (timeline.measure.MeasuredTimeline)
    problem: str | None         # why it could not be diagnosed (one line, no path)
    bytes: int                  # size of the file read
    seconds: float
    cpu_seconds: float          # CPU time this task used (its process's user + system time)
    worker: str                 # host:pid that ran it
    peak_rss_kb: int            # that process's peak RSS so far


@contextmanager
def _local_file(source: str, read_path: str):
    """A local path to read: the file itself, or (an fsspec URL) a copy in a temporary folder on
    this worker, removed afterwards."""
    if not is_url(read_path):
        yield read_path
        return
    try:
        import fsspec
    except ImportError:
        raise InputError(source, "reading a URL needs fsspec: pip install \"diagnoser[dask]\"") from None
    tmp = tempfile.mkdtemp(prefix="diagnoser-")
    try:
        local = os.path.join(tmp, os.path.basename(read_path.rstrip("/")) or "trace")
        try:
            with fsspec.open(read_path, "rb") as src, open(local, "wb") as dst:
                shutil.copyfileobj(src, dst, 4 << 20)
        except Exception as e:  # noqa: BLE001 - any backend's error, on one line
            raise InputError(source, f"cannot fetch ({type(e).__name__}: {e})") from None
        yield local
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure_trace(source: str, kind: str | None = None, read_path: str | None = None,
                  progress: bool = False, overrides: dict | None = None) -> RankOutcome:
    """THE per-rank function: read one timeline trace, measure it, drop its tables, return the summary.
    `source` names it in the report; `read_path` is where this process reads it (an absolute path
    or a URL; default `source`); `kind` is sniffed when not given. Never raises for a bad trace:
    the problem comes back on the outcome, so one corrupt rank does not stop the others.
    `overrides`: the analysis settings in force on the client (`--set`, rule packs); a worker process
    does not share the client's settings, so it measures under them explicitly."""
    from . import settings
    with settings.overridden(overrides or {}):
        return _measure_trace(source, kind, read_path, progress)


def _measure_trace(source: str, kind: str | None, read_path: str | None, progress: bool) -> RankOutcome:
    """Measure one rank (see measure_trace): its family's `measure`, where this process reads it."""
    from .families import family_of
    from .ingest.sniff import sniff

    t0, cpu0 = time.perf_counter(), time.process_time()
    read_path = read_path or source
    size, measured, problem = 0, None, None
    try:
        with _local_file(source, read_path) as local:
            size = os.path.getsize(local) if os.path.isfile(local) else 0
            kind = kind or sniff(local)
            family = family_of(kind)
            if not family.per_rank:
                raise InputError(source, "is not a timeline trace (PyTorch profiler trace or Nsight Systems "
                                         "export); only those are read per rank")
            measured = family.measure(source, local, kind, progress)
    except InputError as e:
        problem = e.problem
    except DiagnoserError as e:
        problem = str(e)
    except MemoryError:
        problem = "ran out of memory while analysing"
    except Exception as e:  # noqa: BLE001 - an analysis bug on one rank must not hide the others
        if os.environ.get("DIAGNOSER_DEBUG"):
            raise
        problem = f"analysis failed: the trace {unexpected_problem(e)}"
    return RankOutcome(source, kind, measured, problem, size, time.perf_counter() - t0, time.process_time() - cpu0,
                       f"{os.uname().nodename}:{os.getpid()}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


class RankProgress:
    """`[ 12/64] trace.rank5.pt.trace.json.gz: 1.1 MB in 0.21 s (5.2 MB/s)` on stderr per finished rank."""

    def __init__(self, total: int, enabled: bool, stream=None):
        self.total, self.enabled, self.stream = total, enabled, stream or sys.stderr
        self.done, self.bytes, self.t0 = 0, 0, time.perf_counter()

    def rank_done(self, o: RankOutcome) -> None:
        self.done += 1
        self.bytes += o.bytes
        if not self.enabled:
            return
        width = len(str(self.total))
        head = f"[{self.done:>{width}}/{self.total}] {visible_line(os.path.basename(o.source.rstrip('/')))}"
        if o.problem:  # file names and what a reader quoted from the input: shown, never acted on
            self.stream.write(f"{head}: FAILED: {visible_line(o.problem)}\n")
        else:
            mb = o.bytes / 1e6
            self.stream.write(f"{head}: {mb:.1f} MB in {o.seconds:.2f} s ({mb / max(o.seconds, 1e-9):.1f} MB/s)\n")
        self.stream.flush()

    def close(self, how: str) -> None:
        if self.enabled and self.total > 1:
            wall = time.perf_counter() - self.t0
            self.stream.write(f"{self.done} rank traces ({self.bytes / 1e6:.0f} MB) measured {visible_line(how)} in {wall:.1f} s: "
                              f"{self.done / max(wall, 1e-9):.1f} ranks/s, {self.bytes / 1e6 / max(wall, 1e-9):.1f} MB/s\n")
            self.stream.flush()


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def measure_traces(items: list[tuple[str, str | None]], jobs: int | None = 1, scheduler: str | None = None,
                   progress: bool = False) -> list[RankOutcome]:
    """Run measure_trace over (source, kind) items: on the Dask scheduler when one is named, else on a
    local pool of `jobs` processes (None/0: one per core; at most one per trace), in-process when that
    is 1. Outcomes come back in the order of `items`."""
    if not items:
        return []
    bar = RankProgress(len(items), progress)
    if scheduler:
        out = _on_dask(items, scheduler, bar)
        bar.close(f"on the Dask cluster at {scheduler}")
        return out
    if not jobs:
        local = [os.path.getsize(s) for s, _ in items if not is_url(s) and os.path.isfile(s)]
        small = len(local) == len(items) and sum(local) < AUTO_POOL_MIN_BYTES
        jobs = 1 if small else default_jobs()
    jobs = min(jobs, len(items))
    if jobs <= 1:
        out = []
        for source, kind in items:  # one trace in memory at a time; the reader's own progress too
            out.append(measure_trace(source, kind, progress=progress and len(items) == 1))
            bar.rank_done(out[-1])
        bar.close("in-process")
        return out
    out = _on_pool(items, jobs, bar)
    bar.close(f"on {jobs} local processes")
    return out


def _on_pool(items, jobs: int, bar: RankProgress) -> list[RankOutcome]:
    """`jobs` ranks measured at a time: `jobs - 1` worker processes and this process. The client would
    otherwise only wait; it measures ranks from the end of the queue, first while the fork server
    starts (about a second of imports), then beside the workers, one rank in memory at a time."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from .families import FAMILIES

    # never a plain fork of this process (it may hold threads and the rule engine): a fork server that
    # imported the readers and analyses once forks the workers (fast: no import per worker), else spawn
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__, "diagnoser.families"]
                                   + [m for f in FAMILIES if f.per_rank for m in f.worker_preload])
    else:
        ctx = multiprocessing.get_context("spawn")
    results: dict[int, RankOutcome] = {}
    pool = ProcessPoolExecutor(max_workers=max(jobs - 1, 1), mp_context=ctx)
    futures: dict = {}
    try:
        overrides = settings_overrides()
        order = [(pool.submit(measure_trace, source, kind, None, False, overrides), i)
                 for i, (source, kind) in enumerate(items)]
        futures = dict(order)
        while futures:
            for fut in [f for f in futures if f.done()]:
                i = futures.pop(fut)
                results[i] = _result(fut, items[i][0])
                bar.rank_done(results[i])
            while order and order[-1][0] not in futures:
                order.pop()
            if order and order[-1][0].cancel():  # still queued: this process measures it
                fut, i = order.pop()
                futures.pop(fut)
                results[i] = measure_trace(items[i][0], items[i][1], None, False, overrides)
                bar.rank_done(results[i])
            elif futures:
                wait(list(futures), return_when=FIRST_COMPLETED)
    except BaseException:  # Ctrl-C, SIGTERM: drop the queued ranks instead of measuring them all first
        for fut in futures:  # each future itself: the pool's own cancel_futures is lost once it is collected
            fut.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return [results[i] for i in range(len(items))]


def _result(fut, source: str) -> RankOutcome:
    """A finished future's outcome; a worker that died (killed for memory, crashed) fails only its rank."""
    try:
        return fut.result()
    except Exception as e:  # noqa: BLE001 - BrokenProcessPool, a Dask KilledWorker, an unpicklable result
        return RankOutcome(source, None, None, f"its worker failed ({type(e).__name__}: {e})", 0, 0.0, 0.0, "", 0)


def _resources() -> dict | None:
    spec = os.environ.get("DIAGNOSER_DASK_RESOURCES", "").strip()
    if not spec:
        return None
    try:
        return {k.strip(): float(v) for k, v in (part.split("=", 1) for part in spec.split(","))}
    except ValueError:
        raise DiagnoserError(f"DIAGNOSER_DASK_RESOURCES={spec!r}: expected NAME=AMOUNT[,NAME=AMOUNT...]") from None


def _on_dask(items, scheduler: str, bar: RankProgress) -> list[RankOutcome]:
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise DiagnoserError("a Dask scheduler was named but Dask is not installed: pip install \"diagnoser[dask]\"") from None
    if not re.match(SCHEDULER_ADDRESS, scheduler):
        raise DiagnoserError(f"scheduler address {scheduler!r}: expected tcp://HOST:PORT (as `dask scheduler` prints it)")
    try:
        retries = int(os.environ.get("DIAGNOSER_DASK_RETRIES", "1"))
    except ValueError:
        raise DiagnoserError("DIAGNOSER_DASK_RETRIES: expected a whole number") from None
    # workers open the files themselves: local paths go as absolute paths (a shared filesystem)
    reads = [s if is_url(s) else os.path.abspath(s) for s, _ in items]
    try:
        client = Client(scheduler, timeout="30s", set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise DiagnoserError(f"cannot reach the Dask scheduler at {scheduler} ({type(e).__name__}: {e})") from None
    results: dict[int, RankOutcome] = {}
    try:
        n = len(items)
        futures = client.map(measure_trace, [s for s, _ in items], [k for _, k in items], reads, [False] * n,
                             [settings_overrides()] * n, pure=False, retries=retries, resources=_resources())
        index = {f.key: i for i, f in enumerate(futures)}
        for fut in as_completed(futures, loop=client.loop):
            i = index[fut.key]
            results[i] = _result(fut, items[i][0])
            fut.release()  # the worker may forget it: only the summary is kept, here
            bar.rank_done(results[i])
        del futures
    finally:
        client.close()
    return [results[i] for i in range(len(items))]


@dataclass
class MeasuredInputs:
    """The inputs' kinds, the timeline traces measured per rank, and the ranks that failed."""

    kinds: dict           # path -> input kind (every input that did not fail)
    measured: dict        # path -> MeasuredTimeline (timeline traces)
    failures: list        # families.rank_files.RankFailure, in input order
    notes: list
    runs: dict = None     # path -> run label within its world size (families.rank_files.run_labels)


def _sniff_here(path: str) -> str | None:
    """The kind of a local input; None for a URL or an unreadable content (the per-rank task sniffs it
    again and reports the problem as that rank's). A file that does not exist fails here, at once."""
    from .ingest.sniff import sniff
    if is_url(path):
        return None
    if not os.path.exists(path):
        return sniff(path)  # raises: no such file
    try:
        return sniff(path)
    except InputError:
        return None


def measure_inputs(paths: list[str], progress: bool = False) -> MeasuredInputs:
    """Sniff every input; measure the timeline traces (and anything that might be one) per rank, as
    `executing()` says."""
    from .families import family_of
    from .families.rank_files import RankFailure, rank_from_name, ranks_from_names, run_labels

    kinds = {p: _sniff_here(p) for p in paths}
    per_rank = [p for p in paths if kinds[p] is None or family_of(kinds[p]).per_rank]
    measured, failures = {}, []
    how = run_context.current()
    for o in measure_traces([(p, kinds[p]) for p in per_rank], how.jobs, how.scheduler, progress):
        if o.measured is None:
            failures.append(RankFailure(o.source, o.problem, rank_from_name(o.source)))
            kinds.pop(o.source, None)
        else:
            kinds[o.source] = o.kind
            measured[o.source] = o.measured
    notes = ranks_from_names([measured[p] for p in per_rank if p in measured])
    return MeasuredInputs(kinds, measured, failures, notes, run_labels(measured))
