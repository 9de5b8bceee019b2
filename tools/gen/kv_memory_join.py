"""Memory inputs beside timelines of another tool or another process (issue 11: which memory input is of
which run). New code; the decoder and workload are kv_memory_sources.py's `s_decode_b1_roomy` (batch 1,
a 512-token prompt, a torch.cat cache: the device >99% free, the GPU underfed).

  python3 kv_memory_join.py MODE --out DIR [--steps N]

MODE (one process each; the driver run_kv_memory_join.sh runs them):
  nsys_snap    no torch profiler; the memory history on from before the model exists; decode N tokens;
               dump DIR/j_b1_nsys.snapshot.pickle.gz. The driver runs this process under
               `nsys profile` (whole process), so the Nsight Systems export j_b1_nsys.sqlite.gz and the
               snapshot are of ONE process at one time: they must join by time.
  stack_trace  torch.profiler with with_stack=True (the trace names this script's Python files),
               schedule(wait=1, warmup=2, active=N), no memory history: DIR/j_b1_stack.pt.trace.json.gz.
  snap_only    no profiler, the memory history on; the same decode; DIR/j_b1_snap.snapshot.pickle.gz: a
               snapshot of ANOTHER process of the same program as j_b1_stack (minutes apart): it must join
               by the Python files both name, not by time.
GEN_DEVICE=cpu runs stack_trace at toy sizes on a CPU to check the logic (the snapshots need CUDA).
"""
import argparse
import json
import os
import pickle
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

from kv_memory_sources import PROMPT, WARMUP, WAIT, decoder, write_gz  # noqa: E402
from kv_scenarios import CUDA, DEV  # noqa: E402


def run(mode: str, steps: int, out: str) -> dict:
    torch.manual_seed(0)
    if CUDA and mode in ("nsys_snap", "snap_only"):
        torch.cuda.memory._record_memory_history(max_entries=5000, stacks="python")
    model, vocab, _ = decoder()
    cache = [None] * len(model.layers)
    ids = torch.randint(0, vocab, (1, PROMPT), device=DEV)
    t0 = time.time()
    with torch.no_grad():
        nxt = model.forward_growing(ids, 0, cache).argmax(-1, keepdim=True)  # prefill
        total = WAIT + WARMUP + steps
        if mode == "stack_trace":
            trace = os.path.join(out, "j_b1_stack.pt.trace.json")
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
            with profile(activities=acts, with_stack=True, record_shapes=False, profile_memory=False,
                         schedule=schedule(wait=WAIT, warmup=WARMUP, active=steps, repeat=1),
                         on_trace_ready=lambda p: p.export_chrome_trace(trace)) as prof:
                for t in range(total):
                    nxt = model.forward_growing(nxt, PROMPT + t, cache).argmax(-1, keepdim=True)
                    prof.step()
            with open(trace) as f:
                events = json.load(f)
            write_gz(trace + ".gz", json.dumps(events, separators=(",", ":")).encode())
            os.remove(trace)
        else:
            for t in range(total):
                nxt = model.forward_growing(nxt, PROMPT + t, cache).argmax(-1, keepdim=True)
    if CUDA:
        torch.cuda.synchronize()
    log = {"mode": mode, "steps": total, "wall_s": round(time.time() - t0, 3), "unix_start": t0}
    if CUDA and mode in ("nsys_snap", "snap_only"):
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        name = "j_b1_nsys" if mode == "nsys_snap" else "j_b1_snap"
        write_gz(os.path.join(out, f"{name}.snapshot.pickle.gz"), pickle.dumps(snap))
        times = [e["time_us"] for tr in snap["device_traces"] for e in tr if e.get("time_us")]
        log.update(snapshot=name, history_us=[min(times), max(times)] if times else None,
                   reserved=torch.cuda.memory_reserved(), allocated=torch.cuda.memory_allocated())
    return log


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["nsys_snap", "stack_trace", "snap_only"])
    p.add_argument("--out", default=".")
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = run(a.mode, a.steps, a.out)
    with open(os.path.join(a.out, f"join_{a.mode}.log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print(json.dumps(log), flush=True)


if __name__ == "__main__":
    main()
