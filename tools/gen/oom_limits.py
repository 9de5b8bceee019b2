"""Real CUDA memory snapshots for issue 21: the temporary that never fit, and the limit read right.

Run on a real GPU (the lent H200; see README.md beside this file):
  python3 tools/gen/oom_limits.py all --out DIR      # every scenario, one subprocess each
  python3 tools/gen/oom_limits.py NAME --out DIR     # one scenario in this process
Writes DIR/l_NAME.snapshot.pickle (+ .memory_stats.json, .log with the cap and device numbers).

Scenarios (new code: other models and ops than ../shared/gen/scenarios.py and oom_mechanisms.py):
  mmd_broadcast    an MLP encoder trained with an RBF-kernel MMD loss between two batches of 12288
                   embeddings of 96 dims, the kernel matrix computed inside the loss module by
                   broadcasting (z[:, None] - w[None]).pow(2): the first op alone asks for
                   12288^2 x 96 x 4 B = 54 GiB under a 10 GiB cap (set_per_process_memory_fraction)
                   while ~0.1 GiB is live
  mmd_cdist        the same training with torch.cdist(z, w) (12288^2 x 4 B = 0.56 GiB a matrix): no OOM
  pairs_device     no cap: an L1 distance matrix between two sets of 20000 x 128 points in a plain
                   function, (a[:, None] - b[None]).abs().sum(-1): asks for 191 GiB on a 140 GiB device
  pairs_chunked    the same distances 512 rows of `a` at a time: no OOM
  cap_activations  a 4-layer MLP of width 8192 trained with AdamW under a 20 GiB cap, the batch doubling
                   from 2048 rows each step until the activations no longer fit: the cap is known
                   (20 GiB), to check what the report says the limit was
The snapshot protocol is the corpus one: _record_memory_history, the snapshot right after the OOM
(or at the end for a healthy twin). MAX_ENTRIES (default 20000) bounds the history.
"""
import json, os, sys

import torch, torch.nn as nn, torch.nn.functional as F

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import cap_memory, each_in_own_process, scenario_arguments  # noqa: E402

DEV = "cuda"
LOG = {}


def cap(gib):
    LOG.update(cap_memory(gib))


class Encoder(nn.Module):
    def __init__(self, cin=64, hidden=512, cout=96):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(cin, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, cout))

    def forward(self, x):
        return self.net(x)


class RbfMmdBroadcast(nn.Module):
    """MMD^2 with a Gaussian kernel; the squared distances by broadcasting (the anti-pattern)."""

    def __init__(self, sigma=4.0):
        super().__init__()
        self.gamma = 1.0 / (2 * sigma * sigma)

    def kernel(self, z, w):
        return torch.exp(-self.gamma * (z[:, None] - w[None]).pow(2).sum(-1))

    def forward(self, z, w):
        return self.kernel(z, z).mean() + self.kernel(w, w).mean() - 2 * self.kernel(z, w).mean()


class RbfMmdCdist(RbfMmdBroadcast):
    def kernel(self, z, w):
        return torch.exp(-self.gamma * torch.cdist(z, w).pow(2))


def train_mmd(loss_module, steps=4, n=12288):
    cap(10)
    enc = Encoder().to(DEV)
    loss_fn = loss_module().to(DEV)
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    for step in range(steps):
        x = torch.randn(n, 64, device=DEV)
        y = torch.randn(n, 64, device=DEV) * 1.1 + 0.2
        loss = loss_fn(enc(x), enc(y))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f} allocated {torch.cuda.memory_allocated() / 2**30:.3f} GiB "
              f"peak {torch.cuda.max_memory_allocated() / 2**30:.3f} GiB", flush=True)


def s_mmd_broadcast():
    train_mmd(RbfMmdBroadcast)


def s_mmd_cdist():
    train_mmd(RbfMmdCdist)


def l1_pairs(a, b):
    return (a[:, None] - b[None]).abs().sum(-1)


def l1_pairs_chunked(a, b, rows=512):
    return torch.cat([(c[:, None] - b[None]).abs().sum(-1) for c in a.split(rows)])


def nearest(pair_fn):
    a = torch.randn(20000, 128, device=DEV)
    b = torch.randn(20000, 128, device=DEV)
    with torch.no_grad():
        d = pair_fn(a, b)
        print("nearest", d.argmin(dim=1)[:4].tolist(), f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB",
              flush=True)


def s_pairs_device():
    nearest(l1_pairs)


def s_pairs_chunked():
    nearest(l1_pairs_chunked)


def s_cap_activations():
    cap(20)
    width = 8192
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(width, width), nn.GELU())]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = 2048
    for step in range(8):
        x = torch.randn(batch, width, device=DEV)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} batch {batch} reserved {torch.cuda.memory_reserved() / 2**30:.2f} GiB "
              f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
        batch *= 2


SCENARIOS = {f.__name__[2:]: f for f in [s_mmd_broadcast, s_mmd_cdist, s_pairs_device, s_pairs_chunked,
                                          s_cap_activations]}


def snapshot_run(name, out):
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(max_entries=int(os.environ.get("MAX_ENTRIES", 20000)))
    LOG["name"] = name
    try:
        SCENARIOS[name]()
        print("no OOM happened")
        LOG["oom"] = None
    except torch.OutOfMemoryError as e:
        print("OOM:", str(e)[:500])
        LOG["oom"] = str(e)[:1000]
    free, total = torch.cuda.mem_get_info()
    LOG.update(after_free_bytes=free, after_total_bytes=total, reserved_bytes=torch.cuda.memory_reserved(),
               allocated_bytes=torch.cuda.memory_allocated(), torch=torch.__version__)
    base = os.path.join(out, f"l_{name}")
    torch.cuda.memory._dump_snapshot(base + ".snapshot.pickle")
    with open(base + ".memory_stats.json", "w") as f:
        json.dump(torch.cuda.memory_stats(), f, indent=1)
    with open(base + ".log.json", "w") as f:
        json.dump(LOG, f, indent=1)


def main():
    a = scenario_arguments()
    if a.name != "all":
        snapshot_run(a.name, a.out)
        return
    each_in_own_process(__file__, SCENARIOS, a, "l_", 700)


if __name__ == "__main__":
    main()
