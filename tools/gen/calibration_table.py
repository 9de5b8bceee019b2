"""The calibration table of docs/calibration.md, and the rerun figures of docs/compare.md, from the traces
calibration_pairs.py made (no torch needed; run from the repository root).

  python3 tools/gen/calibration_table.py pairs DIR [--prefix c_]   # DIR/c_NAME_{before,after}.pt.trace.json.gz
  python3 tools/gen/calibration_table.py reruns DIR [--pct 5,2]   # DIR/r_PROGRAM_K_TAG.pt.trace.json.gz
  python3 tools/gen/calibration_table.py heldout DIR              # DIR/ho_NAME_{before,after}.pt.trace.json.gz

heldout: the same table for calibration_heldout.py's pairs (HELDOUT: the finding each Fix is for).
pairs : per pair, the BEFORE finding of the pair's cause (CAUSE below), its predicted step time after the
        fix (predicted_step_ms), the AFTER run's own median step, the error (AFTER's step minus the middle of
        the range, % of AFTER's step) and whether AFTER falls inside the range; as a Markdown table.
reruns: for each program, `compare --fail-on-regression PCT` of run K's base against run K+1's base
        (identical code: must pass), and against run K+1's kernel5 / busy5 / sleep5 / kernel3 / busy3 / sleep3
        (must trip); how many trip, and the measures' changes.
"""
import glob
import json
import os
import statistics
import sys

CAUSE = {  # pair -> the finding category its Fix is for
    "sync_metrics": "host_sync", "infer_sync_postprocess": "host_sync", "pageable_input": "pageable_memcpy",
    "dataloader_workers": "input_pipeline", "infer_attention": "unfused_attention",
    "train_attention": "unfused_attention", "fp32_to_bf16": "fp32_no_tensor_cores",
    "fp32_to_tf32": "fp32_no_tensor_cores", "optimizer_fused": "single_tensor_optimizer",
    "optimizer_foreach": "single_tensor_optimizer", "graph_decode": "launch_overhead",
    "empty_cache": "allocator_churn", "compile_chain": "memory_bound_kernels",
}

HELDOUT = {  # held-out pair -> the finding category its Fix is for (calibration_heldout.py)
    "sync_wide": "host_sync", "sync_many_reads": "host_sync", "pageable_small": "pageable_memcpy",
    "loader_big_batch": "input_pipeline", "tf32_train": "fp32_no_tensor_cores",
    "attention_s1024": "unfused_attention", "optimizer_wide": "single_tensor_optimizer",
    "graph_decode_deep": "launch_overhead", "compile_chain_small": "memory_bound_kernels",
    "compile_recompile": "compile_recompile", "cudnn_multiscale": "cudnn_autotune", "gil_thread": "gil_contention",
    "anomaly": "host_sync", "lmhead_unaligned": "gemm_below_roof", "decode_no_cache": "decode_without_kv_cache",
}
RULE = {"anomaly": "TRAIN031"}  # where the category has several rules: the one the Fix is from


def _step(report) -> float | None:
    for f in report.facts:
        if f.name == "step_time_ms_p50" and f.subject is None:
            return float(f.value)
    return None


def pair_row(d: str, name: str, prefix: str = "c_", causes: dict = CAUSE) -> dict:
    from diagnoser.pipeline import diagnose
    b = diagnose([os.path.join(d, f"{prefix}{name}_before.pt.trace.json.gz")])
    a = diagnose([os.path.join(d, f"{prefix}{name}_after.pt.trace.json.gz")])
    row = {"pair": name, "cause": causes[name], "before_ms": _step(b), "after_ms": _step(a)}
    f = next((f for f in b.findings if f.category == causes[name] and RULE.get(name, f.rule) == f.rule), None)
    row["rule"] = f.rule if f else None
    row["severity"] = f.severity if f else None
    row["gain"] = f.estimated_gain if f else None
    p = f.predicted_step_ms if f is not None else None
    if p is not None and row["after_ms"]:
        lo, hi = p
        real = row["after_ms"]
        row.update(low=lo, high=hi, inside=lo <= real <= hi, error_pct=100.0 * (real - (lo + hi) / 2) / real,
                   share_ms=row["before_ms"] * (1 - f.estimated_gain))
    row["after_rules"] = [g.rule for g in a.findings if g.severity != "info"]
    row["fix"] = f.fix if f else None
    row["before_rules"] = [(g.rule, g.category, g.severity, g.predicted_step_ms) for g in b.findings if g.severity != "info"]
    return row


def pairs(d: str, prefix: str = "c_", causes: dict = CAUSE) -> None:
    rows = [pair_row(d, n, prefix, causes) for n in causes if os.path.exists(os.path.join(d, f"{prefix}{n}_before.pt.trace.json.gz"))]
    print("| pair | finding | before ms | predicted ms | realized ms | error | inside | 'up to' share said |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "low" not in r:
            print(f"| {r['pair']} | {r['rule'] or 'no ' + r['cause'] + ' finding'} | {r['before_ms']:.2f} | - | {r['after_ms']:.2f} | - | - | - |")
            continue
        print(f"| {r['pair']} | {r['rule']} {r['cause']} | {r['before_ms']:.2f} | {r['low']:.2f}-{r['high']:.2f} | "
              f"{r['after_ms']:.2f} | {r['error_pct']:+.1f}% | {'yes' if r['inside'] else 'no'} | "
              f"{100 * r['gain']:.0f}% -> {r['share_ms']:.2f} |")
    done = [r for r in rows if "low" in r]
    if done:
        inside = sum(r["inside"] for r in done)
        med = statistics.median(abs(r["error_pct"]) for r in done)
        print(f"\n{inside} of {len(done)} inside the range; median |error| {med:.1f}% of the realized step")
    print(json.dumps(rows, indent=1, default=str), file=sys.stderr)


TAGS = ("base", "kernel5", "busy5", "sleep5", "kernel3", "busy3", "sleep3")


def reruns(d: str, pcts: list[float]) -> None:
    """Each file is diagnosed once (a base is BEFORE of one pair and AFTER of another); the comparisons are
    compare_runs' own (core.build), gated at each PCT."""
    from diagnoser import settings
    from diagnoser.comparison.core import build
    from diagnoser.comparison.gate import gate, judged
    from diagnoser.pipeline import diagnose, load_pack
    pack = load_pack()
    done: dict = {}

    def report(path):
        if path not in done:
            done[path] = diagnose([path], pack=pack)
        return done[path]
    for program in ("mlp", "decode"):
        runs = sorted({int(os.path.basename(p).split("_")[2]) for p in glob.glob(os.path.join(d, f"r_{program}_*_base.pt.trace.json.gz"))})
        for tag in TAGS:
            trips, lines = {p: 0 for p in pcts}, []
            for i, k in enumerate(runs):
                j = runs[(i + 1) % len(runs)]
                b = os.path.join(d, f"r_{program}_{k}_base.pt.trace.json.gz")
                a = os.path.join(d, f"r_{program}_{j}_{tag}.pt.trace.json.gz")
                if not os.path.exists(a):
                    continue
                with settings.overridden(pack.settings):
                    c = build([b], report(b), [a], report(a), pack)
                for pct in pcts:
                    trips[pct] += bool(gate(c, pct))
                noisy = judged(c, pcts[0])
                lines.append((k, j, gate(c, pcts[0]), noisy[1] if noisy else []))
            print(f"{program} {tag}: " + ", ".join(f"{trips[p]} of {len(lines)} trip --fail-on-regression {p:g}" for p in pcts))
            for k, j, reasons, within in lines:
                print(f"  base {k} -> {tag} {j}: " + (" | ".join(reasons) if reasons else "pass") +
                      ("" if not within else "  [" + " | ".join(within) + "]"))
            sys.stdout.flush()


if __name__ == "__main__":
    what, d = sys.argv[1], sys.argv[2]
    pcts = [float(x) for x in sys.argv[sys.argv.index("--pct") + 1].split(",")] if "--pct" in sys.argv else [5.0]
    prefix = sys.argv[sys.argv.index("--prefix") + 1] if "--prefix" in sys.argv else "c_"
    if what == "heldout":
        pairs(d, prefix if "--prefix" in sys.argv else "ho_", HELDOUT)
    else:
        pairs(d, prefix) if what == "pairs" else reruns(d, pcts)
