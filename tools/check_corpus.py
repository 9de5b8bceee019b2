"""Print the first warning-or-critical category of every labelled corpus timeline and external file
(a quick look for regressions across ../shared; the tests pin the same expectations)."""
import sys
from pathlib import Path

from diagnoser.pipeline import diagnose

SHARED = Path(__file__).resolve().parents[2] / "shared"
EXPECT = {"dataloader_bound": "input_pipeline", "host_sync": "host_sync", "launch_bound": "launch_overhead",
          "healthy": "none", "fp32_matmul": "fp32_no_tensor_cores", "naive_attention": "unfused_attention",
          "sdpa_attention": "none", "decode_small_batch": "launch_overhead|small_batch"}


def first(paths):
    r = diagnose([str(p) for p in paths])
    s = [f for f in r.findings if f.severity in ("critical", "warning")]
    return (s[0].category if s else "none"), [(f.rule, f.severity, round(f.estimated_gain, 3)) for f in s[:3]]


for name, want in EXPECT.items():
    for p in (SHARED / "corpus/nsys" / f"{name}.sqlite.gz", SHARED / "corpus/torch" / f"{name}.pt.trace.json.gz"):
        got, top = first([p])
        print(("ok  " if got in want.split("|") else "BAD ") + f"{p.name:45s} {got:24s} {top}")
for pair, want in (("ddp_straggler", "straggler"), ("ddp_healthy", "none")):
    got, top = first(sorted((SHARED / "corpus/torch").glob(f"{pair}.rank*.pt.trace.json.gz")))
    print(("ok  " if got == want else "BAD ") + f"{pair:45s} {got:24s} {top}")
