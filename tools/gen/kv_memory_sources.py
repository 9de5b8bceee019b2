"""KV-cache decode: one process writes a timeline AND the allocator's view of the same steps (issue 11).

  python3 kv_memory_sources.py NAME [NAME ...] --out DIR [--steps 3] [--max-entries N] [--mode plain]

For each workload, one process (this one, for one NAME; the driver run_kv_memory.sh starts one process
per workload so every file sees a fresh allocator) writes, from the same decode steps:
  DIR/NAME.pt.trace.json.gz      torch.profiler, CPU + CUDA, record_shapes=True, profile_memory=False,
                                 with_stack=False, schedule(wait=1, warmup=2, active=STEPS), one
                                 prof.step() per decoded token; re-serialized compactly (no indentation,
                                 every event and argument kept, record_shapes' Input Dims / Input type too)
  DIR/NAME.snapshot.pickle.gz    torch.cuda.memory._snapshot(), history recorded with
                                 _record_memory_history(max_entries=N, stacks="python") from before the
                                 model and the cache are created (every live block carries the Python
                                 frames that allocated it; the ring buffer keeps the last N alloc/free
                                 events: 5000 holds the whole process's history here); taken right after
                                 the profiled steps. torch.profiler's step annotations land in it too
                                 (`external_annotations`: ProfilerStep#N START/END, same clock as the trace)
  DIR/NAME.memory_stats.json     json.dump(torch.cuda.memory_stats()) at the same moment, nothing else
  DIR/NAME.log.json              what this script measured then (not a fixture): mem_get_info, nvidia-smi,
                                 the cache tensors' shapes / bytes / addresses, wall time per step

Workloads: the decoder of kv_scenarios.py (`Decoder`, its `Layer`, forward_growing / forward_static,
imported), here 4 layers of d=2048 (16 heads of 128) instead of 8 x 1024 so that 3 profiled steps with
record_shapes stay small, at the same KV bytes per token and sequence (2 x 4 x 2048 x 2 B = 32 KiB):
  s_decode_cache_full  kv_cache_memory: batch 32, a static cache preallocated for max_len 131072
                       (2 x [4, 32, 16, 131072, 128] fp16 = 2 x 64 GiB): <10% of the device free
  s_decode_cache_fit   (twin) batch 32, the static cache sized for the 4096 tokens it uses (2 x 2 GiB)
  s_decode_b1_roomy    small_batch: batch 1, a 512-token prompt, the cache grown by torch.cat; 99.5% of the
                       device free over what the allocator reserved (99.0% by mem_get_info: the CUDA context)
  s_decode_b64_roomy   (twin) the same at batch 64
--mode plain decodes the same steps without the profiler or the memory history (to run under
`nsys profile --cuda-memory-usage=true`; Kineto and Nsight Systems both want CUPTI) and writes only the log.
GEN_DEVICE=cpu runs them at toy sizes on a CPU (trace only: the snapshot and memory_stats are CUDA's).
"""
import argparse
import contextlib
import gzip
import json
import os
import pickle
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

from kv_scenarios import CUDA, DEV, Decoder, size  # noqa: E402

WAIT, WARMUP = 1, 2
PROMPT = size(512, 8)
WORKLOADS = {
    "s_decode_cache_full": dict(cache="static", batch=32, max_len=size(128 * 1024, 1024)),
    "s_decode_cache_fit": dict(cache="static", batch=32, max_len=size(4096, 1024)),
    "s_decode_b1_roomy": dict(cache="growing", batch=1),
    "s_decode_b64_roomy": dict(cache="growing", batch=64),
}


def decoder():
    vocab, d, heads, layers = size((32000, 2048, 16, 4), (256, 32, 4, 2))
    dt = torch.float16 if CUDA else torch.float32
    # cast on the host, then move (kv_scenarios moves fp32 weights and casts on the GPU): no transient
    # fp32 copy of the weights (2 x 0.7 GB at d=2048) stays reserved in the allocator
    return Decoder(vocab, d, heads, layers, size(8192, 512)).to(dt).to(DEV).eval(), vocab, dt


def write_gz(path, data):
    with open(path, "wb") as f:  # mtime 0: the same content gives the same bytes
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as g:
            g.write(data)


def nvidia_smi():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        used, total = (int(x) for x in out.splitlines()[0].split(","))
        return {"used_mib": used, "total_mib": total}
    except Exception as e:  # a measurement aid only
        return {"error": str(e)}


@torch.no_grad()
def decode(name, steps, out, plain=False):
    """Build the model and cache, decode WAIT + WARMUP + steps tokens under the profiler, then dump the
    allocator's view while the model and cache are still alive."""
    w = WORKLOADS[name]
    model, vocab, dt = decoder()
    L, B, H = len(model.layers), w["batch"], model.layers[0].h
    Dh = model.tok.embedding_dim // H
    ids = torch.randint(0, vocab, (B, PROMPT), device=DEV)
    if w["cache"] == "static":
        ck = torch.zeros((L, B, H, w["max_len"], Dh), dtype=dt, device=DEV)
        cv = torch.zeros_like(ck)

        def forward(x, pos):
            return model.forward_static(x, pos, ck, cv)
    else:
        cache = [None] * L

        def forward(x, pos):
            return model.forward_growing(x, pos, cache)
    trace = os.path.join(out, f"{name}.pt.trace.json")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    nxt = forward(ids, 0).argmax(-1, keepdim=True)  # prefill (step 0 of the schedule: not recorded)
    wall = []
    prof_ctx = contextlib.nullcontext() if plain else profile(
        activities=acts, record_shapes=True, profile_memory=False, with_stack=False,
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(trace))
    with prof_ctx as prof:
        for t in range(WAIT + WARMUP + steps):
            t0 = time.perf_counter()
            nxt = forward(nxt, PROMPT + t).argmax(-1, keepdim=True)
            if prof is not None:
                prof.step()
            wall.append(time.perf_counter() - t0)
    if CUDA:
        torch.cuda.synchronize()
    if plain:
        return {"workload": name, "mode": "plain", "wall_s_per_step": [round(x, 5) for x in wall]}
    log = {"workload": name, **w, "layers": L, "d_model": model.tok.embedding_dim, "heads": H, "head_dim": Dh,
           "prompt": PROMPT, "steps_profiled": steps, "wall_s_per_step": [round(x, 5) for x in wall]}
    if CUDA:  # the same moment for all three views: right after the profiled steps, cache alive
        snap = torch.cuda.memory._snapshot()
        stats = torch.cuda.memory_stats()
        free, total = torch.cuda.mem_get_info()
        log.update(mem_get_info={"free": free, "total": total, "free_pct": round(100 * free / total, 2)},
                   nvidia_smi=nvidia_smi(), memory_allocated=torch.cuda.memory_allocated(),
                   memory_reserved=torch.cuda.memory_reserved(), max_memory_allocated=torch.cuda.max_memory_allocated(),
                   max_memory_reserved=torch.cuda.max_memory_reserved(),
                   snapshot_segments=len(snap["segments"]),
                   snapshot_trace_entries=sum(len(t) for t in snap.get("device_traces", [])))
        kv = [("ck", ck), ("cv", cv)] if w["cache"] == "static" else \
             [(f"layer{i}.{kn}", c) for i, kv_ in enumerate(cache) for kn, c in zip("kv", kv_)]
        log["cache_tensors"] = [{"name": n, "shape": list(c.shape), "dtype": str(c.dtype), "bytes": c.nbytes,
                                 "data_ptr": c.data_ptr()} for n, c in kv]
        log["cache_bytes"] = sum(c.nbytes for _, c in kv)
        write_gz(os.path.join(out, f"{name}.snapshot.pickle.gz"), pickle.dumps(snap))
        with open(os.path.join(out, f"{name}.memory_stats.json"), "w") as f:
            json.dump(stats, f)
    with open(trace) as f:  # compact re-serialization: every event and argument kept
        events = json.load(f)
    write_gz(trace + ".gz", json.dumps(events, separators=(",", ":")).encode())
    os.remove(trace)
    with open(os.path.join(out, f"{name}.log.json"), "w") as f:
        json.dump(log, f, indent=1)
    return log


def main():
    p = argparse.ArgumentParser()
    p.add_argument("names", nargs="+", choices=sorted(WORKLOADS))
    p.add_argument("--out", default=".")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="torch", choices=["torch", "plain"])
    p.add_argument("--max-entries", type=int, default=5000, help="alloc/free events kept in the snapshot's ring")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in a.names:
        torch.manual_seed(0)
        if a.mode == "plain":
            print(f"{name} (plain): wall s/step {decode(name, a.steps, a.out, plain=True)['wall_s_per_step']}", flush=True)
            continue
        if CUDA:  # before the model and the cache exist: their blocks carry the frames that made them
            torch.cuda.memory._record_memory_history(max_entries=a.max_entries, stacks="python")
        log = decode(name, a.steps, a.out)
        if CUDA:
            torch.cuda.memory._record_memory_history(enabled=None)
            m = log["mem_get_info"]
            print(f"{name}: free {m['free'] / 2**30:.2f} of {m['total'] / 2**30:.2f} GiB ({m['free_pct']:.2f}%); "
                  f"allocated {log['memory_allocated'] / 2**30:.3f} GiB, reserved {log['memory_reserved'] / 2**30:.3f} GiB "
                  f"(peak {log['max_memory_reserved'] / 2**30:.3f}); cache {log['cache_bytes'] / 2**30:.3f} GiB in "
                  f"{len(log['cache_tensors'])} tensors; nvidia-smi {log['nvidia_smi']}; "
                  f"snapshot {log['snapshot_segments']} segments, {log['snapshot_trace_entries']} trace entries; "
                  f"wall s/step {log['wall_s_per_step']}", flush=True)
        else:
            print(f"{name}: wall s/step {log['wall_s_per_step']}", flush=True)


if __name__ == "__main__":
    main()
