"""KV-cache decode workloads and a training run for the cross-source pair (issue 11); new code.

  python3 kv_scenarios.py NAME --mode {torch,plain} --out DIR [--steps N]
    torch : torch.profiler with profile_memory=True (the `[memory]` instant events: allocated /
            reserved after every allocation) and record_shapes off; schedule(wait=1, warmup=2,
            active=N), one prof.step() per decode token (or per training step); DIR/NAME.pt.trace.json.
    plain : no torch profiler: cudaProfilerStart after 3 warm-up steps, cudaProfilerStop after N more
            (for `nsys profile --capture-range=cudaProfilerApi` and `ncu --profile-from-start off`).

Workloads (one cause each; "twin" = the same code with the cause removed):
  decode_b1_roomy     small_batch / concurrency: 8-layer fp16 decoder (d=1024, 16 heads), batch 1, a
                      growing (torch.cat) KV cache of a 512-token prompt; the device is >99% free
  decode_b64_roomy    (twin) the same decoder and cache at batch 64: the GPU is fed, memory still free
  decode_cache_full   kv_cache_memory: the same decoder, batch 32, a cache preallocated for
                      max_len 128k tokens (2 x 8 x 32 x 128k x 1024 x 2 B = 128 GiB): <10% of memory free
  decode_cache_fit    (twin) batch 32 with the cache preallocated for the 4k tokens it uses (~4 GB)
  train_mlp           (for the nsys + ncu pair) 4-layer bf16 MLP (d=4096, 8192 rows) training, AdamW
                      fused; GPU-bound, ~40 kernels per step
GEN_DEVICE=cpu runs them at toy sizes on a CPU to check the logic.
"""
import contextlib
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import CUDA, DEV, WARM, Session, arguments, capture_ticks, size, torch_profiled  # noqa: E402,F401


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h = heads

    def attend(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        return q, k, v

    def finish(self, x, a):
        B, T, D = x.shape
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class Decoder(nn.Module):
    def __init__(self, vocab, d, heads, layers, max_pos):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_pos, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.ln, self.lm = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward_growing(self, ids, pos, cache):
        """cache: list of (k, v) per layer, grown by torch.cat (a dynamic cache, as HF's DynamicCache)."""
        x = self.tok(ids) + self.pos.weight[pos:pos + ids.shape[1]]
        for i, layer in enumerate(self.layers):
            q, k, v = layer.attend(x)
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
            x = layer.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=ids.shape[1] > 1))
        return self.lm(self.ln(x[:, -1]))

    def forward_static(self, ids, pos, ck, cv):
        """ck, cv: [layers, B, H, max_len, Dh] preallocated (a static cache)."""
        x = self.tok(ids) + self.pos.weight[pos:pos + ids.shape[1]]
        T = ids.shape[1]
        for i, layer in enumerate(self.layers):
            q, k, v = layer.attend(x)
            ck[i, :, :, pos:pos + T] = k
            cv[i, :, :, pos:pos + T] = v
            a = F.scaled_dot_product_attention(q, ck[i, :, :, :pos + T], cv[i, :, :, :pos + T], is_causal=T > 1)
            x = layer.finish(x, a)
        return self.lm(self.ln(x[:, -1]))


def _decoder():
    vocab, d, heads, layers = size((32000, 1024, 16, 8), (256, 32, 4, 2))
    dt = torch.float16 if CUDA else torch.float32
    return Decoder(vocab, d, heads, layers, size(8192, 512)).to(DEV).to(dt).eval(), vocab, dt


@torch.no_grad()
def decode_growing(s, batch):
    """Prefill a 512-token prompt, then one token per step for the whole batch (greedy, on the GPU)."""
    model, vocab, dt = _decoder()
    prompt = size(512, 8)
    cache = [None] * len(model.layers)
    ids = torch.randint(0, vocab, (batch, prompt), device=DEV)
    nxt = model.forward_growing(ids, 0, cache).argmax(-1, keepdim=True)
    for t in range(s.iters):
        nxt = model.forward_growing(nxt, prompt + t, cache).argmax(-1, keepdim=True)
        s.tick()
    if CUDA:
        torch.cuda.synchronize()


@torch.no_grad()
def decode_static(s, batch, max_len):
    model, vocab, dt = _decoder()
    L, B, H = len(model.layers), batch, model.layers[0].h
    Dh = model.tok.embedding_dim // H
    ck = torch.zeros((L, B, H, max_len, Dh), dtype=dt, device=DEV)
    cv = torch.zeros_like(ck)
    prompt = size(512, 8)
    ids = torch.randint(0, vocab, (batch, prompt), device=DEV)
    nxt = model.forward_static(ids, 0, ck, cv).argmax(-1, keepdim=True)
    for t in range(s.iters):
        nxt = model.forward_static(nxt, prompt + t, ck, cv).argmax(-1, keepdim=True)
        s.tick()
    if CUDA:
        torch.cuda.synchronize()


def train_mlp(s):
    d, rows, layers = size((4096, 8192, 4), (64, 32, 2))
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(d, d), nn.GELU()]
    model = nn.Sequential(*mods, nn.Linear(d, 1000)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    x = torch.randn(rows, d, device=DEV)
    y = torch.randint(0, 1000, (rows,), device=DEV)
    for _ in range(s.iters):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        s.tick()
    if CUDA:
        torch.cuda.synchronize()


WORKLOADS = {
    "decode_b1_roomy": lambda s: decode_growing(s, 1),
    "decode_b64_roomy": lambda s: decode_growing(s, 64),
    "decode_cache_full": lambda s: decode_static(s, 32, size(128 * 1024, 1024)),
    "decode_cache_fit": lambda s: decode_static(s, 32, size(4096, 1024)),
    "train_mlp": train_mlp,
}


def run_torch(name, steps, out):
    torch_profiled(WORKLOADS[name], steps, os.path.join(out, f"{name}.pt.trace.json"),
                   record_shapes=False, profile_memory=True, with_stack=False)


def run_plain(name, steps):
    WORKLOADS[name](Session(steps + WARM, tick=capture_ticks(steps)))


def main():
    a = arguments(WORKLOADS, 5, many=False)
    torch.manual_seed(0)
    if a.mode == "torch":
        run_torch(a.name, a.steps, a.out)
    else:
        run_plain(a.name, a.steps)
    if CUDA:
        free, total = torch.cuda.mem_get_info()
        print(f"{a.name}: peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB of {total / 2**30:.1f} GiB", flush=True)


if __name__ == "__main__":
    main()
