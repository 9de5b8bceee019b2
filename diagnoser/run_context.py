"""One diagnosis's run context: the analysis settings it overrides (`--set`, rule packs' `settings:`)
and where it measures rank traces (`--jobs`, `--scheduler`).

It travels as a context variable, set for the length of one diagnosis (`running`), not as module
globals: two diagnoses with different settings run side by side in one process (two threads, or two
tasks of one event loop), each reading its own. A context variable rather than an argument because the
settings are read where each analysis decides (`Setting.value`, in every analysis module): passing the
context explicitly would thread one more argument through every reader and analysis. A worker process
(local pool, Dask) does not share it: distributed.measure_trace receives the overrides and runs under them.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Iterator, Mapping, Union

Value = Union[int, float, str, bool]


@dataclass(frozen=True)
class RunContext:
    """What one diagnosis runs under: settings overrides by name, and how per-rank work runs (`jobs`
    local processes, None or 0: one per core; or the Dask scheduler at `scheduler`)."""

    overrides: Mapping[str, Value] = field(default_factory=lambda: MappingProxyType({}))
    jobs: int | None = 1
    scheduler: str | None = None


_CURRENT: ContextVar[RunContext] = ContextVar("diagnoser_run_context", default=RunContext())


def current() -> RunContext:
    """The run context in force here (the defaults outside any diagnosis)."""
    return _CURRENT.get()


@contextlib.contextmanager
def running(context: RunContext) -> Iterator[RunContext]:
    """Run the block under `context` (the previous one back afterwards, even on error)."""
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)


def with_overrides(values: Mapping[str, Value]) -> RunContext:
    """The current context with `values` over its overrides."""
    now = current()
    return replace(now, overrides=MappingProxyType({**now.overrides, **values}))


def with_execution(jobs: int | None, scheduler: str | None) -> RunContext:
    """The current context with per-rank work on `jobs` processes or the scheduler at `scheduler`."""
    return replace(current(), jobs=jobs, scheduler=scheduler)
