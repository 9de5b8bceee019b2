"""Timeline workloads for issue 29 (today's stacks): torch.compile recompiling every step, cuDNN autotuning
every new shape, a Python thread holding the GIL beside the loop, and pageable uploads of data already in
host memory (PyTorch and CuPy). New code: other models, loops and sizes than the corpus and the other
generators here. Each has one root cause by construction and a twin with the cause removed.

  python3 stack2026_timeline.py NAME [NAME ...] --mode {torch,plain} --out DIR [--steps N]
    torch : torch.profiler (CPU + CUDA), schedule(wait=1, warmup=WARM-1, active=N), prof.step() per iteration;
            with_stack=True where the Python frames matter (WITH_STACK), off for the compile and cuDNN pairs
            (compiling under the Python tracer makes hundreds of MB of frames)
    plain : for `nsys profile --capture-range=cudaProfilerApi`: cudaProfilerStart after WARM iterations,
            cudaProfilerStop after N more (CuPy workloads through cupy.cuda.profiler)
GEN_DEVICE=cpu runs the PyTorch workloads at toy sizes on a CPU (only to check the script logic; the compile
pair then uses the "eager" backend, which still recompiles at the Dynamo level).

Workloads (category built for; "twin" = the same code with the cause removed):
  s_infer_compile_recompile  compile_recompile  4-layer fp16 text encoder (d 1024, 16 heads) behind
                                                torch.compile(dynamic=False), batches of 32 requests whose padded
                                                length differs every step (160, 184, ... tokens): a new graph
                                                compiled (Dynamo + Inductor + Triton) every steady step
  s_infer_compile_dynamic    (twin)             the same, torch._dynamo.mark_dynamic(ids, 1): one dynamic-shape
                                                compile in the first warm-up step, none after
  s_train_cudnn_multiscale   cudnn_autotune     ResNet-style conv net (stem + 4 stages of 2 conv-BN-ReLU, 48-384
                                                channels), bf16 autocast, channels_last, cudnn.benchmark = True,
                                                batch 48, a different square image size every step (multi-scale
                                                training: 176, 208, ... px): cuDNN times every algorithm again
  s_train_cudnn_fixed        (twin)             the same at one size (224 px): tuned in the warm-up, not after
  s_train_gil_thread         gil_contention     8 x (Linear 2048 + LayerNorm + GELU) MLP, batch 8192, bf16 autocast,
                                                AdamW; a thread beside the loop ("metrics-agg") averages a
                                                200,000-float window in a pure Python loop, forever
  s_train_gil_no_thread      (twin)             the same loop, no thread
  s_train_pageable_batches   pageable_memcpy    the conv net above, batch 112 x 3 x 320^2 fp32 (138 MB) from two
                                                batches held in ordinary (pageable) host memory, `.to("cuda")`
                                                every step: no host preparation, the upload itself is slow
  s_train_pinned_batches     (twin)             the same batches in pinned memory, .to(non_blocking=True) on a
                                                copy stream one step ahead
  s_cupy_pageable_upload     pageable_memcpy    CuPy: a 6144 x 4096 float32 NumPy array (101 MB) resident in host
                                                memory, `cupy.asarray` every step, then a 4096 x 4096 fp32 GEMM,
                                                tanh and a column sum (no torch)
  s_cupy_pinned_upload       (twin)             the same array copied once into pinned memory, uploaded with
                                                `ndarray.set(..., stream)` on a copy stream, double-buffered
"""
import ctypes
import os
import random
import sys
import threading

import numpy as np

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import CUDA, DEV, Session, arguments, capture_ticks, run_each, size, torch_profiled, workloads  # noqa: E402,F401

WARM = 2
WITH_STACK = {"s_train_gil_thread", "s_train_gil_no_thread", "s_train_pageable_batches", "s_train_pinned_batches"}
CUPY = {"s_cupy_pageable_upload", "s_cupy_pinned_upload"}


def torch_mods():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    return torch, nn, F


# ============================================================== torch.compile: a new shape every step
def encoder_class():
    torch, nn, F = torch_mods()

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.h = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, L, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, L, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, L, D)
            x = x + self.proj(a)
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Encoder(nn.Module):
        def __init__(self, vocab, d, heads, layers, labels):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, labels)

        def forward(self, ids):
            x = self.emb(ids)
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x).mean(1))

    return Encoder


def serve_compiled(s, mark_dynamic):
    torch, nn, F = torch_mods()
    vocab, d, heads, layers, bs = size((32000, 1024, 16, 4, 32), (500, 64, 4, 1, 2))
    half = torch.float16 if CUDA else torch.float32
    model = encoder_class()(vocab, d, heads, layers, 8).to(DEV, half).eval()
    backend = "inductor" if CUDA else "eager"
    cmodel = torch.compile(model, backend=backend, dynamic=None if mark_dynamic else False)
    base, stride = size((160, 24), (8, 2))
    lengths = [base + stride * k for k in range(s.iters)]
    random.Random(1).shuffle(lengths)
    outs = []
    with torch.no_grad():
        for i in range(s.iters):
            ids = torch.randint(0, vocab, (bs, lengths[i]), device=DEV)
            if mark_dynamic:
                torch._dynamo.mark_dynamic(ids, 1)
            outs.append(cmodel(ids).argmax(-1))
            s.tick()
    if CUDA:
        torch.cuda.synchronize()
    torch.stack(outs).cpu()
    torch._dynamo.reset()


def w_s_infer_compile_recompile(s):
    serve_compiled(s, mark_dynamic=False)


def w_s_infer_compile_dynamic(s):
    serve_compiled(s, mark_dynamic=True)


# ============================================================== a conv net: cuDNN autotuning, pageable batches
def convnet(classes=100):
    torch, nn, F = torch_mods()

    def cbr(cin, cout, stride):
        return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    w = size(48, 8)
    layers = cbr(3, w, 2)
    c = w
    for k, out in enumerate([w, 2 * w, 4 * w, 8 * w]):
        layers += cbr(c, out, 1 if k == 0 else 2) + cbr(out, out, 1)
        c = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
    return nn.Sequential(*layers)


def conv_train_setup():
    torch, nn, F = torch_mods()
    model = convnet().to(DEV)
    if CUDA:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt


def conv_step(model, opt, x, y):
    torch, nn, F = torch_mods()
    with torch.autocast(DEV, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def train_multiscale(s, vary):
    torch, nn, F = torch_mods()
    torch.backends.cudnn.benchmark = True
    try:
        model, opt = conv_train_setup()
        bs = size(48, 2)
        sides = [size(176, 32) + size(32, 8) * k for k in range(s.iters)] if vary else [size(224, 32)] * s.iters
        random.Random(2).shuffle(sides)
        losses = []
        for i in range(s.iters):
            x = torch.randn(bs, 3, sides[i], sides[i], device=DEV)
            if CUDA:
                x = x.contiguous(memory_format=torch.channels_last)
            y = torch.randint(0, 100, (bs,), device=DEV)
            losses.append(conv_step(model, opt, x, y))
            s.tick()
        torch.stack(losses).cpu()
    finally:
        torch.backends.cudnn.benchmark = False


def w_s_train_cudnn_multiscale(s):
    train_multiscale(s, vary=True)


def w_s_train_cudnn_fixed(s):
    train_multiscale(s, vary=False)


def train_resident_batches(s, pinned):
    torch, nn, F = torch_mods()
    model, opt = conv_train_setup()
    bs, side = size((112, 320), (2, 32))
    gen = torch.Generator().manual_seed(0)
    pool = [torch.randn(bs, 3, side, side, generator=gen) for _ in range(2)]  # already in host memory
    labels = [torch.randint(0, 100, (bs,), generator=gen) for _ in range(2)]
    if pinned and CUDA:
        pool = [p.pin_memory() for p in pool]
        labels = [t.pin_memory() for t in labels]
        copy = torch.cuda.Stream()

        def upload(i):  # the copy of step i+1 runs on its own stream while step i computes
            with torch.cuda.stream(copy):
                return pool[i % 2].to(DEV, non_blocking=True), labels[i % 2].to(DEV, non_blocking=True)
    losses = []
    nxt = upload(0) if pinned and CUDA else None
    for i in range(s.iters):
        if pinned and CUDA:
            x, y = nxt
            torch.cuda.current_stream().wait_stream(copy)
            x.record_stream(torch.cuda.current_stream())
            y.record_stream(torch.cuda.current_stream())
            nxt = upload(i + 1) if i + 1 < s.iters else None
        else:
            x, y = pool[i % 2].to(DEV), labels[i % 2].to(DEV)
        if CUDA:
            x = x.contiguous(memory_format=torch.channels_last)
        losses.append(conv_step(model, opt, x, y))
        s.tick()
    torch.stack(losses).cpu()


def w_s_train_pageable_batches(s):
    train_resident_batches(s, pinned=False)


def w_s_train_pinned_batches(s):
    train_resident_batches(s, pinned=True)


# ============================================================== the GIL: a pure-Python thread beside the loop
def metrics_worker(stop, window, out):
    """Running mean and variance of a window of floats, recomputed in a bytecode loop: holds the GIL
    except when the interpreter's switch interval forces it to hand it over."""
    try:  # name the OS thread so a profiler shows it (prctl PR_SET_NAME)
        ctypes.CDLL(None).prctl(15, b"metrics-agg", 0, 0, 0)
    except (OSError, AttributeError):
        pass
    while not stop.is_set():
        s1 = s2 = 0.0
        n = 0
        for v in window:
            s1 += v
            s2 += v * v
            n += 1
        out[0] = (s1 / n, s2 / n - (s1 / n) ** 2)


def train_mlp(s, thread):
    torch, nn, F = torch_mods()
    d, depth, bs = size((2048, 8, 8192), (64, 2, 16))
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(d, d), nn.LayerNorm(d), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(d, 10)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(bs, d, device=DEV)
    y = torch.randint(0, 10, (bs,), device=DEV)
    stop, out = threading.Event(), [None]
    worker = None
    if thread:
        window = [random.random() for _ in range(200_000)]
        worker = threading.Thread(target=metrics_worker, args=(stop, window, out), name="metrics-agg", daemon=True)
        worker.start()
    losses = []
    try:
        for i in range(s.iters):
            with torch.autocast(DEV, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
            s.tick()
        torch.stack(losses).cpu()
    finally:
        stop.set()
        if worker is not None:
            worker.join()


def w_s_train_gil_thread(s):
    train_mlp(s, thread=True)


def w_s_train_gil_no_thread(s):
    train_mlp(s, thread=False)


# ============================================================== CuPy: a resident NumPy array uploaded every step
def cupy_upload(s, pinned):
    import cupy as cp
    import cupyx
    rows, k, n = 6144, 4096, 4096
    rng = np.random.default_rng(0)
    host = rng.standard_normal((rows, k), dtype=np.float32)  # ready in host memory before the loop
    w = cp.asarray(rng.standard_normal((k, n), dtype=np.float32) / 64)
    sums = []
    if pinned:
        staged = cupyx.empty_pinned(host.shape, host.dtype)
        staged[...] = host
        copy = cp.cuda.Stream(non_blocking=True)
        bufs = [cp.empty(host.shape, host.dtype) for _ in range(2)]
        ready, used = [None, None], [None, None]

        def upload(i):  # into the buffer step i-1 read: wait for that step's compute, not this one's
            if used[i % 2] is not None:
                copy.wait_event(used[i % 2])
            bufs[i % 2].set(staged, stream=copy)
            ready[i % 2] = copy.record()
        upload(0)
    for i in range(s.iters):
        if pinned:
            cp.cuda.get_current_stream().wait_event(ready[i % 2])
            dev = bufs[i % 2]
            if i + 1 < s.iters:
                upload(i + 1)
        else:
            dev = cp.asarray(host)
        y = cp.tanh(dev @ w)
        sums.append(y.sum(axis=0))
        if pinned:
            used[i % 2] = cp.cuda.get_current_stream().record()
        s.tick()
    cp.cuda.Device().synchronize()
    float(cp.stack(sums).sum())


def w_s_cupy_pageable_upload(s):
    cupy_upload(s, pinned=False)


def w_s_cupy_pinned_upload(s):
    cupy_upload(s, pinned=True)


WORKLOADS = workloads(globals(), "w_s_")


def run_torch(name, fn, steps, out):
    torch_mods()
    torch_profiled(fn, steps, os.path.join(out, f"{name}.pt.trace.json"), warm=WARM,
                   record_shapes=False, profile_memory=False, with_stack=name in WITH_STACK)


def run_plain(name, fn, steps):
    if name in CUPY:
        import cupy as cp
        sync, start, stop = cp.cuda.Device().synchronize, cp.cuda.profiler.start, cp.cuda.profiler.stop
    else:
        torch, nn, F = torch_mods()
        sync, start, stop = torch.cuda.synchronize, torch.cuda.profiler.start, torch.cuda.profiler.stop
    fn(Session(steps + WARM, tick=capture_ticks(steps, WARM, start, stop, sync)))


def main():
    a = arguments(WORKLOADS, 3)

    def before(name):
        random.seed(0)
        np.random.seed(0)
        if name not in CUPY:
            torch_mods()[0].manual_seed(0)

    def run_one(name):
        if a.mode == "torch":
            run_torch(name, WORKLOADS[name], a.steps, a.out)
        else:
            run_plain(name, WORKLOADS[name], a.steps)

    def after(name):
        if CUDA and name not in CUPY:
            torch_mods()[0].cuda.empty_cache()
    run_each(a, run_one, before, after)


if __name__ == "__main__":
    main()
