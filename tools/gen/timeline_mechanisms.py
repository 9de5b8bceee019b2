"""Timeline workloads for issue 21: mechanisms the rules still missed, in code of their own (other
models, loops and sizes than the corpus, tools/gen/mech_scenarios.py or extra_scenarios.py). Each has
one root cause by construction; most have a twin with the cause removed.

  python3 timeline_mechanisms.py NAME [NAME ...] --mode {torch,plain} --out DIR [--steps N]
    torch : torch.profiler (CPU + CUDA; record_shapes, profile_memory, with_stack off),
            schedule(wait=1, warmup=2, active=N), prof.step() once per iteration; a "from_start" workload
            is profiled from before its first CUDA call to its end, without a schedule or step markers.
    plain : for `nsys profile --capture-range=cudaProfilerApi`: cudaProfilerStart after 3 warm-up
            iterations, cudaProfilerStop after N more; a "from_start" one calls neither (profile the whole
            process). Workloads in NVTX_PLAIN run their loop under torch.autograd.profiler.emit_nvtx()
            (every op and record_function range as an NVTX range, as people profile PyTorch with nsys).
GEN_DEVICE=cpu runs every workload at toy sizes on a CPU (only to check the script logic).

Workloads (category built for; "twin" = the same code with the cause removed):
  t_train_long_attention   unfused_attention   2-layer LM, 16 heads of 64, ONE sequence of 8192 tokens, attention by
                                               matmul with the scores cast to fp32, an additive fp32 mask, softmax,
                                               cast back: each fp32 score tensor is 4.3 GB (> 2^31 bytes)
  t_train_long_sdpa        (twin)              the same model with F.scaled_dot_product_attention(is_causal=True)
  t_infer_long_attention   unfused_attention   fp16 encoder inference, 4 x 4096 tokens, 32 heads; plain mode marks each
                                               attention with an NVTX range `attention` (torch.cuda.nvtx.range)
  t_train_logits_readback  host_sync           residual-MLP token tagger, 6 micro-batches a step; every
                                               micro-batch copies its predictions and labels to the host (12 DtoH a step)
  t_train_logits_on_gpu    (twin)              the same, accuracy counted on the GPU and read once a step
  t_train_cpu_adamw        host_optimizer      MLP on the GPU, fp32 master weights and AdamW state on the CPU
                                               (ZeRO-offload by hand): gradients down, AdamW.step on CPU tensors,
                                               weights back up, every step (pageable copies)
  t_train_gpu_adamw        (twin)              the same model with fused AdamW on the GPU
  t_train_moe_nonzero      host_sync + launch  2 MoE layers, 6 experts, top-1 routing by `nonzero` per expert
                                               (one sync per expert per layer) and boolean-index gathers/scatters
  t_setup_short_infer      one_time_setup      a short program profiled from its start: CUDA init, a small conv net,
                                               3 inferences at batch 8, exit
"""
import contextlib
import math
import os
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import (CUDA, DEV, WARM, Session, arguments, capture_ticks, run_each, size, sync,  # noqa: E402,F401
                     torch_profiled, torch_profiled_whole, workloads)

FROM_START = {"t_setup_short_infer"}
NVTX_PLAIN = {"t_train_cpu_adamw", "t_train_gpu_adamw"}
PROFILE = dict(record_shapes=False, profile_memory=False, with_stack=False)


def nvtx_range(name):
    return torch.cuda.nvtx.range(name) if CUDA and os.environ.get("TM_NVTX") == "1" else contextlib.nullcontext()


# ============================================================== long-sequence hand-written attention
class LongAttention(nn.Module):
    def __init__(self, d, heads, fused, causal=True):
        super().__init__()
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.h, self.fused, self.causal = heads, fused, causal

    def forward(self, x, mask):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        with nvtx_range("attention"):
            if self.fused:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            else:
                s = torch.matmul(q, k.transpose(-2, -1)).float() * (D // self.h) ** -0.5
                if mask is not None:
                    s = s + mask  # fp32 additive mask, broadcast over batch and heads
                p = torch.softmax(s, dim=-1).to(q.dtype)
                o = torch.matmul(p, v)
        return self.o(o.transpose(1, 2).reshape(B, S, D))


class LongBlock(nn.Module):
    def __init__(self, d, heads, fused, causal=True):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = LongAttention(d, heads, fused, causal)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x, mask=None):
        x = x + self.attn(self.n1(x), mask)
        return x + self.mlp(self.n2(x))


def long_attention_train(s, fused):
    """Batch 1 x 8192 tokens, d=1024, 16 heads, 2 blocks, vocab 8192, bf16 autocast, fused AdamW."""
    d, heads, seq, vocab, layers = size((1024, 16, 8192, 8192, 2), (32, 4, 64, 50, 2))
    emb, head = nn.Embedding(vocab, d).to(DEV), nn.Linear(d, vocab, bias=False).to(DEV)
    blocks = nn.ModuleList(LongBlock(d, heads, fused) for _ in range(layers)).to(DEV)
    params = list(emb.parameters()) + list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, fused=CUDA)
    mask = None if fused else torch.full((seq, seq), float("-inf"), device=DEV).triu(1)
    x = torch.randint(0, vocab, (1, seq), device=DEV)
    y = torch.randint(0, vocab, (1, seq), device=DEV)
    for _ in range(s.iters):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            h = emb(x)
            for b in blocks:
                h = b(h, mask)
            loss = F.cross_entropy(head(h).view(-1, vocab), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        s.tick()
    sync()


def w_t_train_long_attention(s):
    long_attention_train(s, fused=False)


def w_t_train_long_sdpa(s):
    long_attention_train(s, fused=True)


@torch.no_grad()
def w_t_infer_long_attention(s):
    """fp16 bidirectional encoder (3 blocks, d=2048, 32 heads of 64), 4 x 4096 tokens, padding mask as an
    fp32 additive [B,1,1,S] tensor: scores 4 x 32 x 4096^2 fp32 = 8.6 GB."""
    d, heads, seq, bs, layers = size((2048, 32, 4096, 4, 3), (32, 4, 64, 2, 2))
    dt = torch.float16 if CUDA else torch.float32
    blocks = nn.ModuleList(LongBlock(d, heads, fused=False, causal=False) for _ in range(layers)).to(DEV, dt).eval()
    x = torch.randn(bs, seq, d, device=DEV, dtype=dt)
    mask = torch.zeros(bs, 1, 1, seq, device=DEV)
    mask[:, :, :, seq - seq // 8:] = float("-inf")  # the last eighth is padding
    for _ in range(s.iters):
        h = x
        for b in blocks:
            h = b(h, mask)
        s.tick()
    sync()


# ============================================================== read-back every micro-batch
class Tagger(nn.Module):
    """Token tagger: residual MLP blocks (d -> 4d -> d, GELU) on each token, then the tag head."""

    def __init__(self, d, blocks, tags):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                    for _ in range(blocks))
        self.head = nn.Linear(d, tags)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def tagger_train(s, on_gpu):
    """Tagger (d=3072, 2 blocks, 512 tags) on 1024 tokens per micro-batch, bf16 autocast, fused AdamW;
    6 micro-batches per step (gradient accumulation)."""
    d, blocks, rows, tags, micro = size((3072, 2, 1024, 512, 6), (32, 2, 16, 10, 4))
    model = Tagger(d, blocks, tags).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    xs = torch.randn(micro, rows, d, device=DEV)
    ys = torch.randint(0, tags, (micro, rows), device=DEV)
    history = []
    for _ in range(s.iters):
        hits, total = (torch.zeros((), dtype=torch.long, device=DEV) if on_gpu else 0), 0
        for m in range(micro):
            with torch.autocast(DEV, dtype=torch.bfloat16):
                logits = model(xs[m])
                loss = F.cross_entropy(logits, ys[m]) / micro
            loss.backward()
            if on_gpu:
                hits += (logits.detach().argmax(-1) == ys[m]).sum()
            else:  # the accuracy of this micro-batch in numpy: two device-to-host copies
                pred = logits.detach().argmax(-1).cpu().numpy()
                lab = ys[m].cpu().numpy()
                hits += int((pred == lab).sum())
            total += ys[m].numel()
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append((hits.item() if on_gpu else hits) / total)
        s.tick()
    sync()


def w_t_train_logits_readback(s):
    tagger_train(s, on_gpu=False)


def w_t_train_logits_on_gpu(s):
    tagger_train(s, on_gpu=True)


# ============================================================== optimizer on the host
class DeepMLP(nn.Module):
    def __init__(self, din, d, depth, classes):
        super().__init__()
        self.inp = nn.Linear(din, d)
        self.hidden = nn.ModuleList(nn.Linear(d, d) for _ in range(depth))
        self.out = nn.Linear(d, classes)

    def forward(self, x):
        x = F.gelu(self.inp(x))
        for l in self.hidden:
            x = x + F.gelu(l(x))
        return self.out(x)


def mlp_train(s, cpu_optimizer):
    """Residual MLP (1024 -> 2048, 8 hidden 2048^2 layers, 1000 classes: 38M parameters), batch 4096,
    bf16 autocast. cpu_optimizer: fp32 master weights + AdamW state on the CPU; each step copies every
    gradient to the host, runs torch.optim.AdamW on the CPU tensors, copies every weight back."""
    din, d, depth, classes, bs = size((1024, 2048, 8, 1000, 4096), (16, 32, 2, 10, 8))
    model = DeepMLP(din, d, depth, classes).to(DEV)
    x = torch.randn(bs, din, device=DEV)
    y = torch.randint(0, classes, (bs,), device=DEV)
    if cpu_optimizer:
        master = [p.detach().to("cpu", copy=True).requires_grad_(True) for p in model.parameters()]
        opt = torch.optim.AdamW(master, lr=1e-4)  # CPU tensors: the per-tensor (for-loop) implementation
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    for _ in range(s.iters):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        if cpu_optimizer:
            for p, m in zip(model.parameters(), master):
                m.grad = p.grad.to("cpu")  # pageable device-to-host copy
            opt.step()
            with torch.no_grad():
                for p, m in zip(model.parameters(), master):
                    p.copy_(m)  # pageable host-to-device copy
            model.zero_grad(set_to_none=True)
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        s.tick()
    sync()


def w_t_train_cpu_adamw(s):
    mlp_train(s, cpu_optimizer=True)


def w_t_train_gpu_adamw(s):
    mlp_train(s, cpu_optimizer=False)


# ============================================================== MoE routed with nonzero
class Expert(nn.Module):
    def __init__(self, d, hid):
        super().__init__()
        self.w1, self.w2 = nn.Linear(d, hid), nn.Linear(hid, d)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)))


class NonzeroMoE(nn.Module):
    """Top-1 router; tokens of expert e found with `(choice == e).nonzero()` (a sync each) and gathered by
    index, the expert's output scattered back with index_add_."""

    def __init__(self, d, hid, experts):
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(Expert(d, hid) for _ in range(experts))
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        h = self.norm(x)
        gate = torch.softmax(self.router(h).float(), dim=-1)
        weight, choice = gate.max(dim=-1)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            idx = (choice == e).nonzero(as_tuple=True)[0]
            if idx.numel() == 0:
                continue
            y = (expert(h[idx]) * weight[idx, None]).to(out.dtype)
            out = out.index_add(0, idx, y)
        return x + out


def w_t_train_moe_nonzero(s):
    """2 MoE layers (d=512, 6 experts of 512 -> 1024 -> 512), 4096 tokens, bf16 autocast, fused AdamW."""
    d, hid, experts, layers, tokens = size((512, 1024, 6, 2, 4096), (16, 32, 4, 2, 64))
    model = nn.Sequential(*[NonzeroMoE(d, hid, experts) for _ in range(layers)], nn.Linear(d, 100)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    x = torch.randn(tokens, d, device=DEV)
    y = torch.randint(0, 100, (tokens,), device=DEV)
    for _ in range(s.iters):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        s.tick()
    sync()


# ============================================================== a short program, profiled from its start
@torch.no_grad()
def w_t_setup_short_infer(s):
    """CUDA init, a 6-conv net (BatchNorm, ReLU) in eval mode, 3 inferences of 8 x 3 x 160^2, the
    predictions read back once at the end."""
    w, bs, side = size((48, 8, 160), (4, 2, 16))
    layers, c = [], 3
    for i in range(6):
        layers += [nn.Conv2d(c, w * 2 ** (i // 2), 3, 2 if i % 2 else 1, 1), nn.BatchNorm2d(w * 2 ** (i // 2)), nn.ReLU()]
        c = w * 2 ** (i // 2)
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)).to(DEV).eval()
    x = torch.randn(bs, 3, side, side, device=DEV)
    outs = [model(x).argmax(1) for _ in range(3)]
    _ = torch.stack(outs).cpu()


WORKLOADS = workloads(globals(), "w_t_")


def run_torch(name, fn, steps, out):
    path = os.path.join(out, f"{name}.pt.trace.json")
    if name in FROM_START:
        torch_profiled_whole(fn, Session(0), path, **PROFILE)
    else:
        torch_profiled(fn, steps, path, **PROFILE)


def run_plain(name, fn, steps):
    if name in FROM_START:
        fn(Session(0))
        return
    ctx = torch.autograd.profiler.emit_nvtx() if name in NVTX_PLAIN and CUDA else contextlib.nullcontext()
    with ctx:
        fn(Session(steps + WARM, tick=capture_ticks(steps)))


def main():
    a = arguments(WORKLOADS, 3, alone=FROM_START)

    def before(name):
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)

    def run_one(name):
        if a.mode == "torch":
            run_torch(name, WORKLOADS[name], a.steps, a.out)
        else:
            run_plain(name, WORKLOADS[name], a.steps)

    def after(name):
        if CUDA:
            torch.cuda.empty_cache()
    run_each(a, run_one, before, after)


if __name__ == "__main__":
    main()
