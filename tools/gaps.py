"""Print the biggest GPU idle gaps of a timeline with the host evidence around them (a debugging aid)."""
import sys
import numpy as np
from diagnoser.families import read_input
from diagnoser.ingest.sniff import sniff
from diagnoser.timeline.view import TimelineView
from diagnoser.timeline.gaps import device_busy

path = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
tl = read_input(path, sniff(path))
tv = TimelineView(tl)
devs = device_busy(tv)
dev = max(devs, key=lambda d: d.busy.total)
lo, hi = int(tv.gpu_start.min()), int(tv.gpu_end.max())
host = tl.host
t0 = min(lo, int(host.start_ns.min()) if len(host) else lo)
print(f"trace {(max(hi, int(host.end_ns.max()) if len(host) else hi) - t0)/1e6:.1f} ms, gpu span {(hi-lo)/1e6:.1f} ms, busy {dev.busy.total/1e6:.1f} ms, host calls {len(host)}, ranges {len(tl.ranges)}")
gs, ge = dev.compute.gaps(lo, hi)
order = np.argsort(gs - ge)[:n]
gpu = tl.gpu
for i in sorted(order):
    s, e = gs[i], ge[i]
    inside = host[(host.start_ns < e) & (host.end_ns > s)]
    nxt = gpu[gpu.start_ns >= e].head(1)
    prev = gpu[gpu.end_ns <= s].tail(1)
    r = tl.ranges
    cover = r[(r.start_ns <= s) & (r.end_ns >= e)]
    within = r[(r.start_ns >= s) & (r.end_ns <= e)]
    print(f"\ngap {(s-t0)/1e6:.3f}+{(e-s)/1e6:.3f} ms; prev {prev.name.iloc[0][:50] if len(prev) else '-'}; next {nxt.kind.iloc[0] if len(nxt) else '-'} {nxt.name.iloc[0][:50] if len(nxt) else ''}")
    c = inside.groupby("name").apply(lambda g: (len(g), int((g.end_ns.clip(upper=e) - g.start_ns.clip(lower=s)).sum()) / 1e6), include_groups=False)
    print("  host calls:", dict(sorted(c.items(), key=lambda kv: -kv[1][1])[:6]))
    print("  covering ranges:", [(k, x[:60]) for k, x in zip(cover.kind, cover.name)][-6:])
    w = within.groupby(["kind", "name"]).size().sort_values(ascending=False).head(5)
    print("  ranges inside:", {f"{k}:{x[:50]}": int(v) for (k, x), v in w.items()})
