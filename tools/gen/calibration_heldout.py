"""Held-out before/after pairs for the step-time predictions (issue 32): made after the replay's factors were
set on calibration_pairs.py's 13 pairs, and used for no fitting. Each AFTER is its BEFORE with exactly the
finding's Fix applied (one change, named in PAIRS).

Two kinds:
  * the calibrated mechanisms at other sizes, shapes, batches, numbers of syncs and loader costs: new small
    workloads built from calibration_pairs.py's parts (imported, not copied);
  * mechanisms with no calibration pair: torch.compile recompiling every step -> mark_dynamic, cuDNN
    autotuning every new shape -> fixed shapes, a pure-Python thread holding the GIL -> moved off the loop,
    anomaly detection -> off, an unaligned LM-head GEMM (vocabulary 50257) -> padded to 50304, decoding
    without a KV cache -> with one: stack2026_timeline.py's and issue29_inference.py's workloads (imported,
    run through their own profiling harness) at other sizes (SIZES below replaces their `size()` choices).

  python3 calibration_heldout.py --out DIR [--steps N] [--only NAME,...] [--set 2|3]
    -> DIR/ho_NAME_{before,after}.pt.trace.json (torch.profiler: wait 1, warm-up 2 (imported: 1), active N)
--set 2 is the second held-out set: the same workloads and fixes at the sizes of SET2_OWN / SIZES2 and seed 1,
made after the model changes that set 1 informed were committed; --set 3 the third, at SET3_OWN / SIZES3 and
seed 2, made before (and diagnosed only after) the host-pace change that sets 1 and 2 informed.
GEN_DEVICE=cpu runs toy sizes on the CPU only to check the script logic (no kernels in the traces).
"""
import argparse
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibration_pairs as cp  # noqa: E402
import issue29_inference as iq  # noqa: E402
import stack2026_timeline as st  # noqa: E402

torch, nn, F = cp.torch, cp.nn, cp.F
DEV, CUDA = cp.DEV, cp.CUDA
SET, SEED, _CURRENT = 1, 0, [None]

# set 2: per own workload, its set-1 full sizes -> the new ones (what size() is given; layer counts stay)
SET2_OWN = {
    "sync_wide": {2048: 768, 1024: 512},                 # d, batch
    "sync_many_reads": {1024: 1536},                      # d
    "pageable_small": {4096: 8192, 2048: 1024},           # rows (a 32 MB input again, other shape), d
    "loader_big_batch": {256: 192},                       # batch (1.5x the calibration's loader cost a step)
    "tf32_train": {2048: 3072, 8192: 4096},               # d, batch
    "attention_s1024": {768: 1024, 1024: 768, 12: 16},    # d, seq 768, 16 heads of 64
    "optimizer_wide": {1536: 1024, 128: 256},             # d, batch
    "graph_decode_deep": {256: 384},                      # d
    "compile_chain_small": {2048: 3072, 4096: 2048},      # d, rows
}

# set 3: the same, sizes of neither set 1 nor set 2
SET3_OWN = {
    "sync_wide": {2048: 1536, 1024: 768},                # d, batch
    "sync_many_reads": {1024: 768},                       # d
    "pageable_small": {4096: 6144, 2048: 1536},           # rows (a 36 MB input), d
    "loader_big_batch": {256: 160},                       # batch (1.25x the calibration's loader cost a step)
    "tf32_train": {2048: 2560, 8192: 6144},               # d, batch
    "attention_s1024": {768: 512, 1024: 1536, 12: 8},     # d, seq 1536, 8 heads of 64
    "optimizer_wide": {1536: 1280, 128: 192},             # d, batch
    "graph_decode_deep": {256: 512},                      # d
    "compile_chain_small": {2048: 1536, 4096: 6144},      # d, rows
}


def size(full, small):
    own = {2: SET2_OWN, 3: SET3_OWN}.get(SET)
    if own:
        full = own.get(_CURRENT[0], {}).get(full, full)
    return cp.size(full, small)


# ---------------------------------------------------------------- calibrated mechanisms, other sizes
def sync_wide(after):
    """Training of a wide MLP (d 2048, 4 layers, batch 1024), 3 micro-batches; before: `loss.item()` per
    micro-batch (3 syncs a step, no accuracy read); after: the loss summed on the GPU, one .item() a step."""
    d, b = size(2048, 32), size(1024, 8)
    model = cp.mlp(d, 4, 128)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    xs = [torch.randn(b, d, device=DEV) for _ in range(3)]
    ys = [torch.randint(0, 128, (b,), device=DEV) for _ in range(3)]
    log = []

    def step():
        run = torch.zeros((), device=DEV)
        for x, y in zip(xs, ys):
            with cp.autocast():
                loss = F.cross_entropy(model(x).float(), y) / 3
            loss.backward()
            if after:
                run += loss.detach()
            else:
                log.append(loss.item())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if after:
            log.append(run.item())
    return step


def sync_many_reads(after):
    """Inference of an 8-layer MLP (d 1024), 16 sub-batches of 32; before: each sub-batch's top-1 read with
    .tolist() (16 syncs); after: kept on the GPU, one read per request."""
    d = size(1024, 16)
    model = cp.mlp(d, 8, 1000).eval()
    xs = [torch.randn(32, d, device=DEV) for _ in range(16)]
    out = []

    @torch.no_grad()
    def step():
        preds = []
        for x in xs:
            with cp.autocast():
                p = model(x).argmax(-1)
            if after:
                preds.append(p)
            else:
                out.append(p.tolist())
        if after:
            out.append(torch.cat(preds).tolist())
    return step


def pageable_small(after):
    """Training of a 3-layer d 2048 MLP on a 32 MB input (4096 x 2048 fp32) copied each step; before:
    pageable `.to('cuda')`; after: pinned once, `.to('cuda', non_blocking=True)`."""
    n, d = size(4096, 16), size(2048, 16)
    model = cp.mlp(d, 3, 16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    x_host = torch.randn(n, d)
    if after and CUDA:
        x_host = x_host.pin_memory()
    y = torch.randint(0, 16, (n,), device=DEV)

    def step():
        x = x_host.to(DEV, non_blocking=after)
        with cp.autocast():
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def loader_big_batch(after):
    """calibration_pairs' conv net behind a DataLoader of per-sample numpy augmentation, batch 256 (twice
    the loader cost a step); before: num_workers=0; after: the Fix's DataLoader(num_workers=8,
    pin_memory=True, persistent_workers=True, prefetch_factor=4)."""
    model = cp.convnet().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    kw = dict(num_workers=8, pin_memory=CUDA, persistent_workers=True, prefetch_factor=4) if after else {}
    it = iter(torch.utils.data.DataLoader(cp.NoisyImages(100000), batch_size=size(256, 4), shuffle=False, **kw))

    def step():
        x, y = next(it)
        x, y = x.to(DEV, non_blocking=True), y.to(DEV, non_blocking=True)
        with cp.autocast():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def tf32_train(after):
    """MLP training (d 2048, 4 layers, batch 8192) in FP32 with TF32 off; after:
    torch.backends.cuda.matmul.allow_tf32 = True."""
    torch.backends.cuda.matmul.allow_tf32 = bool(after)
    d, b = size(2048, 16), size(8192, 8)
    model = cp.mlp(d, 4, 16, nn.ReLU)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    x, y = torch.randn(b, d, device=DEV), torch.randint(0, 16, (b,), device=DEV)

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def attention_s1024(after):
    """Inference of a 4-layer causal attention stack (d 768, 12 heads of 64, seq 1024, batch 16, bf16);
    before: matmul + mask + softmax + matmul; after: F.scaled_dot_product_attention(is_causal=True)."""
    d, t, b = size(768, 32), size(1024, 16), size(16, 1)
    model = nn.Sequential(*[cp.Attn(d, size(12, 2), after) for _ in range(4)]).to(DEV).eval()
    x = torch.randn(b, t, d, device=DEV)

    @torch.no_grad()
    def step():
        with cp.autocast():
            model(x)
    return step


def optimizer_wide(after):
    """24 residual blocks (Linear 1536 + LayerNorm), batch 128, bf16 autocast; before: AdamW(foreach=False);
    after: AdamW(fused=True)."""
    d = size(1536, 16)
    model = nn.Sequential(*[cp.Residual(d) for _ in range(24)], nn.Linear(d, 10)).to(DEV)
    kw = {"fused": True} if after and CUDA else {"foreach": bool(after)}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **kw)
    x, y = torch.randn(size(128, 4), d, device=DEV), torch.randint(0, 10, (size(128, 4),), device=DEV)

    def step():
        with cp.autocast():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def graph_decode_deep(after):
    """Batch-1 decode of a 40-block residual MLP (d 256), 4 tokens a step, eager; after: the forward captured
    once in a torch.cuda.CUDAGraph on a static input, replayed per token."""
    d = size(256, 16)
    model = nn.Sequential(*[cp.Residual(d) for _ in range(40)]).to(DEV).eval()
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
        for _ in range(4):
            h = fwd(h) * 0.5
        return h
    return step


def compile_chain_small(after):
    """Inference of Linear + calibration_pairs' elementwise activation chain on 8M bf16 values per layer
    (4096 x 2048), 4 layers; after: the chain under torch.compile."""
    d, n = size(2048, 16), size(4096, 8)
    fn = torch.compile(cp.elementwise_chain) if after and CUDA else cp.elementwise_chain
    lins = [nn.Linear(d, d).to(DEV) for _ in range(4)]
    a = torch.randn(d, device=DEV).abs()
    b = torch.randn(d, device=DEV) * 0.1
    x0 = torch.randn(n, d, device=DEV)

    @torch.no_grad()
    def step():
        x = x0
        with cp.autocast():
            for lin in lins:
                x = fn(lin(x), a, b)
        return x
    return step


OWN = {  # name -> (workload, the one change of the after run)
    "sync_wide": (sync_wide, "the loss summed on the GPU, one .item() a step"),
    "sync_many_reads": (sync_many_reads, "predictions kept on the GPU, one read per request"),
    "pageable_small": (pageable_small, "input pinned once, .to('cuda', non_blocking=True)"),
    "loader_big_batch": (loader_big_batch, "DataLoader(num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4)"),
    "tf32_train": (tf32_train, "torch.backends.cuda.matmul.allow_tf32 = True"),
    "attention_s1024": (attention_s1024, "F.scaled_dot_product_attention(is_causal=True)"),
    "optimizer_wide": (optimizer_wide, "torch.optim.AdamW(..., fused=True)"),
    "graph_decode_deep": (graph_decode_deep, "forward captured in a CUDA graph, replayed per token"),
    "compile_chain_small": (compile_chain_small, "torch.compile of the elementwise chain"),
}

# ---------------------------------------------------------------- mechanisms with no calibration pair (imported)
# the imported workloads' size() choices (their full-size tuples) -> the held-out sizes
SIZES = {
    (32000, 1024, 16, 4, 32): (32000, 768, 12, 6, 16),      # serve_compiled: vocab, d, heads, layers, batch
    (160, 24): (96, 16),                                     # its padded lengths: base, stride
    48: 32,                                                  # conv net width (convnet) and batch (train_multiscale)
    176: 160,                                                # multi-scale first side (160..288 px; the fixed side stays 224, their middle)
    (2048, 8, 8192): (1024, 12, 4096),                       # train_mlp: d, depth, batch
    (1024, 16, 4, 16, 512): (768, 12, 4, 8, 1024),           # lm_train: d, heads, layers, batch, seq
    (32000, 2048, 16, 8, 128, 128): (32000, 1024, 8, 12, 64, 256),  # decode: vocab, d, heads, layers, batch, prompt
    2048: 1536, 8192: 12288,                                 # _denoiser d; denoise_train rows
}


# set 2: the imported workloads' full-size tuples -> set 2's sizes
SIZES2 = {
    (32000, 1024, 16, 4, 32): (32000, 512, 8, 4, 8),        # serve_compiled: vocab, d, heads, layers, batch
    (160, 24): (128, 32),                                    # its padded lengths: base, stride
    48: 24,                                                  # conv net width and batch
    176: 192,                                                # multi-scale first side (192..320 px; fixed 224)
    (2048, 8, 8192): (1536, 8, 2048),                        # train_mlp: d, depth, batch
    (1024, 16, 4, 16, 512): (512, 8, 6, 8, 512),             # lm_train: d, heads, layers, batch, seq
    (32000, 2048, 16, 8, 128, 128): (32000, 768, 12, 6, 32, 128),  # decode
    2048: 1024, 8192: 16384,                                 # _denoiser d; denoise_train rows
}

# set 3: the imported workloads' full-size tuples -> set 3's sizes (no key 32: the multi-scale side step stays)
SIZES3 = {
    (32000, 1024, 16, 4, 32): (32000, 640, 10, 5, 12),      # serve_compiled: vocab, d, heads, layers, batch
    (160, 24): (112, 40),                                    # its padded lengths: base, stride
    48: 40,                                                  # conv net width and batch
    176: 208,                                                # multi-scale first side (208..336 px; fixed 224)
    (2048, 8, 8192): (1280, 10, 3072),                       # train_mlp: d, depth, batch
    (1024, 16, 4, 16, 512): (640, 10, 5, 8, 768),            # lm_train: d, heads, layers, batch, seq
    (32000, 2048, 16, 8, 128, 128): (32000, 896, 14, 8, 48, 192),  # decode
    2048: 1280, 8192: 10240,                                 # _denoiser d; denoise_train rows
}


def _sized(full, small):
    if not CUDA:
        return small
    return {2: SIZES2, 3: SIZES3}.get(SET, SIZES).get(full, full)


st.size = _sized
iq.size = _sized
st.WITH_STACK.update({"ho_gil_thread_before", "ho_gil_thread_after"})  # the thread shows through its Python frames
IMPORTED = {  # name -> (before, after, harness, the one change of the after run)
    "compile_recompile": (lambda s: st.serve_compiled(s, False), lambda s: st.serve_compiled(s, True), "st",
                          "torch._dynamo.mark_dynamic(ids, 1) on the varying length"),
    "cudnn_multiscale": (lambda s: st.train_multiscale(s, True), lambda s: st.train_multiscale(s, False), "st",
                         "one fixed image size (the Fix's 'fixed input shapes')"),
    "gil_thread": (lambda s: st.train_mlp(s, True), lambda s: st.train_mlp(s, False), "st",
                   "the metrics thread moved off the training process (not started)"),
    "anomaly": (lambda s: iq.denoise_train(s, False, anomaly=True), lambda s: iq.denoise_train(s, False), "iq",
                "torch.autograd.detect_anomaly removed"),
    "lmhead_unaligned": (lambda s: iq.lm_train(s, 50257), lambda s: iq.lm_train(s, 50304), "iq",
                         "vocabulary padded from 50257 to 50304"),
    "decode_no_cache": (lambda s: iq.decode(s, False), lambda s: iq.decode(s, True), "iq",
                        "a KV cache: model(next_ids, past_key_values=past, use_cache=True)"),
}
PAIRS = {**{k: v[1] for k, v in OWN.items()}, **{k: v[3] for k, v in IMPORTED.items()}}


def run_own(name, out, steps):
    fn, _ = OWN[name]
    for variant in ("before", "after"):
        t0 = time.time()
        torch.manual_seed(SEED)
        _CURRENT[0] = name
        try:
            step = fn(variant == "after")
            for _ in range(3):
                step()
            cp.sync()
            cp.profiled(step, os.path.join(out, f"ho_{name}_{variant}.pt.trace.json"), steps)
            print(f"{name} {variant}: {time.time() - t0:.1f} s", flush=True)
        except Exception as e:  # one broken workload must not lose the others
            print(f"{name} {variant}: FAILED {type(e).__name__}: {e}", flush=True)
        torch.backends.cuda.matmul.allow_tf32 = False
        if CUDA:
            torch.cuda.empty_cache()


def run_imported(name, out, steps):
    before, after, harness, _ = IMPORTED[name]
    for variant, fn in (("before", before), ("after", after)):
        t0 = time.time()
        random.seed(SEED)
        np.random.seed(SEED)
        torch.manual_seed(SEED)
        tag = f"ho_{name}_{variant}"
        try:
            if harness == "st":
                st.run_torch(tag, fn, steps, out)
            else:
                iq.TIMELINE[tag] = fn
                iq.run_timeline(tag, "torch", steps, out)
            print(f"{name} {variant}: {time.time() - t0:.1f} s", flush=True)
        except Exception as e:
            print(f"{name} {variant}: FAILED {type(e).__name__}: {e}", flush=True)
        if CUDA:
            torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--only", default="")
    ap.add_argument("--set", type=int, default=1, choices=(1, 2, 3))
    a = ap.parse_args()
    global SET, SEED
    SET, SEED = a.set, a.set - 1
    os.makedirs(a.out, exist_ok=True)
    for name in (a.only.split(",") if a.only else list(PAIRS)):
        (run_own if name in OWN else run_imported)(name, a.out, a.steps)


if __name__ == "__main__":
    sys.exit(main())
