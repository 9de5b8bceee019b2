"""Mechanism workloads for issue 9: one root cause each, written apart from the corpus code (other
models, loops and sizes), and none of them uses NVTX ranges.

Run on the lent H200 (see README.md beside this file; run_mech.sh drives it):
  python3 mech_scenarios.py NAME [NAME ...] --mode {torch,plain} --out DIR [--steps N]
    torch : torch.profiler (record_shapes, profile_memory and with_stack off), writes DIR/NAME.pt.trace.json.
            A "steady" workload runs N + 3 iterations under schedule(wait=1, warmup=2, active=N) and
            calls prof.step() once per iteration; a "from_start" one is profiled from before the first
            CUDA call to the end, without a schedule; a "no_markers" one warms up, then profiles its
            loop without ever calling prof.step() (no ProfilerStep ranges in the trace).
    plain : no torch profiler, for `nsys profile --capture-range=cudaProfilerApi`: cudaProfilerStart
            after the 3 warm-up iterations (or around the "no_markers" loop), cudaProfilerStop at the
            end. A "from_start" workload calls neither (profile it without a capture range).
Several steady NAMEs may share one process (torch mode); global flags are reset between them.

Workloads (the category each one is built for; "twin" = the same code with the cause removed; what
each one measured is in fixtures/README.md, "Mechanism traces"):
  infer_einsum_attention        unfused_attention    bf16 causal LM, attention by torch.einsum + mask + scale, seq 2048
  infer_sdpa_attention          (twin)               the same model with F.scaled_dot_product_attention
  train_vit_matmul_attention    unfused_attention    ViT training (bf16 autocast), attention by torch.matmul, 1024 patches, 4 layers
  train_wide_mlp_metric_syncs   host_sync            residual-MLP training, `.cpu()` accuracy + per-parameter norm `.item()` per micro-batch
  train_wide_mlp_metrics_on_gpu (twin)               the same, metrics accumulated on the GPU, read once every 3 steps
  train_convnet_slow_loader     input_pipeline       conv net behind DataLoader(num_workers=0), per-sample numpy augmentation
  train_convnet_gpu_batches     (twin)               the same net on batches augmented once, resident on the GPU
  infer_bert_tokenize           input_pipeline       hand-written BERT-ish encoder, per-request Python tokenization before each forward
  train_unet_no_cache           allocator_churn      U-Net-ish conv stack training with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (set by the runner)
  train_unet_cached             (twin)               the same loop with the caching allocator on
  infer_unet_empty_cache        allocator_churn      U-Net-ish segmentation serving, torch.cuda.empty_cache() after every request
  setup_convnet_from_start      one_time_setup       cudnn.benchmark conv net with 9 conv shapes, profiled from CUDA init, 2 steady steps
  setup_convnet_scheduled       (twin)               the same code profiled after warm-up (schedule wait=1, warmup=2, active=3)
  infer_tiny_mlp_eager          launch_overhead      32 residual Linear(256)+SiLU blocks, batch 1, eager
  infer_tiny_mlp_graph          (twin)               the same forward captured once in a CUDA graph and replayed (cudaGraphLaunch)
  power_iteration_readback      host_sync            power iteration on an 8192^2 matrix, estimate `.item()` every iteration, no step markers
  power_iteration_check_every_50 (twin)              the same, read back every 50 iterations
  train_convnet_fp32            fp32_no_tensor_cores VGG-ish conv net training in FP32 with TF32 disabled
  train_convnet_bf16            (twin)               the same under bf16 autocast, channels_last
  infer_kv_decode               launch_overhead      KV-cached 3-layer decoder, batch 1, greedy decode on the GPU, one read per request
  train_vit_sdpa_healthy        (none)               ViT (d=2048, 4 blocks) with SDPA, bf16 autocast, fused AdamW, GPU-bound
  train_mixer_bf16              memory_bound_kernels MLP-mixer (224px, d=768, 6 blocks) bf16: built healthy, measured bandwidth-bound
"""
import contextlib
import gc
import math
import os
import random
import re
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import (CUDA, DEV, WARM, Session, arguments, capture_ticks, cuda_profiler, run_each, size,  # noqa: E402,F401
                     sync, torch_profiled, torch_profiled_whole, workloads)


# ============================================================== models (none is in the corpus)
class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class CausalLMBlock(nn.Module):
    """Pre-norm decoder block with SwiGLU MLP; attention by einsum (hand-written) or SDPA."""

    def __init__(self, d, heads, einsum):
        super().__init__()
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.wqkv, self.wo = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        hid = 8 * d // 3 // 64 * 64
        self.w1, self.w3, self.w2 = nn.Linear(d, hid, bias=False), nn.Linear(d, hid, bias=False), nn.Linear(hid, d, bias=False)
        self.h, self.einsum = heads, einsum
        self.scale = (d // heads) ** -0.5

    def attention(self, x):
        B, S, D = x.shape
        q, k, v = self.wqkv(x).view(B, S, 3, self.h, D // self.h).unbind(2)  # each B,S,H,Dh (strided)
        if self.einsum:
            s = torch.einsum("bqhd,bkhd->bhqk", q, k) * self.scale
            causal = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
            s = s.masked_fill(causal, float("-inf"))
            p = torch.softmax(s.float(), dim=-1).to(x.dtype)  # fp32 softmax, back to bf16
            o = torch.einsum("bhqk,bkhd->bqhd", p, v.contiguous())
            o = o.contiguous().view(B, S, D)
        else:
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            o = o.transpose(1, 2).reshape(B, S, D)
        return self.wo(o)

    def forward(self, x):
        x = x + self.attention(self.n1(x))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class CausalLM(nn.Module):
    def __init__(self, vocab, d, heads, layers, einsum):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(CausalLMBlock(d, heads, einsum) for _ in range(layers))
        self.norm, self.out = RMSNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx)
        for b in self.blocks:
            x = b(x)
        return self.out(self.norm(x))


class ViTBlock(nn.Module):
    """timm-style ViT block whose attention is the non-fused path: (q*scale) @ k^T, softmax, dropout, @ v."""

    def __init__(self, d, heads, p_drop=0.1):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.attn_drop = nn.Dropout(p_drop)
        self.h, self.scale = heads, (d // heads) ** -0.5

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(self.ln1(x)).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.matmul(q * self.scale, k.transpose(-2, -1))
        attn = self.attn_drop(attn.softmax(dim=-1))
        o = torch.matmul(attn, v).transpose(1, 2).reshape(B, N, C)
        x = x + self.proj(o)
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    def __init__(self, img, patch, d, heads, layers, classes):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.pos = nn.Parameter(torch.zeros(1, (img // patch) ** 2, d))
        self.blocks = nn.Sequential(*[ViTBlock(d, heads) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.norm(self.blocks(x)).mean(1))


class MixerBlock(nn.Module):
    def __init__(self, tokens, d, tok_hidden, ch_hidden):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.tok = nn.Sequential(nn.Linear(tokens, tok_hidden), nn.GELU(), nn.Linear(tok_hidden, tokens))
        self.ch = nn.Sequential(nn.Linear(d, ch_hidden), nn.GELU(), nn.Linear(ch_hidden, d))

    def forward(self, x):  # B, T, D
        x = x + self.tok(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.ln2(x))


class Mixer(nn.Module):
    def __init__(self, img, patch, d, blocks, tok_hidden, ch_hidden, classes):
        super().__init__()
        t = (img // patch) ** 2
        self.stem = nn.Conv2d(3, d, patch, patch)
        self.blocks = nn.Sequential(*[MixerBlock(t, d, tok_hidden, ch_hidden) for _ in range(blocks)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


def conv_relu(cin, cout, k=3, s=1, p=None, d=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2 * d if p is None else p, dilation=d), nn.ReLU(inplace=True))


def wide_convnet(classes, w):
    """Plain conv net (no BatchNorm), channels growing as the image shrinks: conv-bound, not bandwidth-bound."""
    return nn.Sequential(conv_relu(3, w), conv_relu(w, 2 * w, s=2), conv_relu(2 * w, 2 * w), conv_relu(2 * w, 4 * w, s=2),
                         conv_relu(4 * w, 4 * w), conv_relu(4 * w, 8 * w, s=2), conv_relu(8 * w, 8 * w),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, classes))


def vgg_ish(classes, w):
    return nn.Sequential(conv_relu(3, w), conv_relu(w, w), nn.MaxPool2d(2), conv_relu(w, 2 * w), conv_relu(2 * w, 2 * w),
                         nn.MaxPool2d(2), conv_relu(2 * w, 4 * w), conv_relu(4 * w, 4 * w), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * w * 16, classes))


def multi_shape_convnet(classes, w):
    """Nine different conv configurations (7x7, 5x5, 3x3, dilated, 1x1, 1x7, 7x1): cuDNN benchmarks each."""
    return nn.Sequential(conv_relu(3, w, 7, 2), conv_relu(w, 2 * w, 5), conv_relu(2 * w, 4 * w, 3, 2),
                         conv_relu(4 * w, 4 * w, 3, d=2), conv_relu(4 * w, 8 * w, 1), conv_relu(8 * w, 8 * w, 3, 2),
                         conv_relu(8 * w, 8 * w, (1, 7), p=(0, 3)), conv_relu(8 * w, 8 * w, (7, 1), p=(3, 0)),
                         conv_relu(8 * w, 8 * w, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, classes))


class UNetish(nn.Module):
    """Two-level encoder / decoder with skip concatenations and transposed-conv upsampling."""

    def __init__(self, w):
        super().__init__()
        self.e1 = nn.Sequential(conv_relu(3, w), conv_relu(w, w))
        self.e2 = nn.Sequential(conv_relu(w, 2 * w, s=2), conv_relu(2 * w, 2 * w))
        self.mid = nn.Sequential(conv_relu(2 * w, 4 * w, s=2), conv_relu(4 * w, 4 * w))
        self.u2, self.d2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, 2), conv_relu(4 * w, 2 * w)
        self.u1, self.d1 = nn.ConvTranspose2d(2 * w, w, 2, 2), conv_relu(2 * w, w)
        self.out = nn.Conv2d(w, 1, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(a)
        m = self.mid(b)
        y = self.d2(torch.cat([self.u2(m), b], 1))
        return self.out(self.d1(torch.cat([self.u1(y), a], 1)))


class BertishLayer(nn.Module):
    """Post-norm encoder layer (BERT order), bidirectional SDPA over padded requests."""

    def __init__(self, d, heads):
        super().__init__()
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h = heads

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, S, D)
        x = self.ln1(x + self.o(a))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Bertish(nn.Module):
    def __init__(self, vocab, d, heads, layers, max_len, classes):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(BertishLayer(d, heads) for _ in range(layers))
        self.cls = nn.Linear(d, classes)

    def forward(self, ids):
        x = self.ln(self.tok(ids) + self.pos.weight[: ids.shape[1]])
        for layer in self.layers:
            x = layer(x)
        return self.cls(x[:, 0])


class TinyResidualMLP(nn.Module):
    def __init__(self, d, blocks, out):
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(d, d) for _ in range(blocks))
        self.head = nn.Linear(d, out)

    def forward(self, x):
        for lin in self.lins:
            x = x + F.silu(lin(x))
        return self.head(x)


class KVDecoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h = heads

    def forward(self, x, pos, ck, cv):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        ck[:, :, pos:pos + T] = k
        cv[:, :, pos:pos + T] = v
        a = F.scaled_dot_product_attention(q, ck[:, :, :pos + T], cv[:, :, :pos + T], is_causal=T > 1)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class KVDecoder(nn.Module):
    def __init__(self, vocab, d, heads, layers, max_len):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.layers = nn.ModuleList(KVDecoderLayer(d, heads) for _ in range(layers))
        self.ln, self.lm = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.heads, self.max_len = heads, max_len

    def new_cache(self, batch, dtype):
        d = self.tok.embedding_dim
        shape = (len(self.layers), batch, self.heads, self.max_len, d // self.heads)
        dev = self.tok.weight.device
        return torch.zeros(shape, dtype=dtype, device=dev), torch.zeros(shape, dtype=dtype, device=dev)

    def forward(self, ids, pos, ck, cv):
        x = self.tok(ids) + self.pos.weight[pos:pos + ids.shape[1]]
        for i, layer in enumerate(self.layers):
            x = layer(x, pos, ck[i], cv[i])
        return self.lm(self.ln(x[:, -1]))


# ============================================================== shared loops
def train_steps(s, model, batches, autocast=torch.bfloat16, opt=None, loss_fn=F.cross_entropy):
    """Plain training loop: forward (autocast or not), backward, optimizer; no host read-back."""
    opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    ctx = (lambda: torch.autocast(DEV, dtype=autocast)) if autocast is not None else contextlib.nullcontext
    for i in range(s.iters):
        x, y = batches(i)
        with ctx():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        s.tick()
    sync()


def resident(*tensors):
    """Batches made once, on the device: iteration i gets the same tensors (no input work in the loop)."""
    return lambda i: tensors


# ============================================================== 1-2: hand-written attention
@torch.no_grad()
def w_infer_einsum_attention(s, einsum=True):
    """bf16 causal LM (d=768, 12 heads, 6 layers, SwiGLU), 16 x 2048 tokens per forward, no_grad."""
    d, heads, layers, bs, seq = size((768, 12, 6, 16, 2048), (64, 4, 2, 2, 32))
    model = CausalLM(16384, d, heads, layers, einsum).to(DEV).eval()
    if CUDA:
        model = model.to(torch.bfloat16)
    idx = torch.randint(0, 16384, (bs, seq), device=DEV)
    for i in range(s.iters):
        logits = model(idx)
        nxt = logits[:, -1].argmax(-1)
        s.tick()
    sync()


def w_infer_sdpa_attention(s):
    w_infer_einsum_attention(s, einsum=False)


def w_train_vit_matmul_attention(s):
    """ViT-S-ish (d=384, 6 heads, 4 layers) on 256px images with 8px patches: 1024 tokens, batch 16."""
    img, patch, d, heads, layers, bs = size((256, 8, 384, 6, 4, 16), (32, 8, 32, 2, 2, 2))
    model = ViT(img, patch, d, heads, layers, 1000).to(DEV)
    x = torch.randn(bs, 3, img, img, device=DEV)
    y = torch.randint(0, 1000, (bs,), device=DEV)
    train_steps(s, model, resident(x, y))


# ============================================================== 3: host read-backs per micro-batch
class ResMLPBlock(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class WideResMLP(nn.Module):
    """Residual MLP classifier over feature vectors (wide GEMMs, few kernels per parameter)."""

    def __init__(self, din, d, hidden, blocks, classes):
        super().__init__()
        self.inp = nn.Linear(din, d)
        self.blocks = nn.Sequential(*[ResMLPBlock(d, hidden) for _ in range(blocks)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.inp(x))))


def w_train_wide_mlp_metric_syncs(s, on_gpu=False):
    """Residual MLP (512 -> 2048, 4 blocks of 2048 -> 8192 -> 2048, 1000 classes; 30 parameter tensors),
    2 micro-batches of 6144 rows per step (gradient accumulation), bf16 autocast, fused AdamW.
    Main: after each micro-batch's forward the predictions and labels go to the host for accuracy
    (`.cpu()`), and after its backward every parameter's gradient norm and weight norm are read with
    `.item()` (60 reads) for an update-ratio log.
    Twin (on_gpu): the same metrics accumulated in GPU tensors (torch._foreach_norm), copied to the host
    once every 3 steps."""
    din, d, hidden, blocks, rows = size((512, 2048, 8192, 4, 6144), (16, 32, 64, 2, 8))
    model = WideResMLP(din, d, hidden, blocks, 1000).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    micro = 2
    xs = torch.randn(micro, rows, din, device=DEV)
    ys = torch.randint(0, 1000, (micro, rows), device=DEV)
    params = list(model.parameters())
    correct_gpu = torch.zeros((), device=DEV, dtype=torch.long)
    ratio_gpu = torch.zeros(len(params), device=DEV)
    log = []
    for i in range(s.iters):
        correct, ratio = 0, [0.0] * len(params)
        for m in range(micro):
            with torch.autocast(DEV, dtype=torch.bfloat16):
                logits = model(xs[m])
                loss = F.cross_entropy(logits, ys[m]) / micro
            if on_gpu:
                correct_gpu += (logits.argmax(1) == ys[m]).sum()
            else:
                correct += int((logits.argmax(1).cpu() == ys[m].cpu()).sum())
            loss.backward()
            if on_gpu:
                g = torch.stack(torch._foreach_norm([p.grad for p in params]))
                w = torch.stack(torch._foreach_norm([p.detach() for p in params]))
                ratio_gpu += g / (w + 1e-12)
            else:
                for j, p in enumerate(params):
                    ratio[j] += p.grad.norm().item() / (p.detach().norm().item() + 1e-12)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if on_gpu and i % 3 == 2:
            log.append((correct_gpu.item(), ratio_gpu.cpu()))  # one read per 3 steps
            correct_gpu.zero_(); ratio_gpu.zero_()
        elif not on_gpu:
            log.append((correct / (micro * rows), max(ratio)))
        s.tick()
    sync()


def w_train_wide_mlp_metrics_on_gpu(s):
    w_train_wide_mlp_metric_syncs(s, on_gpu=True)


# ============================================================== 4: slow DataLoader
class AugmentedShapes(torch.utils.data.Dataset):
    """Synthetic 64px images made and augmented per sample in Python/numpy (as PIL/numpy pipelines do):
    random crop + nearest resize, flip, colour jitter, a per-row jitter loop, two cutout boxes,
    normalization; one torch.from_numpy at the end (numpy work is invisible to torch.profiler)."""

    def __init__(self, n, side):
        self.n, self.side = n, side
        self.mean = np.array([0.49, 0.48, 0.45], dtype=np.float32)
        self.std = np.array([0.25, 0.24, 0.26], dtype=np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        side = self.side
        img = rng.integers(0, 256, (side + 16, side + 16, 3), dtype=np.uint8).astype(np.float32) / 255
        c = int(rng.integers(side // 2, side + 17))
        y0, x0 = int(rng.integers(0, side + 17 - c)), int(rng.integers(0, side + 17 - c))
        idx = (np.arange(side) * c // side)
        img = img[y0:y0 + c, x0:x0 + c][idx][:, idx]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        b, ct, sat = rng.uniform(0.8, 1.2, 3)
        img = img * b
        img = (img - img.mean()) * ct + img.mean()
        gray = img.mean(2, keepdims=True)
        img = np.clip(gray + (img - gray) * sat, 0, 1)
        for row in range(side):  # per-row horizontal jitter
            img[row] = np.roll(img[row], int(rng.integers(-2, 3)), axis=0)
        for _ in range(2):
            h = int(rng.integers(4, max(5, side // 4)))
            cy, cx = int(rng.integers(0, side - h)), int(rng.integers(0, side - h))
            img[cy:cy + h, cx:cx + h] = 0.5
        img = ((img - self.mean) / self.std).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), int(rng.integers(100))


def convnet_loader_setup():
    side, w, bs = size((64, 64, 512), (16, 4, 4))
    model = wide_convnet(100, w).to(DEV).to(memory_format=torch.channels_last)
    return model, AugmentedShapes(100000, side), bs


def w_train_convnet_slow_loader(s):
    """DataLoader(num_workers=0, shuffle) feeding 512-image batches from the per-sample augmentation
    above to a 7-conv net (bf16 autocast, channels_last, SGD momentum); pageable host-to-device copy."""
    model, ds, bs = convnet_loader_setup()
    loader = iter(torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=True, num_workers=0))

    def batch(i):
        x, y = next(loader)
        return x.to(DEV).contiguous(memory_format=torch.channels_last), y.to(DEV)
    train_steps(s, model, batch, opt=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))


def w_train_convnet_gpu_batches(s):
    """Twin: the same net and augmentation, but 4 batches are augmented once before the loop and kept
    on the GPU (what a DataLoader with workers + prefetch amounts to when it keeps up)."""
    model, ds, bs = convnet_loader_setup()
    loader = torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=True, num_workers=0)
    it = iter(loader)
    cached = []
    for _ in range(4):
        x, y = next(it)
        cached.append((x.to(DEV).contiguous(memory_format=torch.channels_last), y.to(DEV)))
    sync()
    train_steps(s, model, lambda i: cached[i % 4], opt=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))


# ============================================================== 5: per-request tokenization
WORDS = ("gpu kernel latency throughput request tensor memory bandwidth profile server model token batch "
         "queue cache schedule stream launch compute graph layer attention decoder encoder vector matrix "
         "pipeline worker thread process sample dataset gradient optimizer precision float integer").split()


def build_vocab(n):
    """Word pieces of the word list above plus random ones: a dict from piece to id (wordpiece-style)."""
    rng = random.Random(0)
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for w in WORDS:
        for i in range(1, len(w) + 1):
            vocab.setdefault(w[:i], len(vocab))
            vocab.setdefault("##" + w[i - 1:], len(vocab))
    letters = "abcdefghijklmnopqrstuvwxyz"
    while len(vocab) < n:
        vocab.setdefault("".join(rng.choice(letters) for _ in range(rng.randint(2, 6))), len(vocab))
    return vocab


def wordpiece(text, vocab, max_len):
    """Greedy longest-match-first tokenization in pure Python (what a slow tokenizer does per request)."""
    ids = [vocab["[CLS]"]]
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
        start = 0
        while start < len(word):
            end, piece = len(word), None
            while start < end:
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in vocab:
                    piece = sub
                    break
                end -= 1
            if piece is None:
                ids.append(vocab["[UNK]"])
                break
            ids.append(vocab[piece])
            start = end
    ids = ids[: max_len - 1] + [vocab["[SEP]"]]
    return ids + [0] * (max_len - len(ids))


@torch.no_grad()
def w_infer_bert_tokenize(s):
    """Each request batch: 32 texts of 200 words made up and tokenized in Python on the serving thread,
    then a fp16 6-layer d=768 encoder forward on 32 x 128 tokens, the class ids read back once."""
    d, layers, reqs, words, max_len = size((768, 6, 32, 200, 128), (64, 2, 2, 20, 16))
    vocab = build_vocab(30000)
    model = Bertish(len(vocab), d, 12 if CUDA else 4, layers, max_len, 5).to(DEV).eval()
    if CUDA:
        model = model.half()
    rng = random.Random(1)
    for i in range(s.iters):
        texts = [" ".join(rng.choice(WORDS) + rng.choice(["", "s", "ing", "ed", ",", "."]) for _ in range(words))
                 for _ in range(reqs)]
        ids = torch.tensor([wordpiece(t, vocab, max_len) for t in texts])
        labels = model(ids.to(DEV)).argmax(-1).cpu()
        s.tick()
    sync()


# ============================================================== 6: allocator churn
def unet_setup(train):
    w, bs, side = size((64, 64, 128), (4, 2, 16)) if train else size((64, 8, 256), (4, 2, 16))
    return UNetish(w).to(DEV).to(memory_format=torch.channels_last), bs, side


def unet_train(s):
    model, bs, side = unet_setup(True)
    x = torch.randn(bs, 3, side, side, device=DEV).contiguous(memory_format=torch.channels_last)
    y = (torch.rand(bs, 1, side, side, device=DEV) > 0.5).float()
    train_steps(s, model, resident(x, y), loss_fn=F.binary_cross_entropy_with_logits)


def w_train_unet_no_cache(s):
    """U-Net-ish (64/128/256 channels) training on 64 x 128^2 images, bf16 autocast, fused AdamW,
    BCE-with-logits on a random mask. Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (run_mech.sh sets it for
    this workload only): every tensor is a cudaMalloc and every free a cudaFree."""
    if CUDA and os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1":
        print("warning: train_unet_no_cache without PYTORCH_NO_CUDA_MEMORY_CACHING=1", file=sys.stderr)
    unet_train(s)


def w_train_unet_cached(s):
    """Twin: the same loop with the caching allocator on."""
    unet_train(s)


@torch.no_grad()
def w_infer_unet_empty_cache(s):
    """Segmentation serving: each request is 8 fresh 256^2 images copied from pinned memory, a bf16
    forward, the mask thresholded and copied back, then torch.cuda.empty_cache() 'to free memory': the
    next request's activations are cudaMalloc'ed again."""
    model, bs, side = unet_setup(False)
    host = torch.randn(bs, 3, side, side)
    if CUDA:
        host = host.pin_memory()
    for i in range(s.iters):
        x = host.to(DEV, non_blocking=True).contiguous(memory_format=torch.channels_last)
        with torch.autocast(DEV, dtype=torch.bfloat16):
            mask = model(x) > 0
        out = mask.cpu()
        del x, mask
        if CUDA:
            torch.cuda.empty_cache()
        s.tick()
    sync()


# ============================================================== 7: one-time setup
def setup_convnet_train(s):
    """cudnn.benchmark=True, a 9-shape conv net built and moved to the GPU, bf16 autocast, 512 x 96^2."""
    torch.backends.cudnn.benchmark = True
    w, bs, side = size((32, 512, 96), (4, 2, 32))
    model = multi_shape_convnet(100, w).to(DEV).to(memory_format=torch.channels_last)
    x = torch.randn(bs, 3, side, side, device=DEV).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (bs,), device=DEV)
    train_steps(s, model, resident(x, y))


def w_setup_convnet_from_start(s):
    setup_convnet_train(s)


def w_setup_convnet_scheduled(s):
    setup_convnet_train(s)


# ============================================================== 8: launch-bound tiny MLP, and its CUDA graph
def tiny_mlp_setup():
    d, blocks, n = size((256, 32, 64), (16, 4, 8))
    model = TinyResidualMLP(d, blocks, 16).to(DEV).eval()
    if CUDA:
        model = model.half()
    reqs = torch.randn(n, 1, d, device=DEV, dtype=torch.float16 if CUDA else torch.float32)
    return model, reqs


@torch.no_grad()
def w_infer_tiny_mlp_eager(s):
    """One request = one batch-1 forward through 32 residual Linear(256,256)+SiLU blocks (fp16), eager;
    the predicted class is read back per request."""
    model, reqs = tiny_mlp_setup()
    for i in range(s.iters):
        pred = int(model(reqs[i % len(reqs)]).argmax(-1).item())
        s.tick()
    sync()


@torch.no_grad()
def w_infer_tiny_mlp_graph(s):
    """Twin: the same forward captured once with torch.cuda.graph and replayed per request."""
    model, reqs = tiny_mlp_setup()
    static_x = reqs[0].clone()
    if CUDA:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = model(static_x)
        run = graph.replay
    else:  # no graphs on the CPU dry run
        static_y = model(static_x)

        def run():
            static_y.copy_(model(static_x))
    for i in range(s.iters):
        static_x.copy_(reqs[i % len(reqs)])
        run()
        pred = int(static_y.argmax(-1).item())
        s.tick()
    sync()


# ============================================================== 9: power iteration, no step markers
@torch.no_grad()
def power_iteration(s, check_every):
    """Largest eigenvalue of an 8192 x 8192 SPD matrix (fp32, 256 MB) by power iteration: per iteration
    w = A v (GEMV, ~80 us), lam = ||w||, v = w / lam; the estimate lam is read back with .item() every
    `check_every` iterations to test convergence (relative change < 1e-12: not met in 150 iterations)."""
    n, warm, iters = size((8192, 20, 150), (64, 2, 6))
    g = torch.Generator(device=DEV).manual_seed(0)
    b = torch.randn(n, n, device=DEV, generator=g)
    a = b @ b.T / n
    v = torch.randn(n, device=DEV, generator=g)
    v = v / v.norm()
    state = {"v": v, "prev": 0.0}

    def iteration(it):
        w = a @ state["v"]
        lam = w.norm()
        state["v"] = w / lam
        if it % check_every == 0:
            now = lam.item()
            if abs(now - state["prev"]) < 1e-12 * now:
                return True
            state["prev"] = now
        return False

    for it in range(warm):
        iteration(it)
    sync()
    with s.window():
        for it in range(iters):
            if iteration(it):
                break
        sync()


def w_power_iteration_readback(s):
    power_iteration(s, check_every=1)


def w_power_iteration_check_every_50(s):
    """Twin: the same loop reading the estimate back once every 50 iterations."""
    power_iteration(s, check_every=50)


# ============================================================== 10: FP32 conv training
def vgg_train(s, amp):
    w, bs = size((128, 512), (4, 2))
    model = vgg_ish(100, w).to(DEV)
    x = torch.randn(bs, 3, 32, 32, device=DEV)
    if amp:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (bs,), device=DEV)
    train_steps(s, model, resident(x, y), autocast=torch.bfloat16 if amp else None,
                opt=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True))


def w_train_convnet_fp32(s):
    """VGG-ish (128/256/512 channels, 6 convs) on 512 x 32^2 images, FP32, TF32 off for cuDNN and cuBLAS."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    vgg_train(s, amp=False)


def w_train_convnet_bf16(s):
    """Twin: the same under bf16 autocast, channels_last."""
    vgg_train(s, amp=True)


# ============================================================== 11: KV-cached decode server
@torch.no_grad()
def w_infer_kv_decode(s):
    """One request: a 32-token prompt prefilled into a preallocated KV cache, then 12 tokens decoded one
    at a time (batch 1, fp16, greedy argmax kept on the GPU), the 12 ids read back once at the end."""
    vocab, d, heads, layers, prompt, new = size((8192, 512, 8, 3, 32, 12), (256, 32, 4, 2, 4, 3))
    model = KVDecoder(vocab, d, heads, layers, prompt + new).to(DEV).eval()
    dt = torch.float16 if CUDA else torch.float32
    model = model.to(dt)
    prompts = torch.randint(0, vocab, (8, 1, prompt), device=DEV)
    for i in range(s.iters):
        ck, cv = model.new_cache(1, dt)
        ids = prompts[i % 8]
        nxt = model(ids, 0, ck, cv).argmax(-1, keepdim=True)
        out = [nxt]
        for t in range(new - 1):
            nxt = model(nxt, prompt + t, ck, cv).argmax(-1, keepdim=True)
            out.append(nxt)
        tokens = torch.cat(out, 1).tolist()
        s.tick()
    sync()


# ============================================================== 12: healthy
class SDPAViTBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h = heads

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def w_train_vit_sdpa_healthy(s):
    """ViT-H-ish (d=2048, 16 heads, 4 blocks, MLP 8192) on 224px images with 14px patches (256 tokens),
    batch 64, flash attention through SDPA, bf16 autocast, fused AdamW, batches resident on the GPU."""
    img, patch, d, heads, layers, bs = size((224, 14, 2048, 16, 4, 64), (28, 14, 32, 2, 2, 2))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, d, patch, patch)
            self.pos = nn.Parameter(torch.zeros(1, (img // patch) ** 2, d))
            self.blocks = nn.Sequential(*[SDPAViTBlock(d, heads) for _ in range(layers)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 1000)

        def forward(self, x):
            x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
            return self.head(self.norm(self.blocks(x)).mean(1))
    model = Net().to(DEV)
    x = torch.randn(bs, 3, img, img, device=DEV)
    y = torch.randint(0, 1000, (bs,), device=DEV)
    train_steps(s, model, resident(x, y))


def w_train_mixer_bf16(s):
    """MLP-mixer on 224px images (16px patches: 196 tokens), d=768, 6 blocks, batch 64, bf16 autocast,
    fused AdamW, batches resident on the GPU. Built as a healthy run, measured memory-bound: the token
    mixing transposes (copies 30%), LayerNorm, GELU and bias-gradient reductions take 60% of the step."""
    img, patch, d, blocks, bs = size((224, 16, 768, 6, 64), (32, 16, 32, 2, 2))
    model = Mixer(img, patch, d, blocks, 384, 4 * d, 1000).to(DEV)
    x = torch.randn(bs, 3, img, img, device=DEV)
    y = torch.randint(0, 1000, (bs,), device=DEV)
    train_steps(s, model, resident(x, y))


WORKLOADS = workloads(globals())
FROM_START = {"setup_convnet_from_start"}
NO_MARKERS = {"power_iteration_readback", "power_iteration_check_every_50"}
OWN_PROCESS = FROM_START | {"setup_convnet_scheduled", "train_unet_no_cache"}  # fresh CUDA state / env
PROFILE = dict(record_shapes=False, profile_memory=False, with_stack=False)


def reset_globals():
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's defaults
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()


def run_torch(name, fn, steps, out):
    path = os.path.join(out, f"{name}.pt.trace.json")
    if name in FROM_START:
        torch_profiled_whole(fn, Session(2), path, **PROFILE)
    elif name in NO_MARKERS:
        from torch.profiler import profile
        from harness import activities
        holder = {}

        @contextlib.contextmanager
        def window():
            with profile(activities=activities(), **PROFILE) as prof:
                yield
            holder["prof"] = prof
        fn(Session(0, window=window))
        holder["prof"].export_chrome_trace(path)
    else:
        torch_profiled(fn, steps, path, **PROFILE)


def run_plain(name, fn, steps):
    if name in FROM_START:
        fn(Session(2))
        return
    if name in NO_MARKERS:
        @contextlib.contextmanager
        def window():
            cuda_profiler(True)
            yield
            cuda_profiler(False)
        fn(Session(0, window=window))
        return
    fn(Session(steps + WARM, tick=capture_ticks(steps)))


def main():
    a = arguments(WORKLOADS, 3, alone=OWN_PROCESS)

    def before(name):
        reset_globals()
        torch.manual_seed(0)
        random.seed(0)

    def run_one(name):
        if a.mode == "torch":
            run_torch(name, WORKLOADS[name], a.steps, a.out)
        else:
            run_plain(name, WORKLOADS[name], a.steps)
    run_each(a, run_one, before)


if __name__ == "__main__":
    main()
