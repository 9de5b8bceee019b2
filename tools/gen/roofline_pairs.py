"""Pairs for the per-op roofline's Nsight Compute cross-check (issue 23): one program, run twice.

    python3 roofline_pairs.py --mode torch --out DIR   # torch.profiler(record_shapes=True) trace
    python3 roofline_pairs.py --mode ncu --out DIR     # one call of each op between cudaProfilerStart/Stop,
                                                       # for `ncu --profile-from-start off`
    GEN_DEVICE=cpu python3 roofline_pairs.py --mode torch --out DIR   # toy sizes, CPU: checks the logic only

Each step runs every op of OPS once, in order, on tensors made before profiling (so the profiled
kernels are the ops' own): GEMMs of several shapes and dtypes (bf16 well-shaped, bf16 4095,
bf16 skinny, fp32 with TF32 off, linear with bias), a convolution, SDPA attention, elementwise adds
(large, transposed input, tiny) and a layer norm. The ncu run's kernels come in the same order as
one step of the torch run's, so a test pairs them by position (`manifest.json` lists the ops).
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F

CPU = os.environ.get("GEN_DEVICE") == "cpu"
DEV = "cpu" if CPU else "cuda"


def _s(n):  # toy sizes on the CPU
    return max(2, n // 64) if CPU else n


def build():
    """[(name, what, fn)] with inputs allocated up front."""
    torch.manual_seed(0)
    bf, f32 = torch.bfloat16, torch.float32
    r = lambda *s, dt=bf: torch.randn(*s, device=DEV, dtype=dt)  # noqa: E731
    n, m = _s(8192), _s(4095)
    a, b = r(n, n), r(n, n)
    a4, b4 = r(m, m), r(m, m)
    af, bf_ = r(_s(4096), _s(4096), dt=f32), r(_s(4096), _s(4096), dt=f32)
    sk = r(16, n)
    x_lin, w_lin, b_lin = r(n, _s(4096)), r(_s(4096), _s(4096)), r(_s(4096))
    x_conv, w_conv = r(32, _s(256), _s(56), _s(56)), r(_s(256), _s(256), 3, 3)
    q, k, v = (r(8, 16, _s(4096), 128) for _ in range(3))
    e1, e2 = r(_s(16384), _s(16384)), r(_s(16384), _s(16384))
    t1, t2 = r(n, n), r(n, n)
    tiny1, tiny2 = r(64, 64), r(64, 64)
    ln_x, ln_w, ln_b = r(_s(16384), _s(8192)), r(_s(8192)), r(_s(8192))
    return [
        ("gemm_bf16_8192", f"mm bf16 {n}x{n}x{n}", lambda: torch.mm(a, b)),
        ("gemm_bf16_4095", f"mm bf16 {m}x{m}x{m} (odd shape)", lambda: torch.mm(a4, b4)),
        ("gemm_fp32_4096", "mm fp32, TF32 off", lambda: torch.mm(af, bf_)),
        ("gemm_bf16_skinny", f"mm bf16 16x{n}x{n}", lambda: torch.mm(sk, b)),
        ("linear_bf16_bias", "linear bf16 with bias (addmm)", lambda: F.linear(x_lin, w_lin, b_lin)),
        ("conv2d_bf16", "conv2d bf16 3x3 pad 1", lambda: F.conv2d(x_conv, w_conv, padding=1)),
        ("sdpa_bf16", "scaled_dot_product_attention bf16, not causal",
         lambda: F.scaled_dot_product_attention(q, k, v)),
        ("add_bf16", "elementwise add bf16, contiguous", lambda: torch.add(e1, e2)),
        ("add_bf16_transposed", "elementwise add bf16, one input transposed", lambda: torch.add(t1.t(), t2)),
        ("add_bf16_tiny", "elementwise add bf16 64x64", lambda: torch.add(tiny1, tiny2)),
        ("layer_norm_bf16", "layer_norm bf16", lambda: F.layer_norm(ln_x, (ln_x.shape[-1],), ln_w, ln_b)),
    ]


def step(ops):
    for name, _, fn in ops:
        with torch.profiler.record_function(name):
            fn()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("torch", "ncu"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    ops = build()
    sync = (lambda: None) if CPU else torch.cuda.synchronize
    for _ in range(2):  # warm-up: cuBLAS / cuDNN handles and heuristics, allocator
        step(ops)
    sync()
    dev = "cpu" if CPU else torch.cuda.get_device_name(0)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"device": dev, "torch": torch.__version__, "ops": [[n, w] for n, w, _ in ops]}, f, indent=1)
    if args.mode == "ncu":
        if not CPU:
            torch.cuda.profiler.start()
        step(ops)
        sync()
        if not CPU:
            torch.cuda.profiler.stop()
        return
    acts = [torch.profiler.ProfilerActivity.CPU] + ([] if CPU else [torch.profiler.ProfilerActivity.CUDA])
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps)
    path = os.path.join(args.out, "roofline_pairs.pt.trace.json")
    with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(args.steps + 2):
            step(ops)
            sync()
            prof.step()


if __name__ == "__main__":
    main()
