"""SYNTHETIC many-rank runs for the scale benchmark and tests, made by replicating REAL rank traces.

The real 2-GPU DDP run `ddp_straggler` (fixtures/torch, H200, see ../shared/corpus/README.md) has one
rank that waits in NCCL (rank 0) and one real straggler (rank 1: 60 ms of host work before its
forward). A synthetic N-rank run is N-1 copies of the waiting rank and one copy of the straggler at
a chosen rank; every copy gets its own jitter (its whole timeline stretched by 1 +- `jitter` and
shifted in time) and its distributedInfo rewritten (rank, world size, pg_config over all N ranks).
The files say so: a top-level "diagnoserSynthetic" key and the name `synthetic_ddp.rankN...`.
Nothing here is a real N-rank measurement: the cross-rank numbers are only as real as the replicas.
"""
from __future__ import annotations

import copy
import gzip
import os
import random
from pathlib import Path

import msgspec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "torch"
WAITER = FIXTURES / "ddp_straggler.rank0.pt.trace.json.gz"
STRAGGLER = FIXTURES / "ddp_straggler.rank1.pt.trace.json.gz"
# what `shrink` drops: CPU ops and flow events (diagnoser's straggler analysis reads neither) and the
# record_shapes arguments
DROPPED_CATS = {"cpu_op", "ac2g", "fwdbwd"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def load(path: Path) -> dict:
    with gzip.open(path, "rb") as f:
        return msgspec.json.decode(f.read())


def shrink(trace: dict, steps: int = 3) -> dict:
    """A smaller trace for fast tests: the first `steps` profiler steps only (the first is warm-up),
    CPU ops, flow events and shape arguments dropped."""
    out = dict(trace)
    starts = sorted(e["ts"] for e in trace["traceEvents"]
                    if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation")
    cutoff = starts[steps] if len(starts) > steps else float("inf")  # host side: before step steps+1 begins
    launched = {e["args"].get("correlation") for e in trace["traceEvents"]
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("ts", 0) < cutoff and isinstance(e.get("args"), dict)}
    events = []
    for e in trace["traceEvents"]:
        if e.get("cat") in DROPPED_CATS:
            continue
        if e.get("cat") in GPU_CATS:  # device side: what the kept host calls launched
            if (e.get("args") or {}).get("correlation") not in launched:
                continue
        elif isinstance(e.get("ts"), (int, float)) and e["ts"] >= cutoff:
            continue
        args = e.get("args")
        if isinstance(args, dict) and any(k in args for k in SHAPE_ARGS):
            e = dict(e, args={k: v for k, v in args.items() if k not in SHAPE_ARGS})
        events.append(e)
    out["traceEvents"] = events
    return out


def replica(trace: dict, rank: int, world: int, origin: str, rng: random.Random, jitter: float) -> dict:
    """One synthetic rank: `trace` stretched by 1 +- jitter, shifted up to 1 ms, renamed rank `rank` of `world`."""
    scale = 1.0 + rng.uniform(-jitter, jitter)
    shift = rng.uniform(0.0, 1000.0)  # us
    events = trace["traceEvents"]
    t0 = min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)))
    out_events = []
    for e in events:
        e = dict(e)
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = t0 + (e["ts"] - t0) * scale + shift
        if isinstance(e.get("dur"), (int, float)):
            e["dur"] = e["dur"] * scale
        args = e.get("args")
        if isinstance(args, dict) and "Rank" in args:
            e["args"] = dict(args, Rank=rank)
        out_events.append(e)
    out = {k: v for k, v in trace.items() if k != "traceEvents"}
    dist = copy.deepcopy(out.get("distributedInfo") or {})
    dist.update(rank=rank, world_size=world)
    for pg in dist.get("pg_config") or []:
        pg.update(pg_size=world, ranks=list(range(world)))
    out["distributedInfo"] = dist
    out["diagnoserSynthetic"] = (f"SYNTHETIC rank {rank} of {world}: a replica of the real trace {origin}, "
                                 f"timeline stretched by {scale:.4f} and shifted {shift:.0f} us")
    out["traceEvents"] = out_events
    return out


def write_run(out_dir: str | os.PathLike, world: int, straggler_rank, seed: int = 0, jitter: float = 0.02,
              small: bool = False, gz: bool = True, ranks=None) -> list[Path]:
    """Write a synthetic `world`-rank run into out_dir (rank files synthetic_ddp.rankN.pt.trace.json[.gz]);
    `straggler_rank` is one rank or several (a slow node); `ranks` limits which rank files are written
    (default all). Returns the paths written."""
    stragglers = {straggler_rank} if isinstance(straggler_rank, int) else set(straggler_rank)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bases = {}
    for key, path in (("waiter", WAITER), ("straggler", STRAGGLER)):
        t = load(path)
        bases[key] = (shrink(t) if small else t, path.name)
    enc = msgspec.json.Encoder()
    written = []
    for r in (range(world) if ranks is None else ranks):
        trace, origin = bases["straggler" if r in stragglers else "waiter"]
        data = enc.encode(replica(trace, r, world, origin, random.Random(seed * 100003 + r), jitter))
        name = out / f"synthetic_ddp.rank{r}.pt.trace.json{'.gz' if gz else ''}"
        if gz:
            with open(name, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1, mtime=0) as g:
                g.write(data)
        else:
            name.write_bytes(data)
        written.append(name)
    return written
