"""Workloads for issue 29 (inference, memory and kernel half): one root cause each, with a twin without it.

New code: a rotary-free pre-norm decoder (d=2048, 8 layers, 16 heads of 128, SwiGLU), a small GPT-style
LM trained with its LM head on a 50257 / 50304 vocabulary, a serving loop with a preallocated KV cache,
hand-written CUDA reductions (cupy/NVRTC), and three PyTorch Performance Tuning Guide items.

  python3 issue29_inference.py NAME --mode {torch,plain} --out DIR [--steps N]     (timeline workloads)
    torch : torch.profiler (CPU + CUDA, record_shapes=True: the shapes say how long the sequence is),
            schedule(wait=1, warmup=1, active=N), one prof.step() per generated token / training step
    plain : no torch profiler; an NVTX range `decode_step_N` / `train_step_N` per step, and
            cudaProfilerStart/Stop around the same N steps after the same 2 (for nsys --capture-range)
  python3 issue29_inference.py NAME --out DIR                                         (snapshot workloads)
  python3 issue29_inference.py NAME                                                    (ncu workloads)

Timeline workloads
  d_decode_no_cache   greedy decoding, batch 128, a 128-token prompt, bf16, flash attention: every token re-runs the model
                      over the whole prefix (no KV cache), so the GEMMs' rows and the attention's
                      sequence grow by one per token
  d_decode_cached     (twin) the same model and tokens with a KV cache (`past_key_values` style, torch.cat)
  a_lmhead_v50257     training a 4-layer d=1024 GPT-style LM (batch 16 x 512 tokens, bf16 autocast) whose
                      LM head has 50257 outputs: cuBLAS takes align-1 GEMM kernels for it
  a_lmhead_v50304     (twin) the vocabulary padded to 50304 (a multiple of 64)
  c_tensors_from_cpu  Tuning Guide "create tensors directly on the device": a training step whose noise
                      and positional table are made on the CPU (torch.randn, torch.arange) then `.to("cuda")`
  c_tensors_on_gpu    (twin) the same tensors made with device="cuda"
  c_anomaly_on        Tuning Guide "disable debugging APIs": torch.autograd.set_detect_anomaly(True) left on
  c_anomaly_off       (twin) the same training without it
Snapshot workloads (memory history with Python stacks, snapshot right after the OOM or at the end)
  k_kv_prealloc_oom   a server preallocates its KV cache for max_batch 32 x max_seq 8192 in `KVCache.__init__`
                      (8 layers x 2 x [32, 16, 8192, 128] bf16 = 16 GiB) under an 18 GiB cap; the first
                      prefill's logits do not fit
  k_kv_sized          (twin) the same server with the cache sized for the 2560 positions it serves
ncu workloads (CUDA C++ through cupy; profile under ncu --profile-from-start off)
  r_reduce            `row_sum_block_barrier` (a shared-memory tree with __syncthreads() after every step,
                      in a loop over rows) and its twin `row_sum_warp_shuffle` (__shfl_down_sync, one
                      barrier per row)
GEN_DEVICE=cpu runs the timeline workloads at toy sizes on a CPU to check the logic.
"""
import argparse
import contextlib
import json
import math
import os
import sys

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import CUDA, DEV, size  # noqa: E402,F401

WARM = 2


# ---------------------------------------------------------------- decoder (d_*)
def _torch():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    return torch, nn, F


def decoder_classes():
    torch, nn, F = _torch()

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.w = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * self.w

    class DecoderLayer(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
            self.gate, self.up = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, 3 * d, bias=False)
            self.down = nn.Linear(3 * d, d, bias=False)
            self.h = heads

        def forward(self, x, past=None):
            B, T, D = x.shape
            y = self.n1(x)
            split = lambda t: t.view(B, T, self.h, D // self.h).transpose(1, 2)
            q, k, v = split(self.wq(y)), split(self.wk(y)), split(self.wv(y))
            if past is not None:
                k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
            x = x + self.wo(a.transpose(1, 2).reshape(B, T, D))
            y = self.n2(x)
            return x + self.down(F.silu(self.gate(y)) * self.up(y)), (k, v)

    class Decoder(nn.Module):
        def __init__(self, vocab, d, heads, layers):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(DecoderLayer(d, heads) for _ in range(layers))
            self.norm, self.head = RMSNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, ids, past_key_values=None, use_cache=False):
            x = self.emb(ids)
            new = []
            for i, layer in enumerate(self.layers):
                x, kv = layer(x, past_key_values[i] if past_key_values is not None else None)
                new.append(kv)
            return self.head(self.norm(x[:, -1])), (new if use_cache else None)

    return Decoder


def decode(s, use_cache):
    torch, nn, F = _torch()
    vocab, d, heads, layers, batch, prompt = size((32000, 2048, 16, 8, 128, 128), (512, 64, 4, 2, 2, 6))
    dt = torch.bfloat16 if CUDA else torch.float32
    model = decoder_classes()(vocab, d, heads, layers).to(dt).to(DEV).eval()
    ids = torch.randint(0, vocab, (batch, prompt), device=DEV)
    # flash attention for every length: cuDNN's SDPA (the default on this H200) builds a new plan on the host
    # (~35 ms) for every new key length, a cause of its own that would hide this one
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [SDPBackend.FLASH_ATTENTION] if CUDA else [SDPBackend.MATH]
    with torch.no_grad(), sdpa_kernel(backends):
        if use_cache:  # prefill once, then one token per step against the cache
            logits, past = model(ids, use_cache=True)
            nxt = logits.argmax(-1, keepdim=True)
            for t in range(s.iters):
                with s.step(t):
                    logits, past = model(nxt, past_key_values=past, use_cache=True)
                    nxt = logits.argmax(-1, keepdim=True)
        else:  # every token re-runs the model over the whole prefix
            for t in range(s.iters):
                with s.step(t):
                    logits, _ = model(ids)
                    ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    if CUDA:
        torch.cuda.synchronize()


# ---------------------------------------------------------------- LM with an unaligned head (a_*)
def lm_train(s, vocab):
    torch, nn, F = _torch()
    d, heads, layers, batch, seq = size((1024, 16, 4, 16, 512), (64, 4, 2, 2, 16))
    vocab = vocab if CUDA else vocab // 100

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, heads, D // heads).permute(2, 0, 3, 1, 4)
            x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    emb, pos = nn.Embedding(vocab, d).to(DEV), nn.Embedding(seq, d).to(DEV)
    blocks = nn.Sequential(*[Block() for _ in range(layers)]).to(DEV)
    norm, head = nn.LayerNorm(d).to(DEV), nn.Linear(d, vocab, bias=False).to(DEV)
    params = [p for m in (emb, pos, blocks, norm, head) for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=CUDA)
    ids = torch.randint(0, vocab, (batch, seq + 1), device=DEV)
    at = torch.arange(seq, device=DEV)
    for t in range(s.iters):
        with s.step(t):
            with torch.autocast(DEV, dtype=torch.bfloat16):
                x = blocks(emb(ids[:, :-1]) + pos(at))
                loss = F.cross_entropy(head(norm(x)).view(-1, vocab).float(), ids[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    if CUDA:
        torch.cuda.synchronize()


# ---------------------------------------------------------------- Tuning Guide items (c_*)
def _denoiser():
    torch, nn, F = _torch()
    d = size(2048, 64)
    net = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)).to(DEV)
    return net, d, torch.optim.AdamW(net.parameters(), lr=1e-4, fused=CUDA)


def denoise_train(s, noise_on_cpu, anomaly=False):
    """A diffusion-style denoiser step: x0 + sigma * noise -> predict the noise (bf16 autocast, AdamW)."""
    torch, nn, F = _torch()
    net, d, opt = _denoiser()
    rows = size(8192, 32)
    x0 = torch.randn(rows, d, device=DEV)
    ctx = torch.autograd.detect_anomaly(check_nan=True) if anomaly else contextlib.nullcontext()
    with ctx:
        for t in range(s.iters):
            with s.step(t):
                if noise_on_cpu:  # made on the host, then copied (pageable) every step
                    noise = torch.randn(rows, d).to(DEV)
                    sigma = torch.rand(rows, 1).to(DEV)
                    scale = torch.arange(d, dtype=torch.float32).div(d).to(DEV)
                else:
                    noise = torch.randn(rows, d, device=DEV)
                    sigma = torch.rand(rows, 1, device=DEV)
                    scale = torch.arange(d, dtype=torch.float32, device=DEV).div(d)
                with torch.autocast(DEV, dtype=torch.bfloat16):
                    pred = net(x0 * scale + sigma * noise)
                    loss = F.mse_loss(pred.float(), noise)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
    if CUDA:
        torch.cuda.synchronize()


TIMELINE = {
    "d_decode_no_cache": lambda s: decode(s, False),
    "d_decode_cached": lambda s: decode(s, True),
    "a_lmhead_v50257": lambda s: lm_train(s, 50257),
    "a_lmhead_v50304": lambda s: lm_train(s, 50304),
    "c_tensors_from_cpu": lambda s: denoise_train(s, True),
    "c_tensors_on_gpu": lambda s: denoise_train(s, False),
    "c_anomaly_on": lambda s: denoise_train(s, False, anomaly=True),
    "c_anomaly_off": lambda s: denoise_train(s, False),
}


class Session:
    """Steps of one run: torch mode calls prof.step() after each; plain mode brackets the profiled steps
    with cudaProfilerStart/Stop and names each step with an NVTX range."""

    def __init__(self, iters, prof=None, name="step"):
        self.iters, self.prof, self.kind = iters, prof, "decode" if name.startswith("d_") else "train"

    @contextlib.contextmanager
    def step(self, t):
        torch = _torch()[0]
        if self.prof is None and CUDA:
            if t == WARM:
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push(f"{self.kind}_step_{t}")
        yield
        if self.prof is not None:
            self.prof.step()
        elif CUDA:
            torch.cuda.nvtx.range_pop()
            if t == self.iters - 1:
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()


def run_timeline(name, mode, steps, out):
    torch = _torch()[0]
    torch.manual_seed(0)
    if mode == "plain":
        TIMELINE[name](Session(steps + WARM, name=name))
        return
    from torch.profiler import ProfilerActivity, profile, schedule
    path = os.path.join(out, f"{name}.pt.trace.json")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    with profile(activities=acts, record_shapes=True, with_stack=False,
                 schedule=schedule(wait=1, warmup=WARM - 1, active=steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        TIMELINE[name](Session(steps + WARM, prof=prof, name=name))


# ---------------------------------------------------------------- KV-cache OOM (k_*)
class KVCache:
    """A serving engine's static KV cache: one K and one V tensor per layer, [max_batch, heads, max_seq, head_dim]."""

    def __init__(self, layers, max_batch, heads, max_seq, head_dim, dtype, device):
        import torch
        self.k = [torch.zeros(max_batch, heads, max_seq, head_dim, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(max_batch, heads, max_seq, head_dim, dtype=dtype, device=device) for _ in range(layers)]
        self.bytes = sum(t.numel() * t.element_size() for t in self.k + self.v)


class Server:
    def __init__(self, max_batch, max_seq):
        torch, nn, F = _torch()
        self.d, self.heads, self.layers, self.vocab = 2048, 16, 8, 32000
        self.model = decoder_classes()(self.vocab, self.d, self.heads, self.layers).to(torch.bfloat16).to("cuda").eval()
        self.cache = KVCache(self.layers, max_batch, self.heads, max_seq, self.d // self.heads, torch.bfloat16, "cuda")

    def prefill(self, ids):
        """Run the prompt through the model and write its K/V into the cache; returns logits for every position."""
        torch, nn, F = _torch()
        B, T = ids.shape
        x = self.model.emb(ids)
        for i, layer in enumerate(self.model.layers):
            x, (k, v) = layer(x)
            self.cache.k[i][:B, :, :T] = k
            self.cache.v[i][:B, :, :T] = v
        return self.model.head(self.model.norm(x))  # [B, T, vocab]: every position's logits (for scoring)


def kv_run(name, out, max_seq):
    import torch
    LOG = {"name": name}
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(18 * 2**30 / total)
    LOG.update(cap_gib=18, total_memory_bytes=total)
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(max_entries=int(os.environ.get("MAX_ENTRIES", 20000)), stacks="python")
    try:
        server = Server(max_batch=32, max_seq=max_seq)
        LOG["cache_bytes"] = server.cache.bytes
        LOG["cache_shape"] = list(server.cache.k[0].shape)
        with torch.no_grad():
            for r in range(3):  # requests of 32 prompts of 2048 tokens, scored (logits for every position)
                ids = torch.randint(0, server.vocab, (32, 2048), device="cuda")
                logits = server.prefill(ids)
                LOG.setdefault("done", []).append(float(logits[:, -1].float().mean()))
                del logits
        print("no OOM happened")
        LOG["oom"] = None
    except torch.OutOfMemoryError as e:
        print("OOM:", str(e)[:500])
        LOG["oom"] = str(e)[:1000]
    LOG.update(reserved_bytes=torch.cuda.memory_reserved(), allocated_bytes=torch.cuda.memory_allocated(),
               torch=torch.__version__)
    base = os.path.join(out, name)
    torch.cuda.memory._dump_snapshot(base + ".snapshot.pickle")
    with open(base + ".log.json", "w") as f:
        json.dump(LOG, f, indent=1)
    print(json.dumps(LOG)[:800])


SNAPSHOT = {"k_kv_prealloc_oom": 8192, "k_kv_sized": 2560}

# ---------------------------------------------------------------- CUDA reductions (r_*)
REDUCE_SRC = r"""
extern "C" __global__ void row_sum_block_barrier(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    // one row per block iteration; a shared-memory tree with a block-wide barrier after every step
    __shared__ float s[1024];
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        float v = 0.f;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) v += x[(size_t)r * cols + c];
        s[threadIdx.x] = v;
        __syncthreads();
        for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
            if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
            __syncthreads();
        }
        if (threadIdx.x == 0) out[r] = s[0];
        __syncthreads();
    }
}

extern "C" __global__ void row_sum_warp_shuffle(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    // the same sums: each warp reduces in registers with __shfl_down_sync, one barrier per row
    __shared__ float s[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        float v = 0.f;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) v += x[(size_t)r * cols + c];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
        if (lane == 0) s[warp] = v;
        __syncthreads();
        if (warp == 0) {
            v = lane < (blockDim.x >> 5) ? s[lane] : 0.f;
            for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
            if (lane == 0) out[r] = v;
        }
        __syncthreads();
    }
}
"""


def reduce_run():
    import cupy as cp
    mod = cp.RawModule(code=REDUCE_SRC, options=("-std=c++17",))
    rows, cols = 65536, 1024
    x = cp.random.rand(rows, cols, dtype=cp.float32)
    a, b = cp.empty(rows, cp.float32), cp.empty(rows, cp.float32)
    c = cp.empty(rows, cp.float32)
    jobs = {f"{n}_{t}": (lambda n=n, o=o, t=t, g=g: mod.get_function(n)((g,), (t,), (x, o, cp.int32(rows), cp.int32(cols))))
            for n, o, t, g in (("row_sum_block_barrier", a, 1024, 264), ("row_sum_warp_shuffle", b, 1024, 264),
                               ("row_sum_block_barrier", c, 256, 1056))}
    for f in jobs.values():
        f()
    cp.cuda.Device().synchronize()
    ref = x.sum(1)
    print("max err", *(float(cp.abs(o - ref).max()) for o in (a, b, c)))
    times = {}
    for n, f in jobs.items():  # plain timings (events), before the profiled launches
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        for _ in range(20):
            f()
        e.record()
        e.synchronize()
        times[n] = cp.cuda.get_elapsed_time(s, e) / 20 * 1000
    print("us per launch", json.dumps(times))
    cp.cuda.runtime.profilerStart()
    for f in jobs.values():
        f()
    cp.cuda.Device().synchronize()
    cp.cuda.runtime.profilerStop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("name", choices=sorted(TIMELINE) + sorted(SNAPSHOT) + ["r_reduce"])
    p.add_argument("--mode", default="torch", choices=["plain", "torch"])
    p.add_argument("--out", default=".")
    p.add_argument("--steps", type=int, default=12)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.name in TIMELINE:
        run_timeline(a.name, a.mode, a.steps, a.out)
    elif a.name in SNAPSHOT:
        kv_run(a.name, a.out, SNAPSHOT[a.name])
    else:
        reduce_run()
    print("ok", a.name, a.mode, flush=True)


if __name__ == "__main__":
    main()
