"""2-rank DDP training whose gradient all-reduce does not overlap compute (TRAIN006 communication_wait).

torchrun --nproc_per_node 2 extra_ddp.py --out DIR --tag NAME [--bucket-mb MB] [--steps N]

A wide GPT (d=4096, 2 layers, ~660M parameters, long kernels so the host is never the limit)
trained with a small per-GPU batch (2 x 1024 tokens), bf16 autocast, fused AdamW. With
`--bucket-mb 4096` every gradient lands in one DDP bucket, so the whole fp32 all-reduce (~2.7 GB)
starts only after backward has finished and the GPU does nothing but wait for it; the ranks are
balanced (same shapes, no extra host work). `--bucket-mb 25` (DDP's
default) is the control: the same all-reduce in buckets that overlap backward.
`--model-dim 2048 --layers 6 --bucket-mb 25` is launch-bound (x_ddp_launch_bound): identical ranks,
one arrives last at the collectives only because its host issues the same launches more slowly.
Adapted from ../shared/gen/ddp.py (the corpus' DDP generator).
"""
import argparse, os, sys
import torch, torch.distributed as dist, torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extra_scenarios import GPT  # noqa: E402  (copied from ../shared/gen/scenarios.py)

p = argparse.ArgumentParser()
p.add_argument("--out"); p.add_argument("--tag")
p.add_argument("--steps", type=int, default=4); p.add_argument("--bucket-mb", type=float, default=4096)
# --model-dim: torchrun's own parser takes `--d` for an ambiguous prefix of its options and stops
p.add_argument("--d", "--model-dim", dest="d", type=int, default=4096); p.add_argument("--layers", type=int, default=2)
p.add_argument("--batch", type=int, default=2); p.add_argument("--seq", type=int, default=1024)
a = p.parse_args()
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(r)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(GPT(32000, a.d, 16, a.layers).cuda(), bucket_cap_mb=a.bucket_mb)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randint(0, 32000, (a.batch, a.seq + 1), device="cuda")
from torch.profiler import profile, ProfilerActivity, schedule  # noqa: E402
os.makedirs(a.out, exist_ok=True)
path = os.path.join(a.out, f"{a.tag}.rank{r}.pt.trace.json")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(wait=1, warmup=2, active=a.steps),
             on_trace_ready=lambda pr: pr.export_chrome_trace(path), record_shapes=True) as prof:
    for i in range(a.steps + 3):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x[:, :-1]); loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), x[:, 1:].reshape(-1))
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        prof.step()
torch.cuda.synchronize(); dist.destroy_process_group()
