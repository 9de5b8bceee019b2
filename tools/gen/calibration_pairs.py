"""Before/after pairs that calibrate the step-time predictions (issue 32), and identical reruns for the
regression gate. New code: its own small models; each "after" is its "before" with exactly the
finding's Fix applied (one change, named in PAIRS).

  python3 calibration_pairs.py pairs  --out DIR [--steps N] [--only NAME,...]
  python3 calibration_pairs.py rerun  --out DIR --program {mlp,decode} --run K [--steps N]

pairs : every PAIRS entry twice (before, after) under torch.profiler (schedule wait=1, warmup=2,
        active=N; record_shapes, profile_memory and with_stack off) -> DIR/c_NAME_{before,after}.pt.trace.json
rerun : one process of a rerun program: the base, then the base with an injected slowdown mid-step, between
        ops (INJECT: `kernel` an extra spin kernel, torch.cuda._sleep, of 5% / 3% of the base's GPU work per
        step; `busy` a Python loop of N iterations, `sleep` a time.sleep, each 5% / 3% of the base's profiled
        step), each profiled the same way -> DIR/r_PROGRAM_K_{base,kernel5,busy5,sleep5,...}.pt.trace.json.
        The sizes of the injections are measured in this process (the base's profiled step; the loop's
        iterations a ms); GPU work per step as given (--gpu-ms) or from a profiler pass.
GEN_DEVICE=cpu runs toy sizes on the CPU only to check the script logic (no kernels in the traces).
"""
import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import CUDA, DEV, size, sync  # noqa: E402,F401

WAIT, WARM = 1, 2


def mlp(d, layers, out, act=nn.GELU):
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(d, d), act()]
    return nn.Sequential(*mods, nn.Linear(d, out)).to(DEV)


def autocast(on=True):
    return torch.autocast(DEV, dtype=torch.bfloat16) if on and CUDA else contextlib.nullcontext()


# ---------------------------------------------------------------- pair workloads: (variant) -> step()
def sync_metrics(after):
    """Training, 6 micro-batches a step; before: loss.item() + accuracy .cpu() per micro-batch;
    after: metrics accumulated on the GPU, one .item() per step."""
    d, b = size(1024, 32), size(512, 8)
    model = mlp(d, 6, 64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    xs = [torch.randn(b, d, device=DEV) for _ in range(6)]
    ys = [torch.randint(0, 64, (b,), device=DEV) for _ in range(6)]
    log = []

    def step():
        run = torch.zeros((), device=DEV)
        for x, y in zip(xs, ys):
            with autocast():
                out = model(x)
                loss = F.cross_entropy(out.float(), y) / 6
            loss.backward()
            if after:
                run += loss.detach()
            else:
                log.append(loss.item())
                log.append((out.argmax(-1) == y).float().mean().cpu())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if after:
            log.append(run.item())
    return step


def infer_sync_postprocess(after):
    """Inference of a deep narrow net, batch 64; before: each of 8 sub-batches' top-1 read with .tolist();
    after: kept on the GPU, one read per request."""
    d = size(512, 16)
    model = mlp(d, 16, 1000).eval()
    xs = [torch.randn(64, d, device=DEV) for _ in range(8)]
    out = []

    @torch.no_grad()
    def step():
        preds = []
        for x in xs:
            with autocast():
                p = model(x).argmax(-1)
            if after:
                preds.append(p)
            else:
                out.append(p.tolist())
        if after:
            out.append(torch.cat(preds).tolist())
    return step


def pageable_input(after):
    """Training on a 96 MB input batch copied from host memory every step; before: a pageable tensor,
    `.to('cuda')`; after: pinned once, `.to('cuda', non_blocking=True)`."""
    n = size(6144, 16)
    model = mlp(4096 if CUDA else 16, 2, 16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    x_host = torch.randn(n, 4096 if CUDA else 16)
    if after and CUDA:
        x_host = x_host.pin_memory()
    y = torch.randint(0, 16, (n,), device=DEV)

    def step():
        x = x_host.to(DEV, non_blocking=after)
        with autocast():
            loss = F.cross_entropy(model(x).float(), y)
        mid()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class NoisyImages(torch.utils.data.Dataset):
    """Per-sample numpy augmentation on the host (two blurs and a normalization), 3 x 64 x 64."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((3, 64, 64)).astype(np.float32)
        for _ in range(2):
            img = 0.25 * (np.roll(img, 1, 1) + np.roll(img, -1, 1) + np.roll(img, 1, 2) + np.roll(img, -1, 2))
        img = (img - img.mean()) / (img.std() + 1e-5)
        return torch.from_numpy(img), i % 10


def convnet():
    c = size(128, 8)
    return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)).to(DEV)


def dataloader_workers(after):
    """Conv-net training behind a DataLoader; before: num_workers=0; after: the Fix's
    DataLoader(num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4)."""
    model = convnet().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    ds = NoisyImages(100000)
    kw = dict(num_workers=8, pin_memory=CUDA, persistent_workers=True, prefetch_factor=4) if after else {}
    it = iter(torch.utils.data.DataLoader(ds, batch_size=size(128, 4), shuffle=False, **kw))

    def step():
        x, y = next(it)
        x, y = x.to(DEV, non_blocking=True), y.to(DEV, non_blocking=True)
        with autocast():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class Attn(nn.Module):
    def __init__(self, d, h, sdpa):
        super().__init__()
        self.h, self.sdpa = h, sdpa
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            o = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return x + self.proj(o.transpose(1, 2).reshape(b, t, d))


def attention(after, train):
    """A 3-layer causal attention stack, seq 2048, 16 heads of 64, bf16; before: matmul + mask + softmax
    + matmul; after: F.scaled_dot_product_attention(is_causal=True)."""
    d, t, b = size(1024, 32), size(2048, 16), size(4, 1) if train else size(8, 1)
    model = nn.Sequential(*[Attn(d, size(16, 2), after) for _ in range(3)]).to(DEV)
    x = torch.randn(b, t, d, device=DEV)
    if not train:
        model = model.eval()

        @torch.no_grad()
        def step():
            with autocast():
                model(x)
        return step
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)

    def step():
        with autocast():
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def fp32_to_bf16(after):
    """MLP training (d 4096, batch 4096) in FP32 with TF32 off; after: under bf16 autocast."""
    torch.backends.cuda.matmul.allow_tf32 = False
    d, b = size(4096, 16), size(4096, 8)
    model = mlp(d, 3, 16, nn.ReLU)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    x, y = torch.randn(b, d, device=DEV), torch.randint(0, 16, (b,), device=DEV)

    def step():
        with autocast(after):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def fp32_to_tf32(after):
    """MLP inference (d 8192, batch 2048) in FP32; after: torch.backends.cuda.matmul.allow_tf32 = True."""
    torch.backends.cuda.matmul.allow_tf32 = bool(after)
    d = size(8192, 16)
    model = mlp(d, 3, 1000).eval()
    x = torch.randn(size(2048, 8), d, device=DEV)

    @torch.no_grad()
    def step():
        model(x)
    return step


class Residual(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc, self.norm = nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x):
        return x + F.silu(self.norm(self.fc(x)))


def optimizer(after, kind):
    """48 residual blocks (Linear 768 + LayerNorm), batch 256, bf16 autocast; before: Adam(foreach=False)
    (several kernels per parameter tensor); after: Adam(fused=True) or Adam(foreach=True)."""
    d = size(768, 16)
    model = nn.Sequential(*[Residual(d) for _ in range(48)], nn.Linear(d, 10)).to(DEV)
    kw = {"fused": True} if kind == "fused" and CUDA else {"foreach": True}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **(kw if after else {"foreach": False}))
    x, y = torch.randn(size(256, 4), d, device=DEV), torch.randint(0, 10, (size(256, 4),), device=DEV)

    def step():
        with autocast():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def elementwise_chain(x, a, b):
    """A hand-written activation: a chain of bandwidth-bound elementwise ops, one kernel each in eager."""
    y = x * a + b
    y = y * torch.sigmoid(1.702 * y)
    y = torch.tanh(y) * 0.5 + y * 0.5
    y = y * torch.rsqrt(y * y + 1.0)
    return y * a - b


def compile_chain(after):
    """Inference of a Linear + elementwise-chain activation on 32M bf16 values per layer, 3 layers;
    after: the chain under torch.compile."""
    d, n = size(4096, 16), size(8192, 8)
    fn = torch.compile(elementwise_chain) if after and CUDA else elementwise_chain
    lins = [nn.Linear(d, d).to(DEV) for _ in range(3)]
    a = torch.randn(d, device=DEV).abs()
    b = torch.randn(d, device=DEV) * 0.1
    x0 = torch.randn(n, d, device=DEV)

    @torch.no_grad()
    def step():
        x = x0
        with autocast():
            for lin in lins:
                x = fn(lin(x), a, b)
        return x
    return step


def graph_decode(after):
    """Batch-1 decode step of a 24-block residual MLP (d 512), 8 tokens per step, eager; after: the
    forward captured once in a CUDA graph (torch.cuda.CUDAGraph) on a static input, replayed per token."""
    d = size(512, 16)
    model = nn.Sequential(*[Residual(d) for _ in range(24)]).to(DEV).eval()
    x = torch.randn(1, d, device=DEV)
    fwd = model
    if after and CUDA:
        static = x.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                model(static)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g), torch.no_grad():
            static_out = model(static)

        def fwd(inp):
            static.copy_(inp)
            g.replay()
            return static_out

    @torch.no_grad()
    def step():
        h = x
        for _ in range(8):
            h = fwd(h) * 0.5
        return h
    return step


def empty_cache(after):
    """Segmentation-style conv inference, a new request shape every step; before: torch.cuda.empty_cache()
    after each request; after: that line removed."""
    model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 8, 1)).to(DEV).eval()
    shapes = [size(s, 8) for s in (256, 320, 384)]
    k = [0]

    @torch.no_grad()
    def step():
        s = shapes[k[0] % 3]
        k[0] += 1
        for _ in range(4):
            with autocast():
                model(torch.randn(8, 3, s, s, device=DEV)).argmax(1)
        if not after and CUDA:
            torch.cuda.empty_cache()
    return step


PAIRS = {  # name -> (workload, the one change of the after run)
    "sync_metrics": (sync_metrics, "metrics accumulated on the GPU, one .item() per step"),
    "infer_sync_postprocess": (infer_sync_postprocess, "predictions kept on the GPU, one read per request"),
    "pageable_input": (pageable_input, "input pinned once, .to('cuda', non_blocking=True)"),
    "dataloader_workers": (dataloader_workers, "DataLoader(num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4)"),
    "infer_attention": (lambda a: attention(a, False), "F.scaled_dot_product_attention(is_causal=True)"),
    "train_attention": (lambda a: attention(a, True), "F.scaled_dot_product_attention(is_causal=True)"),
    "fp32_to_bf16": (fp32_to_bf16, "torch.autocast('cuda', dtype=torch.bfloat16)"),
    "fp32_to_tf32": (fp32_to_tf32, "torch.backends.cuda.matmul.allow_tf32 = True"),
    "optimizer_fused": (lambda a: optimizer(a, "fused"), "torch.optim.Adam(..., fused=True)"),
    "optimizer_foreach": (lambda a: optimizer(a, "foreach"), "torch.optim.Adam(..., foreach=True)"),
    "graph_decode": (graph_decode, "forward captured in a CUDA graph, replayed per token"),
    "empty_cache": (empty_cache, "torch.cuda.empty_cache() removed from the loop"),
    "compile_chain": (compile_chain, "torch.compile of the elementwise chain"),
}


def profiled(step, path, steps, before_step=None):
    """Run `step` under torch.profiler: wait=1, warmup=2, active=steps; export to `path`. Returns the wall
    time of each active step, ms (from one prof.step() to the next: the ProfilerStep ranges of the trace)."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    walls = []
    with profile(activities=acts, schedule=schedule(wait=WAIT, warmup=WARM, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(path), record_shapes=False, with_stack=False) as prof:
        for i in range(WAIT + WARM + steps):
            t0 = time.perf_counter()
            if before_step:
                before_step()
            step()
            prof.step()
            if i >= WAIT + WARM:
                walls.append((time.perf_counter() - t0) * 1e3)
    sync()
    return walls


def run_pairs(a):
    names = a.only.split(",") if a.only else list(PAIRS)
    for name in names:
        fn, change = PAIRS[name]
        for variant in ("before", "after"):
            t0 = time.time()
            torch.manual_seed(0)
            try:
                step = fn(variant == "after")
                for _ in range(3):
                    step()
                sync()
                profiled(step, os.path.join(a.out, f"c_{name}_{variant}.pt.trace.json"), a.steps)
                print(f"{name} {variant}: {time.time() - t0:.1f} s", flush=True)
            except Exception as e:  # one broken workload must not lose the others
                print(f"{name} {variant}: FAILED {type(e).__name__}: {e}", flush=True)
            torch.backends.cuda.matmul.allow_tf32 = False
            if CUDA:
                torch.cuda.empty_cache()


# ---------------------------------------------------------------- rerun programs
def rerun_mlp():
    """GPU-bound: bf16 MLP training (d 4096, batch 4096, 4 layers), fused AdamW, loss read once a step."""
    d, b = size(4096, 16), size(4096, 8)
    model = mlp(d, 4, 16, nn.ReLU)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    x, y = torch.randn(b, d, device=DEV), torch.randint(0, 16, (b,), device=DEV)
    log = []

    def step():
        with autocast():
            loss = F.cross_entropy(model(x).float(), y)
        mid()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log.append(loss.item())
    return step


def rerun_decode():
    """Host-bound: batch-1 greedy decode of a 16-block residual MLP (d 512), 6 tokens a step, one read a step."""
    d = size(512, 16)
    model = nn.Sequential(*[Residual(d) for _ in range(16)], nn.Linear(d, 256)).to(DEV).eval()
    emb = torch.randn(256, d, device=DEV)
    log = []

    @torch.no_grad()
    def step():
        tok = torch.zeros(1, dtype=torch.long, device=DEV)
        toks = []
        for i in range(6):
            tok = model(emb[tok]).argmax(-1)
            toks.append(tok)
            if i == 2:
                mid()
        log.append(torch.cat(toks).tolist())
    return step


def gpu_ms_per_step(step, n=3):
    """GPU kernel time per step, from one profiler pass of n steps (0 on the CPU)."""
    if not CUDA:
        return 0.0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        sync()
    total = 0.0
    for e in prof.key_averages():
        total += getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))
    return total / 1e3 / n


def sleep_cycles_per_ms():
    if not CUDA:
        return 0.0
    torch.cuda._sleep(1000)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(20_000_000)
    e.record()
    e.synchronize()
    return 20_000_000 / s.elapsed_time(e)


def spin(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def busy(n):
    """A user's extra CPU work between ops: n iterations of plain Python arithmetic."""
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


def busy_iters_per_ms():
    busy(20_000)
    t = []
    for _ in range(7):
        t0 = time.perf_counter()
        busy(100_000)
        t.append((time.perf_counter() - t0) * 1e3)
    return 100_000 / float(np.median(t))


MID = [None]  # the injection, called in the middle of the step (rerun programs: mid())


def mid():
    if MID[0] is not None:
        MID[0]()


# tag -> (kind, % of the base): `kernel` an extra spin kernel of pct% of the base's GPU work per step;
# `busy` a Python loop of N iterations (N calibrated in this process) taking pct% of the base's profiled step;
# `sleep` time.sleep of pct% of the base's profiled step. All placed mid-step, between ops.
INJECT = {"base": (None, 0), "kernel5": ("kernel", 5), "busy5": ("busy", 5), "sleep5": ("sleep", 5),
          "kernel3": ("kernel", 3), "busy3": ("busy", 3), "sleep3": ("sleep", 3)}


def run_rerun(a):
    torch.manual_seed(0)
    step = {"mlp": rerun_mlp, "decode": rerun_decode}[a.program]()
    for _ in range(5):
        step()
    sync()
    t = []
    for _ in range(10):
        t0 = time.perf_counter()
        step()
        sync()
        t.append((time.perf_counter() - t0) * 1e3)
    step_ms = float(np.median(t))
    gpu_ms = a.gpu_ms if a.gpu_ms else gpu_ms_per_step(step)  # given: measured once by an earlier run
    cyc = a.cycles_per_ms if a.cycles_per_ms else sleep_cycles_per_ms()
    ipm = busy_iters_per_ms()
    info = {"program": a.program, "run": a.run, "step_ms_unprofiled": step_ms, "gpu_ms_per_step": gpu_ms,
            "sleep_cycles_per_ms": cyc, "busy_iters_per_ms": ipm}
    prof_ms = None
    for tag, (kind, pct) in INJECT.items():
        MID[0] = None
        if kind == "kernel" and CUDA:
            cycles = int(cyc * gpu_ms * pct / 100)
            MID[0] = lambda c=cycles: torch.cuda._sleep(c)  # noqa: E731
        elif kind == "busy":
            n = int(ipm * prof_ms * pct / 100)
            MID[0] = lambda n=n: busy(n)  # noqa: E731
        elif kind == "sleep":
            MID[0] = lambda s=prof_ms * pct / 1e5: time.sleep(s)  # noqa: E731
        walls = profiled(step, os.path.join(a.out, f"r_{a.program}_{a.run}_{tag}.pt.trace.json"), a.steps)
        if tag == "base":
            prof_ms = float(np.median(walls))
        info[tag] = {"kind": kind, "pct": pct, "step_ms_profiled": float(np.median(walls)),
                     "delay_ms": None if kind in (None, "kernel") else prof_ms * pct / 100}
    MID[0] = None
    with open(os.path.join(a.out, f"r_{a.program}_{a.run}.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("pairs", "rerun"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--only", default="")
    ap.add_argument("--program", default="mlp")
    ap.add_argument("--run", type=int, default=0)
    ap.add_argument("--gpu-ms", type=float, default=0.0, help="the base's GPU work per step (else measured here)")
    ap.add_argument("--cycles-per-ms", type=float, default=0.0, help="torch.cuda._sleep cycles per ms (else measured)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    (run_pairs if a.what == "pairs" else run_rerun)(a)


if __name__ == "__main__":
    sys.exit(main())
