"""The held-out pairs' fixtures (fixtures/torch/cal_ho_*) from calibration_heldout.py's traces (no torch needed):
each trace cut to 2 of its profiled steps (the 2nd and 3rd) with compare_pairs.py --cut; then
  * the Python frames of threads that launch no GPU work, which overlap the cut (a thread started before it, like
    the GIL pair's metrics thread), are put back whole (the cut keeps only events inside it);
  * with_stack traces: trim_python_frames.py (frames under 50 us go);
  * the recompile trace: trim_compile_internals.py (the ops inside the compile and config-benchmark ranges go).

  python3 tools/gen/cut_heldout.py SRC_DIR DST_DIR [--keep N]   # SRC_DIR/ho_NAME_{before,after}.pt.trace.json.gz (set 2: ho2_NAME_...)
(--keep 1: one profiled step, the 2nd; set 3's fixtures)
"""
import glob
import gzip
import json
import os
import re
import subprocess
import sys

G = os.path.dirname(os.path.abspath(__file__))
STEP = re.compile(r'"ProfilerStep#(\d+)"')


def run(*args):
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL)


def put_back_frames(src: str, dst: str) -> None:
    with gzip.open(src, "rt") as f:
        full = json.load(f)["traceEvents"]
    with gzip.open(dst, "rt") as f:
        t = json.load(f)
    ev = t["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    launching = {e.get("tid") for e in ev if e.get("cat") == "cuda_runtime"}
    have = {(e.get("tid"), e.get("ts"), e.get("name")) for e in ev if e.get("cat") == "python_function"}
    add = []
    for e in full:
        if e.get("cat") != "python_function" or e.get("tid") in launching or (e.get("tid"), e.get("ts"), e.get("name")) in have:
            continue
        s, end = e["ts"], e["ts"] + e.get("dur", 0)
        if s < hi and end > lo:
            add.append(e)  # whole: clipped to the cut, nested frames would all get one length
    if not add:
        return
    t["traceEvents"] = ev + add
    with open(dst, "wb") as f:  # mtime 0: the same input gives the same bytes
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as g:
            g.write(json.dumps(t, separators=(",", ":")).encode())


def main(src_dir: str, dst_dir: str, keep: int = 2) -> None:
    os.makedirs(dst_dir, exist_ok=True)
    for src in sorted(glob.glob(os.path.join(src_dir, "ho*_*.pt.trace.json.gz"))):
        dst = os.path.join(dst_dir, "cal_" + os.path.basename(src))
        with gzip.open(src, "rt") as f:
            text = f.read()
        steps = sorted({int(k) for k in STEP.findall(text)})
        run(os.path.join(G, "compare_pairs.py"), "--cut", src, dst, "--first-step", str(steps[1]), "--keep", str(keep))
        put_back_frames(src, dst)
        if '"python_function"' in text:
            run(os.path.join(G, "trim_python_frames.py"), dst, dst + ".tmp")
            os.replace(dst + ".tmp", dst)
        if "compile_recompile_before" in dst:
            run(os.path.join(G, "trim_compile_internals.py"), dst, dst + ".tmp")
            os.replace(dst + ".tmp", dst)
        print(dst, os.path.getsize(dst))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[sys.argv.index("--keep") + 1]) if "--keep" in sys.argv else 2)
