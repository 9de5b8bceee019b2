"""Per-op roofline of a PyTorch trace: each modelled aten op's FLOPs and bytes (perf_model.py),
its GPU time from the kernels it launched, and where that puts it against the device's roofs
(device_peaks.py).

Time per op: a kernel belongs to the innermost modelled op on its launching thread whose range
holds its launch, as the profiler's self CUDA time but over modelled ops only: aten::linear's GEMM
kernel goes to the addmm inside it (whose dtypes are the ones the GEMM ran in: under autocast
linear's inputs are fp32 and the addmm's bf16), the autocast cast kernels to their copy_ ops
(copies, as they are), and an op with several kernels sums them. Kernels with no launch on record (replays of a CUDA graph: one cudaGraphLaunch, many
kernels) belong to no op and are counted apart. Rows group calls by (op, shapes, dtype) over the
steady steps; a bandwidth-bound op whose recorded strides show a full-size input walked without unit
stride (perf_model.py) is a row of its own, its shapes marked "(strided)".

Per row: achieved TFLOP/s and TB/s, arithmetic intensity (FLOP/byte), the attainable throughput
min(compute roof, intensity x bandwidth), the bound that sets it (compute / memory), the % of
that roof achieved, and the time per step the op would save at `roofline.target_efficiency_pct`
of its roof. Without the device in the peaks table the achieved numbers stand alone.
"""
from __future__ import annotations

import msgspec
import numpy as np

from .. import settings
from ..result_tables import RooflineRow, StepKernel
from . import device_peaks
from .perf_model import work

TARGET_EFFICIENCY_PCT = settings.register(
    "roofline.target_efficiency_pct", 80.0, "%",
    "share of its roof an op is taken to reach when the roofline reports the time it would save")
ALIGN = settings.register(
    "roofline.tensor_core_alignment", 8, "elements",
    "a GEMM dimension that is not a multiple of this many elements keeps cuBLAS off its fast tensor-core kernels")
SKINNY = settings.register(
    "roofline.skinny_dim", 64, "elements",
    "a GEMM whose smallest matrix dimension is under this is skinny: too few tiles to fill the GPU")
TINY_BYTES = settings.register(
    "roofline.tiny_bytes", 1 << 20, "bytes",
    "a bandwidth-bound op moving less than this per call is tiny: launch and latency, not bandwidth, set its time")
ROWS = 20  # rows kept in the chart (costliest first)
SHAPES_HOW = ("record the ops' shapes: torch.profiler.profile(..., record_shapes=True) (the per-op roofline needs "
              "each op's input shapes and dtypes)")


def op_roofline(tl, kt, steps) -> tuple[list[RooflineRow], dict, list[str], list[StepKernel], tuple | None]:
    """(rows, facts, notes, the first steady step's kernels of the rows: _step_kernels, the compute gap's
    kernels at their roof: _kernels_at_roof) of the per-op roofline over the steady steps; no rows without
    shapes."""
    shapes = getattr(tl, "op_shapes", None)
    if tl.source != "torch" or not steps.steady.size:
        return [], {}, [], [], None
    if shapes is None:
        return [], {"roofline_shapes_recorded": False}, [f"no per-op roofline: the trace has no op shapes; {SHAPES_HOW}"], [], None
    n_steps = int(steps.steady.size)
    lo, hi = int(steps.host_start[steps.steady[0]]), int(steps.host_end[steps.steady[-1]])
    st = shapes["start_ns"].to_numpy(np.int64)
    launch = kt.launch_row
    known = kt.is_kernel & (launch >= 0)
    k_t = kt.tv.host_start[launch[known]] if known.any() else np.zeros(0, np.int64)
    k_dur = kt.dur_ns[known].astype(np.float64)
    graph_ns = float(k_dur[kt.tv.host_is("graph_launch")[launch[known]]].sum()) if known.any() else 0.0
    k_op, op_ns = _kernel_ops(kt, launch[known], k_dur, st.size)
    in_win = (st >= lo) & (st < hi) & (op_ns > 0)
    names, dims, types, conc = (shapes[c].to_numpy(object) for c in ("name", "dims", "types", "concrete"))
    strides = shapes["strides"].to_numpy(object) if "strides" in shapes else np.full(len(shapes), None, object)
    # the reader's raw JSON bytes, one object per distinct value: each distinct (op, arguments) key is decoded and
    # modelled once, the calls summed per group in numpy (a group: op, shapes label, dtype; its first call's work)
    win = np.flatnonzero(in_win)
    key_code: dict[tuple, int] = {}
    kid = np.fromiter(map(lambda k: key_code.setdefault(k, len(key_code)),
                          zip(names[win], dims[win], types[win], conc[win], strides[win])), np.int64, win.size)
    groups: dict[tuple, list] = {}  # group key -> [work, decoded dims, group id]
    group_of_key = np.full(len(key_code), -1, np.int64)
    for key, code in key_code.items():
        d, t, c, s_ = (_decoded(v) for v in key[1:])
        w = work(key[0], d, t, c, s_)
        if w is None:
            continue
        g = groups.setdefault((key[0], _shape_label(d) + (" (strided)" if w.strided else ""), w.dtype), [w, d, len(groups)])
        group_of_key[code] = g[2]
    op_gid = np.full(st.size, -1, np.int64)  # op row -> its group (-1: outside the window or not modelled)
    op_gid[win] = group_of_key[kid] if kid.size else -1
    grouped = op_gid >= 0
    calls = np.bincount(op_gid[grouped], minlength=len(groups)).tolist()
    ns = np.bincount(op_gid[grouped], weights=op_ns[grouped], minlength=len(groups))
    group_keys = list(groups)
    peaks = device_peaks.lookup(tl.devices)
    rows = [_row(name, shape, w, calls[g], ns[g], n_steps, peaks) | {"cause": _cause(w, d)}
            for (name, shape, _), (w, d, g) in groups.items()]
    rows.sort(key=lambda r: (-r["gpu_ms_per_step"], r["op"], r["shapes"], r["dtype"]))
    sequence = _step_kernels(kt, known, k_t, k_op, op_gid, group_keys, rows[:ROWS], steps)
    facts = _facts(rows, kt, steps, peaks)
    facts.update(_gaps(rows, (hi - lo) / 1e6 / n_steps))
    at_roof = _kernels_at_roof(kt, known, k_op, op_gid, group_keys, rows, facts.get("roofline_compute_gap_cause"))
    for r in rows:
        del r["cause"]  # the rules' fact, not a column of the table
    total = float(kt.dur_ns[kt.is_kernel].sum())
    facts["roofline_graph_kernel_pct"] = 100.0 * graph_ns / total if total else 0.0
    notes = []
    if peaks is None and rows:
        dev = (tl.devices[0].get("name") if tl.devices else "") or "not recorded"
        notes.append(f"per-op roofline without percentages: the device ({dev}) is not in the peaks table "
                     "(diagnoser/timeline/device_peaks.py)")
    if facts.get("roofline_unattributed_kernel_pct", 0.0) > 0:
        notes.append(f"{facts['roofline_unattributed_kernel_pct']:.0f}% of kernel time has no launching op "
                     "(no launch correlation on record): not in the per-op roofline")
    if not rows and facts["roofline_graph_kernel_pct"] == 0 and total > 0:
        notes.append("no per-op roofline: the trace records shapes, but no op the perf model covers (GEMMs, convolutions, "
                     "attention, elementwise, copies, norms, softmax, reductions: diagnoser/timeline/perf_model.py) "
                     "launched a kernel in the steady steps (kernels a compiled graph launches, such as torch.compile's "
                     "Triton kernels, have no aten op around them)")
    if facts["roofline_graph_kernel_pct"] > 0:
        notes.append(f"{facts['roofline_graph_kernel_pct']:.0f}% of kernel time is replayed from CUDA graphs "
                     "(cudaGraphLaunch): no op is recorded around those kernels, so they are not in the per-op roofline")
    return [RooflineRow(**r) for r in rows[:ROWS]], facts, notes, sequence, at_roof


def _kernels_at_roof(kt, known, k_op, op_gid, group_keys, rows, cause) -> tuple[np.ndarray, np.ndarray]:
    """(gpu rows, ns) of the kernels of every compute-bound GEMM-class op whose dtype or shapes show the compute
    gap's cause (its fix, e.g. padding the vocabulary, reaches all of them: the LM head's forward GEMM and both
    of its backward GEMMs), each with its time at 100% of its compute roof (its share of its op group's FLOPs
    at the roof): what KERN019's fix is replayed with (replay.py)."""
    empty = (np.zeros(0, np.int64), np.zeros(0))
    if not cause or cause == "none":
        return empty
    ideal = {}
    for r in rows:
        if (r.get("cause") == cause and r["bound"] == "compute" and r["family"] in GAP_FAMILIES["compute"]
                and r["saved_ms_per_step"] and r["tflops"] and r["compute_roof_tflops"]):
            ideal[(r["op"], r["shapes"], r["dtype"])] = r["tflops"] / r["compute_roof_tflops"]  # time at roof / time
    if not ideal:
        return empty
    share = np.array([ideal.get((str(n), label, dtype), 0.0) for n, label, dtype in group_keys])
    g = np.where(k_op >= 0, op_gid[np.maximum(k_op, 0)], -1)
    hit = (g >= 0) & (share[np.maximum(g, 0)] > 0) if share.size else np.zeros(g.size, bool)
    rows_of_kt = np.flatnonzero(known)[hit]
    gpu_rows = kt.timeline_rows(rows_of_kt)
    order = np.argsort(gpu_rows, kind="stable")
    return gpu_rows[order], (kt.dur_ns[rows_of_kt] * share[g[hit]])[order]


def _kernel_ops(kt, launch: np.ndarray, k_dur: np.ndarray, n_ops: int) -> tuple[np.ndarray, np.ndarray]:
    """Each kernel's modelled op (the innermost one around its launch in the modelled-op tree: a row of
    op_shapes, -1: none) and each op's kernel time (ns)."""
    tree = kt.tv.modelled_op_tree
    j = tree.at_launch(kt.tv, launch) if launch.size else np.zeros(0, np.int64)
    k_op = np.where(j >= 0, tree.rows[np.maximum(j, 0)], -1) if tree.rows.size else np.full(j.size, -1, np.int64)
    op_ns = np.zeros(n_ops)
    hit = k_op >= 0
    np.add.at(op_ns, k_op[hit], k_dur[hit])
    return k_op, op_ns


def _step_kernels(kt, known, k_t, k_op, op_gid, group_keys, rows, steps) -> list[StepKernel]:
    """The first steady step's kernels of the modelled ops, in GPU order, each with the index of its op's row
    in `rows` (-1: an op past the rows kept). What an Nsight Compute report of the run is matched on, launch
    by launch (diagnoser/runs/roofline_ncu.py)."""
    s0 = steps.steady[0]
    lo, hi = int(steps.host_start[s0]), int(steps.host_end[s0])
    at = {(r["op"], r["shapes"], r["dtype"]): n for n, r in enumerate(rows)}
    pick = np.flatnonzero((k_op >= 0) & (k_t >= lo) & (k_t < hi))
    if not pick.size:
        return []
    rows_of_kt = np.flatnonzero(known)[pick]
    order = np.argsort(kt.start_ns[rows_of_kt], kind="stable")
    pick, rows_of_kt = pick[order], rows_of_kt[order]
    names = np.asarray(kt.names.uniques, object)[kt.names.codes[rows_of_kt]]
    grid, block = kt.column("grid")[rows_of_kt].tolist(), kt.column("block")[rows_of_kt].tolist()
    us = (kt.dur_ns[rows_of_kt] / 1e3).tolist()
    out = []
    for n, op in enumerate(k_op[pick].tolist()):
        g = int(op_gid[op])
        if g < 0:  # an op the perf model does not cover
            continue
        name, label, dtype = group_keys[g]
        out.append(StepKernel(at.get((str(name), label, dtype), -1), str(names[n]), int(grid[n]), int(block[n]),
                              float(us[n])))
    return out


def _decoded(raw):
    """An op argument column's value as the trace wrote it: raw JSON bytes from the reader, or None."""
    if not raw:
        return None
    if isinstance(raw, (bytes, bytearray)):
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return None
    return raw


def _cause(w, dims) -> str:
    """What in the op's dtype, shapes or strides keeps it off its roof: fp32 / unaligned / skinny (GEMM-class),
    tiny / strided (bandwidth-bound: a full-size input not walked with unit stride, perf_model._strided), or ""
    (nothing in what was recorded)."""
    if w.family in ("gemm", "conv", "attention"):
        if w.dtype == "fp32":
            return "fp32"
        mats = [d[-2:] for d in (dims if isinstance(dims, list) else [])
                if isinstance(d, list) and len(d) >= 2 and all(isinstance(x, int) for x in d)]
        sizes = [x for m in mats for x in m]
        if w.family == "gemm" and any(x % int(ALIGN.value) for x in sizes):
            return "unaligned"
        if w.family == "gemm" and sizes and min(sizes) < int(SKINNY.value):
            return "skinny"
        return ""
    if w.bytes < float(TINY_BYTES.value):
        return "tiny"
    return "strided" if w.strided else ""


# Families whose roof and byte count the Nsight Compute pairs confirm (tests/test_roofline_ncu_pairs.py),
# judged by the rules. Not attention: its roof is lower than the GEMM roof it is drawn against (the softmax's
# exponentials run on the SFU; fused attention runs at 40-70% of it); not norms, softmax, reductions: their
# kernels move more than the compulsory bytes (a layer norm 1.35x), so a low % is not a slow kernel.
GAP_FAMILIES = {"compute": ("gemm", "conv"), "memory": ("gemm", "elementwise", "copy")}


def _gaps(rows, step_ms) -> dict:
    """Facts of the compute-bound and the bandwidth-bound op (of GAP_FAMILIES) that lose the most time
    to their roof (largest saved_ms_per_step): the rules' subjects. A compute-bound op counts only with
    a cause its dtype or shapes show (fp32 / unaligned / skinny): a well-shaped bf16 GEMM below its roof
    is slowed by what the trace does not say (NCCL kernels sharing the SMs in the corpus DDP overlap
    trace: 42%), which only Nsight Compute can tell."""
    f = {}
    for bound in ("compute", "memory"):
        cands = [r for r in rows if r["bound"] == bound and r["saved_ms_per_step"] and r["family"] in GAP_FAMILIES[bound]
                 and (bound == "memory" or r["cause"])]
        if step_ms > 0:
            f[f"roofline_{bound}_gap_candidates"] = float(len(cands))  # 0: the rule has nothing to act on
        if not cands or step_ms <= 0:
            continue
        r = max(cands, key=lambda r: (r["saved_ms_per_step"], r["op"], r["shapes"]))
        p = f"roofline_{bound}_gap"
        f.update({f"{p}_op": f"{r['op']} {r['shapes']} {r['dtype']}"[:190], f"{p}_roof_pct": r["roof_pct"],
                  f"{p}_tflops": r["tflops"], f"{p}_tbs": r["tbs"], f"{p}_intensity": r["intensity"],
                  f"{p}_cause": r["cause"] or "none", f"{p}_ms_per_step": r["gpu_ms_per_step"],
                  f"{p}_step_pct": 100.0 * r["gpu_ms_per_step"] / step_ms,
                  f"{p}_saved_share": r["saved_ms_per_step"] / r["gpu_ms_per_step"],
                  f"{p}_roof_tflops": r["compute_roof_tflops"], f"{p}_roof_tbs": r["memory_roof_tbs"]})
    return f


def _shape_label(dims) -> str:
    if not isinstance(dims, list):
        return ""
    parts = [("x".join(str(x) for x in d) if d and all(isinstance(x, int) for x in d) else "") for d in dims]
    return ", ".join(p for p in parts if p)[:120]


def _row(name, shape, w, calls, ns, n_steps, peaks) -> dict:
    flops, nbytes = w.flops * calls, w.bytes * calls
    row = {"op": str(name), "shapes": shape, "dtype": w.dtype, "family": w.family, "calls_per_step": calls / n_steps,
           "gpu_ms_per_step": ns / 1e6 / n_steps, "tflops": flops / ns / 1e3, "tbs": nbytes / ns / 1e3,
           "intensity": w.intensity, "bound": "", "roof_pct": None, "saved_ms_per_step": None,
           "compute_roof_tflops": None, "memory_roof_tbs": None}
    if peaks is None:
        return row
    bandwidth_only = w.family in ("elementwise", "copy", "norm", "softmax", "reduction")
    p = device_peaks.compute_roof(peaks, w.dtype, w.family)
    bw = peaks["hbm_tbs"]
    memory_roof = w.intensity * bw  # TFLOP/s the bandwidth allows at this intensity
    row["compute_roof_tflops"], row["memory_roof_tbs"] = p, bw
    if bandwidth_only or memory_roof < p:
        row["bound"], row["roof_pct"], ideal_s = "memory", 100.0 * row["tbs"] / bw, nbytes / (bw * 1e12)
    else:
        row["bound"], row["roof_pct"], ideal_s = "compute", 100.0 * row["tflops"] / p, flops / (p * 1e12)
    target = float(TARGET_EFFICIENCY_PCT.value) / 100.0
    if target > 0:
        row["saved_ms_per_step"] = max(0.0, ns / 1e6 - ideal_s / target * 1e3) / n_steps
    return row


def _facts(rows, kt, steps, peaks) -> dict:
    total = float(kt.dur_ns[kt.is_kernel].sum())
    unattributed = float(kt.dur_ns[kt.is_kernel & (kt.launch_row < 0)].sum())
    f = {"roofline_shapes_recorded": True, "roofline_device_known": peaks is not None,
         "roofline_unattributed_kernel_pct": 100.0 * unattributed / total if total else 0.0}
    if rows:
        f["roofline_ops_measured"] = float(len(rows))
        f["roofline_op_gpu_ms_per_step"] = sum(r["gpu_ms_per_step"] for r in rows)
    if peaks is not None and rows:
        f["roofline_saved_ms_per_step"] = sum(r["saved_ms_per_step"] or 0.0 for r in rows)
        for prefix, pick in (("roofline_compute", lambda r: r["bound"] == "compute"),
                             ("roofline_memory", lambda r: r["bound"] == "memory")):
            top = next((r for r in rows if pick(r)), None)  # rows are costliest first
            if top is not None:
                f.update({f"{prefix}_op": f"{top['op']} {top['shapes']} {top['dtype']}"[:190],
                          f"{prefix}_roof_pct": top["roof_pct"], f"{prefix}_tflops": top["tflops"],
                          f"{prefix}_tbs": top["tbs"], f"{prefix}_intensity": top["intensity"],
                          f"{prefix}_ms_per_step": top["gpu_ms_per_step"]})
    return f
