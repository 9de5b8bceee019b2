"""A before/after pair for `diagnose compare` on the optimizer (issue 12): per-tensor Adam -> fused Adam.

python tools/gen/optimizer_pair.py --out DIR [--device cuda|cpu] [--steps 3]

One script, one change: a stack of 32 small residual blocks (Linear 512 + LayerNorm, batch 64, bf16
autocast, data resident on the GPU) trained with `torch.optim.Adam(foreach=False)` (before: the
optimizer launches several kernels per parameter tensor, single_tensor_optimizer) and with
`Adam(fused=True)` (after: one fused kernel per group of tensors). torch.profiler with
schedule(wait=1, warmup=2, active=STEPS), record_shapes and with_stack off; writes
p_opt_single_tensor.pt.trace.json.gz and p_opt_fused.pt.trace.json.gz into DIR.
`--device cpu` checks the script without a GPU (fused Adam then falls back to foreach).
"""
import argparse
import gzip
import os
import shutil

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc, self.norm = nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x):
        return x + torch.relu(self.norm(self.fc(x)))


def run(out: str, name: str, optimizer: str, device: str, steps: int) -> None:
    torch.manual_seed(0)
    d, layers, batch = 512, 32, 64
    model = nn.Sequential(*[Block(d) for _ in range(layers)], nn.Linear(d, 10)).to(device)
    if optimizer == "fused" and device == "cuda":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    elif optimizer == "fused":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(batch, d, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    sched = torch.profiler.schedule(wait=1, warmup=2, active=steps)
    path = os.path.join(out, f"{name}.pt.trace.json")
    with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=False, with_stack=False,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(1 + 2 + steps):
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
    if device == "cuda":
        torch.cuda.synchronize()
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    run(a.out, "p_opt_single_tensor", "single", a.device, a.steps)
    run(a.out, "p_opt_fused", "fused", a.device, a.steps)


if __name__ == "__main__":
    main()
