"""Facts of the per-op roofline (timeline/roofline.py), from a PyTorch trace recorded with shapes."""
from __future__ import annotations

from ..facts import FactSpec
from ..kernel_categories import MEMORY_BOUND_CATEGORIES
from ..shares import STEP_TIME, Share, busy

SOURCES = ("torch-trace",)
SHAPES = ("profile with torch.profiler, activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and "
          "record_shapes=True (each op's input shapes and dtypes give its FLOPs and bytes)")


def _f(name, type_, unit, meaning, share=None):
    return FactSpec(name, type_, unit, meaning, "run", SOURCES, SHAPES, share)


# the step's parts the roofline's op furthest below its roof may run in
GAP_PARTS = {"compute": busy("gemm", "attention", "other"), "memory": busy(*MEMORY_BOUND_CATEGORIES, "gemm")}


CATALOGUE = [
    _f("roofline_shapes_recorded", "bool", "", "the trace's ops carry their input shapes (record_shapes=True)"),
    _f("roofline_device_known", "bool", "", "the device is in the peaks table (diagnoser/timeline/device_peaks.py), "
       "so the roofline gives % of roof"),
    _f("roofline_unattributed_kernel_pct", "number", "%", "kernel time with no launch on record (no launch "
       "correlation): outside the per-op roofline"),
    _f("roofline_graph_kernel_pct", "number", "%", "kernel time replayed from CUDA graphs (cudaGraphLaunch): no op "
       "range holds those kernels, so they are outside the per-op roofline"),
    _f("roofline_ops_measured", "number", "count", "(op, shapes, dtype) rows the per-op roofline measured"),
    _f("roofline_op_gpu_ms_per_step", "number", "ms", "GPU time per steady step of the ops the roofline measured "
       "(its top rows)"),
    _f("roofline_saved_ms_per_step", "number", "ms", "time per steady step the measured ops would save at "
       "roofline.target_efficiency_pct of the roof that bounds each"),
]
for _bound in ("compute", "memory"):
    _which = f"the costliest {_bound}-bound op of the per-op roofline"
    CATALOGUE += [
        _f(f"roofline_{_bound}_op", "string", "", f"{_which}: op, shapes and dtype"),
        _f(f"roofline_{_bound}_roof_pct", "number", "%", f"{_which}: achieved share of its {_bound} roof"),
        _f(f"roofline_{_bound}_tflops", "number", "TFLOP/s", f"{_which}: achieved TFLOP/s"),
        _f(f"roofline_{_bound}_tbs", "number", "TB/s", f"{_which}: achieved TB/s (compulsory bytes)"),
        _f(f"roofline_{_bound}_intensity", "number", "FLOP/byte", f"{_which}: arithmetic intensity"),
        _f(f"roofline_{_bound}_ms_per_step", "number", "ms", f"{_which}: GPU time per steady step"),
    ]
for _bound, _roof in (("compute", "compute"), ("memory", "memory")):
    _which = f"the {_bound}-bound op of the per-op roofline that loses the most time to its roof"
    CATALOGUE += [
        _f(f"roofline_{_bound}_gap_op", "string", "", f"{_which}: op, shapes and dtype"),
        _f(f"roofline_{_bound}_gap_roof_pct", "number", "%", f"{_which}: achieved share of its {_roof} roof"),
        _f(f"roofline_{_bound}_gap_tflops", "number", "TFLOP/s", f"{_which}: achieved TFLOP/s"),
        _f(f"roofline_{_bound}_gap_tbs", "number", "TB/s", f"{_which}: achieved TB/s (compulsory bytes)"),
        _f(f"roofline_{_bound}_gap_intensity", "number", "FLOP/byte", f"{_which}: arithmetic intensity"),
        _f(f"roofline_{_bound}_gap_cause", "string", "", f"{_which}: what its dtype or shapes say keeps it off the "
           "roof: fp32 / unaligned (a GEMM dimension not a multiple of roofline.tensor_core_alignment) / skinny "
           "(a GEMM dimension under roofline.skinny_dim) / tiny (a bandwidth-bound op under roofline.tiny_bytes) / strided "
           "(a bandwidth-bound op with a full-size input walked without unit stride: the trace's Input Strides) / none"),
        _f(f"roofline_{_bound}_gap_ms_per_step", "number", "ms", f"{_which}: GPU time per steady step"),
        _f(f"roofline_{_bound}_gap_step_pct", "number", "%", f"{_which}: its GPU time, % of the steady step",
           Share(STEP_TIME, GAP_PARTS[_bound])),
        _f(f"roofline_{_bound}_gap_saved_share", "number", "fraction", f"{_which}: share of its time it would save "
           "at roofline.target_efficiency_pct of its roof"),
        _f(f"roofline_{_bound}_gap_roof_tflops", "number", "TFLOP/s", f"{_which}: the compute roof of its dtype"),
        _f(f"roofline_{_bound}_gap_roof_tbs", "number", "TB/s", f"{_which}: the device's memory bandwidth"),
        _f(f"roofline_{_bound}_gap_candidates", "number", "count", f"{_bound}-bound ops of the per-op roofline that "
           "could be that op (compute: a GEMM or convolution whose dtype or shapes say why; 0: none, the rule has "
           "nothing to act on)"),
    ]
