"""Real CUDA memory snapshots for two OOM mechanisms, each with a healthy twin (issue 10).

Run on a real GPU (the lent H200; see README.md beside this file):
  python3 tools/gen/oom_mechanisms.py all --out DIR          # every scenario, one subprocess each
  python3 tools/gen/oom_mechanisms.py NAME --out DIR         # one scenario in this process
Writes DIR/o_NAME.snapshot.pickle (+ .memory_stats.json, .memory_summary.txt, .log).

Scenarios (expected first warning-or-critical category):
  knn_broadcast     oom_temporary_buffer  EdgeConv point-cloud training; each layer finds k nearest neighbours
                                          by materializing every pairwise difference (B x N x N x C) under
                                          no_grad; point clouds grow 512 -> 2048 points: OOM in `.pow(2)`
  knn_cdist         (none)                the same model, schedule and cap with torch.cdist (B x N x N only)
  eval_keeps_graph  oom_memory_leak       conv-net evaluation loop without torch.no_grad() that sums the loss
                                          tensor (`total = total + loss`): every batch's graph, and with it
                                          every saved activation, stays alive until the OOM; no backward runs
  eval_no_grad      (none)                the same loop under torch.no_grad(): nothing survives a batch

New code, not a copy of ../shared/gen/scenarios.py (other models and ops); only the snapshot protocol
is the corpus one: _record_memory_history, a cap via set_per_process_memory_fraction, the snapshot
right after the OOM (or at the end for a healthy twin). MAX_ENTRIES (default 20000) bounds the history.
"""
import contextlib, json, os, sys

import torch, torch.nn as nn, torch.nn.functional as F

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import cap_memory, each_in_own_process, scenario_arguments  # noqa: E402

DEV = "cuda"


def cap(gib):
    cap_memory(gib)


# ---------------------------------------------------------------- point clouds: k nearest neighbours
def knn_broadcast(x, k):
    """Anti-pattern: (x_i - x_j)^2 for every pair materializes B x N x N x C twice (the difference, its square)."""
    with torch.no_grad():
        d2 = (x.unsqueeze(2) - x.unsqueeze(1)).pow(2).sum(-1)
        return d2.topk(k, dim=-1, largest=False).indices


def knn_cdist(x, k):
    """The fix: torch.cdist computes the B x N x N distances without the N x N x C intermediate."""
    with torch.no_grad():
        return torch.cdist(x, x).topk(k, dim=-1, largest=False).indices


class EdgeConv(nn.Module):
    """DGCNN-style edge convolution: features of (x_i, x_j - x_i) over the k nearest neighbours, max over j."""

    def __init__(self, cin, cout, k, knn):
        super().__init__()
        self.k, self.knn = k, knn
        self.mlp = nn.Sequential(nn.Linear(2 * cin, cout), nn.LayerNorm(cout), nn.GELU(), nn.Linear(cout, cout))

    def forward(self, x):  # B x N x C -> B x N x cout
        B, N, C = x.shape
        idx = self.knn(x, self.k)  # B x N x k
        batch = torch.arange(B, device=x.device).view(B, 1, 1)
        nbr = x[batch, idx]  # B x N x k x C
        ctr = x.unsqueeze(2).expand(B, N, self.k, C)
        edge = torch.cat([ctr, nbr - ctr], dim=-1)
        return self.mlp(edge).amax(dim=2)


class PointCloudNet(nn.Module):
    def __init__(self, knn, k=16, width=64, classes=40):
        super().__init__()
        self.convs = nn.ModuleList([EdgeConv(3, width, k, knn), EdgeConv(width, width, k, knn),
                                    EdgeConv(width, width, k, knn)])
        self.head = nn.Sequential(nn.Linear(3 * width, 256), nn.GELU(), nn.Linear(256, classes))

    def forward(self, pts):
        feats, x = [], pts
        for conv in self.convs:
            x = conv(x)
            feats.append(x)
        return self.head(torch.cat(feats, dim=-1).amax(dim=1))


def train_point_clouds(knn):
    cap(6)
    model = PointCloudNet(knn).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = 4
    for step, n in enumerate([512, 512, 1024, 1024, 1536, 1536, 2048, 2048]):  # point clouds grow
        pts = torch.randn(batch, n, 3, device=DEV)
        labels = torch.randint(0, 40, (batch,), device=DEV)
        loss = F.cross_entropy(model(pts), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} points {n} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB",
              flush=True)


def s_knn_broadcast():
    train_point_clouds(knn_broadcast)


def s_knn_cdist():
    train_point_clouds(knn_cdist)


# ---------------------------------------------------------------- image classifier evaluation
def conv_net(classes=100):
    layers, c = [], 3
    for width in (64, 128, 256, 256):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                   nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2)]
        c = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))


def evaluate(no_grad, batches=24):
    cap(12)
    model = conv_net().to(DEV).eval()
    total = torch.zeros((), device=DEV)
    with torch.no_grad() if no_grad else contextlib.nullcontext():
        for i in range(batches):
            images = torch.randn(32, 3, 128, 128, device=DEV)
            labels = torch.randint(0, 100, (32,), device=DEV)
            loss = F.cross_entropy(model(images), labels)
            total = total + loss  # without no_grad: keeps this batch's graph (and its saved tensors) alive
            print(f"batch {i} allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB", flush=True)
    print(f"mean loss {(total / batches).item():.3f}")


def s_eval_keeps_graph():
    evaluate(no_grad=False)


def s_eval_no_grad():
    evaluate(no_grad=True)


SCENARIOS = {f.__name__[2:]: f for f in [s_knn_broadcast, s_knn_cdist, s_eval_keeps_graph, s_eval_no_grad]}


def snapshot_run(name, out):
    """Run one scenario with allocation history on; dump the snapshot right after the OOM (or the end)."""
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(max_entries=int(os.environ.get("MAX_ENTRIES", 20000)))
    try:
        SCENARIOS[name]()
        print("no OOM happened")
    except torch.OutOfMemoryError as e:
        print("OOM:", str(e)[:400])
    base = os.path.join(out, f"o_{name}")
    torch.cuda.memory._dump_snapshot(base + ".snapshot.pickle")
    with open(base + ".memory_summary.txt", "w") as f:
        f.write(torch.cuda.memory_summary())
    with open(base + ".memory_stats.json", "w") as f:
        json.dump(torch.cuda.memory_stats(), f, indent=1)


def main():
    a = scenario_arguments()
    if a.name != "all":
        snapshot_run(a.name, a.out)
        return
    each_in_own_process(__file__, SCENARIOS, a, "o_", 600)


if __name__ == "__main__":
    main()
