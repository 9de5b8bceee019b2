"""Before/after pairs for `diagnose compare` (issue 12): a run twice unchanged, and a "fix" that hurts.

python tools/gen/compare_pairs.py --out DIR [--device cuda|cpu] [--d 4096] [--batch 4096] [--steps 6]

Writes small PyTorch profiler traces (with_stack and record_shapes off), gzipped:

- p_mlp_run1, p_mlp_run2: the same script twice, nothing changed: a 4-layer MLP (d=4096, batch 4096,
  bf16 autocast, fused AdamW, data resident on the GPU). Long GEMMs keep the GPU busy; the two runs
  differ only by run-to-run noise. `diagnose compare p_mlp_run1 --to p_mlp_run2` must report no
  regression and exit 0 under `--fail-on-regression 5`.
- p_mlp_microbatch: the "fix" that makes it worse: to "save memory" the same batch is split into 32
  micro-batches with gradient accumulation (`--micro 32`). Each micro-batch's GEMMs are 32x smaller,
  the host now issues ~32x the launches per step and cannot keep ahead of the GPU: step time rises
  and launch gaps open (launch_overhead). `compare p_mlp_run1 --to p_mlp_microbatch
  --fail-on-regression 5` must exit 3.

`--device cpu` with toy sizes checks the script without a GPU (the traces then hold no kernels).
"""
import argparse
import gzip
import os
import shutil

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--device", default="cuda")
p.add_argument("--d", type=int, default=4096)
p.add_argument("--batch", type=int, default=4096)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--micro", type=int, default=32)
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
dev = torch.device(a.device)


def run(tag: str, micro: int) -> None:
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.d, a.d), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(a.d, 16)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    x = torch.randn(a.batch, a.d, device=dev)
    y = torch.randint(0, 16, (a.batch,), device=dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    path = os.path.join(a.out, f"{tag}.pt.trace.json")
    chunk = a.batch // micro

    def step():
        for m in range(micro):
            xs, ys = x[m * chunk:(m + 1) * chunk], y[m * chunk:(m + 1) * chunk]
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(xs).float(), ys) / micro
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up outside the profiler (cuBLAS handles, allocator)
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=a.steps),
                 on_trace_ready=lambda pr: pr.export_chrome_trace(path), record_shapes=False, with_stack=False) as prof:
        for _ in range(a.steps + 2):
            step()
            prof.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)
    print(tag, os.path.getsize(path + ".gz"), "bytes")


run("p_mlp_run1", 1)
run("p_mlp_run2", 1)
run("p_mlp_microbatch", a.micro)
