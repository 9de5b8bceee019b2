"""Before/after pairs for `diagnose compare` (issue 12): a run twice unchanged, and a "fix" that hurts.

python tools/gen/compare_pairs.py --out DIR [--device cuda|cpu] [--d 4096] [--batch 4096] [--steps 6]

Writes small PyTorch profiler traces (with_stack and record_shapes off), gzipped:

- p_mlp_run1, p_mlp_run2: the same script twice, nothing changed: a 4-layer MLP (d=4096, batch 4096,
  bf16 autocast, fused AdamW, data resident on the GPU). Long GEMMs keep the GPU busy; the two runs
  differ only by run-to-run noise. `diagnose compare p_mlp_run1 --to p_mlp_run2` must report no
  regression and exit 0 under `--fail-on-regression 5`.
- p_mlp_microbatch: the "fix" that makes it worse: to "save memory" the same batch is split into 32
  micro-batches with gradient accumulation (`--micro 32`). Each micro-batch's GEMMs are 32x smaller,
  the host now issues ~32x the launches per step and cannot keep ahead of the GPU: step time rises
  and launch gaps open (launch_overhead). `compare p_mlp_run1 --to p_mlp_microbatch
  --fail-on-regression 5` must exit 3.

Measured on the H200 (torch 2.11, default sizes, 6 profiled steps): run1 / run2 step 4.36 / 4.19 ms
(median; 26% / 12% range between their 5 steady steps), GPU busy 72.1 / 71.4%, 3.09 ms of kernels per
step, TRAIN003 (launch_overhead, idle_launch_pct 21 / 22%) in both: the base is itself near the launch
limit, which is why splitting it hurts so much; microbatch: 121 ms per step, 2203 kernels per step
(autocast re-casts the weights for every micro-batch), GPU busy 19.9%, idle_launch_pct 65%.

`--device cpu` with toy sizes checks the script without a GPU (the traces then hold no kernels).

Fixture size: `--cut IN OUT --first-step K --keep N` (no torch needed) keeps the CPU events of N
ProfilerSteps from step K on and the GPU work they launched (matched by correlation id), and drops
flow events and metadata-only CPU ops (views, transposes, empty tensors; they launch nothing). On the
full p_mlp_microbatch trace dropping those alone leaves every fact identical (checked with
`diagnose facts --format json`); the shipped fixture holds 2 of its 6 steps (see fixtures/README.md).
"""
import argparse
import gzip
import json
import os
import shutil
import sys

META_OPS = {"aten::as_strided", "aten::t", "aten::transpose", "aten::view", "aten::empty_strided", "aten::empty",
            "aten::expand", "aten::reshape", "aten::_reshape_alias", "aten::detach", "detach", "aten::permute",
            "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::alias", "aten::_unsafe_view"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def cut(src: str, dst: str, first: int, keep: int) -> None:
    with gzip.open(src, "rt") as f:
        t = json.load(f)
    ev = t["traceEvents"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    kept_steps = [e for e in steps if first <= int(e["name"].split("#")[1]) < first + keep]
    names = {e["name"] for e in kept_steps}
    lo, hi = min(e["ts"] for e in kept_steps), max(e["ts"] + e["dur"] for e in kept_steps)
    out, corr = [], set()
    for e in ev:
        if e.get("ph") in ("s", "f", "t") or e.get("cat") in ("ac2g", "fwdbwd"):
            continue
        if e.get("cat") == "cpu_op" and e.get("name") in META_OPS:
            continue
        if e.get("cat") in GPU_CATS or "ts" not in e or e.get("ph") == "M":
            continue
        if lo <= e["ts"] and e["ts"] + e.get("dur", 0) <= hi:
            out.append(e)
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                corr.add(c)
    for e in ev:
        if e.get("ph") == "M" or ("ts" not in e and e.get("cat") not in GPU_CATS):
            out.append(e)
        elif e.get("cat") == "gpu_user_annotation":
            if e.get("name") in names:
                out.append(e)
        elif e.get("cat") in GPU_CATS and (e.get("args") or {}).get("correlation") in corr:
            out.append(e)
    t["traceEvents"] = out
    with open(dst, "wb") as f:  # mtime 0: the same input gives the same bytes
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as g:
            g.write(json.dumps(t, separators=(",", ":")).encode())
    print(f"{dst}: {len(ev)} -> {len(out)} events, {os.path.getsize(dst)} bytes")


if "--cut" in sys.argv:
    c = argparse.ArgumentParser()
    c.add_argument("--cut", nargs=2, metavar=("IN", "OUT"))
    c.add_argument("--first-step", type=int, default=0)
    c.add_argument("--keep", type=int, default=10 ** 9)
    ca = c.parse_args()
    cut(ca.cut[0], ca.cut[1], ca.first_step, ca.keep)
    sys.exit(0)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--device", default="cuda")
p.add_argument("--d", type=int, default=4096)
p.add_argument("--batch", type=int, default=4096)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--micro", type=int, default=32)
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
dev = torch.device(a.device)


def run(tag: str, micro: int) -> None:
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.d, a.d), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(a.d, 16)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    x = torch.randn(a.batch, a.d, device=dev)
    y = torch.randint(0, 16, (a.batch,), device=dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    path = os.path.join(a.out, f"{tag}.pt.trace.json")
    chunk = a.batch // micro

    def step():
        for m in range(micro):
            xs, ys = x[m * chunk:(m + 1) * chunk], y[m * chunk:(m + 1) * chunk]
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(xs).float(), ys) / micro
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up outside the profiler (cuBLAS handles, allocator)
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=a.steps),
                 on_trace_ready=lambda pr: pr.export_chrome_trace(path), record_shapes=False, with_stack=False) as prof:
        for _ in range(a.steps + 2):
            step()
            prof.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)
    print(tag, os.path.getsize(path + ".gz"), "bytes")


run("p_mlp_run1", 1)
run("p_mlp_run2", 1)
run("p_mlp_microbatch", a.micro)
