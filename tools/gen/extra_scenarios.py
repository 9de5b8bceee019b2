"""Extra real-trace workloads: one known bottleneck each, for rules that had no real firing case.

Run on a real GPU (the lent H200; see README.md beside this file):
  python3 extra_scenarios.py NAME --mode {plain,torch,snapshot} --out DIR [--steps N]
    plain    : run with NVTX ranges only (wrap in `nsys profile`)
    torch    : run under torch.profiler, write DIR/NAME.pt.trace.json
    snapshot : OOM scenarios, write DIR/NAME.snapshot.pickle (+ .memory_summary.txt, .memory_stats.json)

Timeline workloads (the rule each one is made for):
  train_naive_attention  TRAIN009 unfused_attention     GPT training, bf16 autocast, softmax(QK^T)V attention
  train_memory_bound     TRAIN011 memory_bound_kernels  token MLP training with hand-written RMSNorm/GELU chains
  infer_host_sync        INFER002 host_sync             no_grad GPT forward with `.item()` checks in every layer
  infer_input_pipeline   INFER006 input_pipeline        ResNet-50 serving, per-request CPU preprocessing, pageable copy
  infer_fp32             INFER007 fp32_no_tensor_cores  FP32 GPT forward with TF32 disabled
OOM workload:
  oom_capacity           OOM005 oom_capacity            FP32 1.2B-param GPT forward under a 7 GiB cap

`Block`, `GPT`, `nv`, `lm_batch`, `cap` and the torch-profiler / snapshot driver in `main` are copied
from ../shared/gen/scenarios.py (the corpus generator) so the traces look like the corpus ones.
"""
import argparse, json, os, sys
import torch, torch.nn as nn, torch.nn.functional as F

DEV = os.environ.get("GEN_DEVICE", "cuda")  # "cpu" only for a local dry run of the script logic


# ------------------------------------------------- copied from ../shared/gen/scenarios.py
def nv(name):
    return torch.cuda.nvtx.range(name) if DEV == "cuda" else _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class Block(nn.Module):
    def __init__(self, d, heads, sdpa=True, debug_sync=False):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h, self.sdpa, self.debug_sync = heads, sdpa, debug_sync

    def attn(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
            mask = torch.triu(torch.ones(S, S, device=x.device, dtype=torch.bool), 1)
            s = s.masked_fill(mask, float("-inf"))
            o = torch.softmax(s.float(), -1).to(q.dtype) @ v
        return self.proj(o.transpose(1, 2).reshape(B, S, D))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        if self.debug_sync:  # anti-pattern: per-layer host check
            if not torch.isfinite(x).all().item():
                raise RuntimeError("nan")
            _ = x.abs().max().item()
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, **kw):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, **kw) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def lm_batch(vocab, bs, seq, pinned=True):
    xs = torch.randint(0, vocab, (bs, seq + 1))
    if pinned and DEV == "cuda":
        xs = xs.pin_memory()

    def get(i):
        b = xs.to(DEV, non_blocking=pinned)
        return b[:, :-1], b[:, 1:]
    return get


def cap(gib):
    gib = float(os.environ.get("CAP_GIB", gib))
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(gib * 2**30 / total)
# ------------------------------------------------- end of the copied part


def scale(a, full, small):
    """Full size on the GPU; a tiny size for a local CPU dry run (GEN_DEVICE=cpu)."""
    return full if DEV == "cuda" else small


def train_loop(model, get_batch, steps, prof, autocast=torch.bfloat16):
    """Training loop with NVTX phases (as the corpus' `train`), fused AdamW, no host sync per step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=DEV == "cuda")
    for i in range(steps):
        with nv(f"step_{i}"):
            with nv("data"):
                x, y = get_batch(i)
            with nv("forward"), torch.autocast(DEV, dtype=autocast):
                out = model(x)
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
            with nv("backward"):
                loss.backward()
            with nv("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        if prof is not None:
            prof.step()
    if DEV == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------- training
def s_train_naive_attention(a, prof):
    """GPT training (bf16 autocast, fused AdamW) whose attention is softmax(QK^T)V by hand, seq 2048."""
    d, layers, bs, seq = scale(a, (1024, 6, 8, 2048), (64, 2, 2, 64))
    model = GPT(32000, d, 16, layers, sdpa=False).to(DEV)
    train_loop(model, lm_batch(32000, bs, seq), a.steps, prof)


class HandWrittenMLPBlock(nn.Module):
    """Channel-MLP block with RMSNorm and tanh-GELU written out op by op (no fused kernels, no compile)."""

    def __init__(self, d, p_drop=0.1):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.p = p_drop

    @staticmethod
    def rms_norm(x, w):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (h * w).to(x.dtype)

    @staticmethod
    def gelu_tanh(h):
        return 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h.pow(3))))

    def forward(self, x):
        h = self.fc1(self.rms_norm(x, self.w))
        h = F.dropout(self.gelu_tanh(h), self.p, self.training)
        return x + F.dropout(self.fc2(h), self.p, self.training)


class TokenMLP(nn.Module):
    def __init__(self, vocab, d, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(HandWrittenMLPBlock(d) for _ in range(layers))
        self.w_out = nn.Parameter(torch.ones(d))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(HandWrittenMLPBlock.rms_norm(x, self.w_out))


def s_train_memory_bound(a, prof):
    """Token MLP, d=1024, 64k tokens per step, bf16 autocast: the hand-written elementwise chains
    (RMSNorm in fp32, tanh-GELU, dropout, residuals) move far more bytes than the GEMMs compute."""
    d, layers, bs, seq = scale(a, (1024, 8, 32, 2048), (64, 2, 2, 64))
    model = TokenMLP(8192, d, layers).to(DEV)
    train_loop(model, lm_batch(8192, bs, seq), a.steps, prof)


# ---------------------------------------------------------------- inference
def s_infer_host_sync(a, prof):
    """no_grad fp16 GPT forward whose every layer checks `.item()` twice (isfinite, abs max)."""
    d, layers, bs, seq = scale(a, (512, 8, 16, 256), (64, 2, 2, 32))
    model = GPT(8192, d, 8, layers, debug_sync=True).to(DEV).eval()
    if DEV == "cuda":
        model = model.half()
    x = torch.randint(0, 8192, (bs, seq), device=DEV)
    with torch.no_grad():
        for i in range(a.steps):
            with nv(f"step_{i}"), nv("forward"):
                out = model(x)
                pred = out[:, -1].argmax(-1)
            if prof is not None:
                prof.step()
    if DEV == "cuda":
        torch.cuda.synchronize()


def _resnet50():
    try:
        import torchvision
        return torchvision.models.resnet50(num_classes=1000)
    except Exception:  # local dry run without a working torchvision
        return nn.Sequential(nn.Conv2d(3, 8, 7, 4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 1000))


def s_infer_input_pipeline(a, prof):
    """ResNet-50 serving (bf16 autocast, channels_last): each request's 32 images are decoded and
    preprocessed one by one on the CPU in the serving thread, then copied from pageable memory."""
    bs, side = scale(a, (32, 256), (2, 64))
    crop = side * 7 // 8
    model = _resnet50().to(DEV).eval().to(memory_format=torch.channels_last)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def preprocess(raw):  # per image, on the CPU, in the serving thread
        t = raw.float().div(255)
        o = (side - crop) // 2
        t = t[:, o:o + crop, o:o + crop].flip(-1)
        t = (t - mean) / std
        t = F.avg_pool2d(t.unsqueeze(0), 3, 1, 1).squeeze(0)  # denoise
        return F.interpolate(t.unsqueeze(0), size=(224, 224), mode="bilinear", align_corners=False).squeeze(0)

    with torch.no_grad():
        for i in range(a.steps):
            with nv(f"step_{i}"):
                with nv("data"), torch.profiler.record_function("preprocess"):
                    raws = [torch.randint(0, 255, (3, side, side), dtype=torch.uint8) for _ in range(bs)]
                    x = torch.stack([preprocess(r) for r in raws])
                    x = x.to(DEV).contiguous(memory_format=torch.channels_last)  # pageable copy
                with nv("forward"), torch.autocast(DEV, dtype=torch.bfloat16):
                    logits = model(x)
                with nv("postprocess"):
                    top5 = logits.float().topk(5, -1).indices.cpu()
            if prof is not None:
                prof.step()
    if DEV == "cuda":
        torch.cuda.synchronize()


def s_infer_fp32(a, prof):
    """FP32 GPT forward (no autocast, TF32 disabled): every GEMM is an SGEMM on the FMA pipe."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    d, layers, bs, seq = scale(a, (1024, 6, 8, 1024), (64, 2, 2, 32))
    model = GPT(32000, d, 16, layers).to(DEV).eval()
    x = torch.randint(0, 32000, (bs, seq), device=DEV)
    with torch.no_grad():
        for i in range(a.steps):
            with nv(f"step_{i}"), nv("forward"):
                out = model(x)
                pred = out[:, -1].argmax(-1)
            if prof is not None:
                prof.step()
    if DEV == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------- OOM (snapshot mode)
def o_oom_capacity(a):
    """FP32 GPT (d=2048, 22 layers, 1.24B params = 4.6 GiB) served under a 7 GiB cap: the weights
    fit, the forward of 8 x 4096 tokens does not. No leak, no optimizer, nothing fragmented."""
    cap(7)
    with torch.device(DEV):
        model = GPT(32000, 2048, 16, 22)
    model.eval()
    x = torch.randint(0, 32000, (8, 4096), device=DEV)
    with torch.no_grad():
        out = model(x)
        print("logits", tuple(out.shape))


TIMELINE = {f.__name__[2:]: f for f in [s_train_naive_attention, s_train_memory_bound, s_infer_host_sync,
                                        s_infer_input_pipeline, s_infer_fp32]}
OOM = {f.__name__[2:]: f for f in [o_oom_capacity]}


def main():  # the corpus driver (../shared/gen/scenarios.py main), unchanged but for the tables
    p = argparse.ArgumentParser()
    p.add_argument("name"); p.add_argument("--mode", default="plain"); p.add_argument("--out", default=".")
    p.add_argument("--steps", type=int, default=8)
    a = p.parse_args()
    torch.manual_seed(0)
    os.makedirs(a.out, exist_ok=True)
    if a.name in OOM:
        torch.cuda.memory._record_memory_history(max_entries=int(os.environ.get("MAX_ENTRIES", 200000)))
        try:
            OOM[a.name](a)
            print("no OOM happened", file=sys.stderr)
        except torch.OutOfMemoryError as e:
            print("OOM:", str(e)[:300])
        torch.cuda.memory._dump_snapshot(os.path.join(a.out, f"{a.name}.snapshot.pickle"))
        with open(os.path.join(a.out, f"{a.name}.memory_summary.txt"), "w") as f:
            f.write(torch.cuda.memory_summary())
        with open(os.path.join(a.out, f"{a.name}.memory_stats.json"), "w") as f:
            json.dump(torch.cuda.memory_stats(), f, indent=1)
        return
    fn = TIMELINE[a.name]
    if a.mode == "torch":
        from torch.profiler import profile, ProfilerActivity, schedule
        steps = a.steps
        a.steps = steps + 3
        path = os.path.join(a.out, f"{a.name}.pt.trace.json")
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
        with profile(activities=acts, schedule=schedule(wait=1, warmup=2, active=steps, repeat=1),
                     on_trace_ready=lambda pr: pr.export_chrome_trace(path),
                     record_shapes=True, profile_memory=True, with_stack=False) as prof:
            fn(a, prof)
    else:
        fn(a, None)


if __name__ == "__main__":
    main()
