"""Peak throughputs of the GPUs the roofline knows: dense tensor-core TFLOP/s per dtype, FP32
(non-tensor) TFLOP/s and HBM bandwidth, from the vendors' datasheets, dense figures (the
datasheets' "with sparsity" numbers are 2x these). Looked up by the device name the trace
records (deviceProperties "name"); the compute capability breaks no ties by itself (9.0 is both
H100 and H200), so an unknown name gets no peaks and the roofline says so.

Sources (datasheet figures for the SXM / OAM parts unless the name says PCIe):
- V100: NVIDIA Tesla V100 datasheet (SXM2: 125 FP16 tensor, 15.7 FP32, 900 GB/s; PCIe 112 / 14)
- T4: NVIDIA T4 datasheet (65 FP16 tensor, 8.1 FP32, 320 GB/s)
- A10: NVIDIA A10 datasheet (125 BF16/FP16 tensor, 62.5 TF32, 31.2 FP32, 600 GB/s)
- A100: NVIDIA A100 datasheet (312 BF16/FP16, 156 TF32, 19.5 FP32; 80GB SXM 2039 GB/s, 40GB 1555)
- L4: NVIDIA L4 datasheet (121 BF16/FP16, 60 TF32, 242 FP8, 30.3 FP32, 300 GB/s)
- L40S: NVIDIA L40S datasheet (362 BF16/FP16, 183 TF32, 733 FP8, 91.6 FP32, 864 GB/s)
- H100: NVIDIA H100 datasheet (SXM 989 BF16/FP16, 494 TF32, 1979 FP8, 67 FP32, 3.35 TB/s;
  PCIe 756 / 378 / 1513 / 51, 2.0 TB/s; NVL 835 / 418 / 1671 / 60, 3.9 TB/s)
- H200: NVIDIA H200 datasheet (SXM: H100 SXM's compute, 4.8 TB/s)
- B200: NVIDIA DGX B200 / HGX B200 specifications per GPU (2250 BF16/FP16, 1100 TF32, 4500 FP8,
  75 FP32, 8 TB/s)
- MI250X: AMD Instinct MI250X datasheet (383 BF16/FP16 matrix, 95.7 FP32 matrix, 47.9 FP32
  vector, 3.2768 TB/s)
- MI300X: AMD Instinct MI300X datasheet (1307.4 BF16/FP16, 653.7 TF32, 2614.9 FP8, 163.4 FP32
  vector, 5.3 TB/s)
"""
from __future__ import annotations

import re

# (name pattern, label, {dtype: dense tensor TFLOP/s}, FP32 non-tensor TFLOP/s, HBM TB/s); first match wins
_TABLE = [
    (r"V100.*PCIe", "V100 PCIe", {"fp16": 112.0}, 14.0, 0.9),
    (r"V100", "V100 SXM2", {"fp16": 125.0}, 15.7, 0.9),
    (r"\bT4\b", "T4", {"fp16": 65.0}, 8.1, 0.32),
    (r"\bA10\b(?!0)", "A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5}, 31.2, 0.6),
    (r"A100.*(40GB|PCIE-40)", "A100 40GB", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0}, 19.5, 1.555),
    (r"A100.*PCIe", "A100 80GB PCIe", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0}, 19.5, 1.935),
    (r"A100", "A100 80GB SXM", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0}, 19.5, 2.039),
    (r"\bL4\b", "L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp8": 242.0}, 30.3, 0.3),
    (r"L40S", "L40S", {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp8": 733.0}, 91.6, 0.864),
    (r"H100.*PCIe", "H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp8": 1513.0}, 51.0, 2.0),
    (r"H100 NVL", "H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 418.0, "fp8": 1671.0}, 60.0, 3.9),
    (r"H100", "H100 SXM", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp8": 1979.0}, 67.0, 3.35),
    (r"H200", "H200 SXM", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp8": 1979.0}, 67.0, 4.8),
    (r"B200", "B200", {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp8": 4500.0}, 75.0, 8.0),
    (r"MI250X?", "MI250X", {"bf16": 383.0, "fp16": 383.0, "fp32": 95.7}, 47.9, 3.2768),
    (r"MI300X", "MI300X", {"bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7, "fp8": 2614.9}, 163.4, 5.3),
]


def lookup(devices: list[dict]) -> dict | None:
    """{label, tensor: {dtype: TFLOP/s}, fp32_tflops, hbm_tbs} of the trace's first device, or None."""
    for d in devices or []:
        name = str(d.get("name", ""))
        for pattern, label, tensor, fp32, bw in _TABLE:
            if re.search(pattern, name, re.IGNORECASE):
                return {"label": label, "tensor": dict(tensor), "fp32_tflops": fp32, "hbm_tbs": bw}
        return None
    return None


def compute_roof(peaks: dict, dtype: str, family: str) -> float:
    """The FLOP/s roof (TFLOP/s) an op of this dtype and family runs under: the tensor cores' dense
    peak for a GEMM-class op in bf16 / fp16 / fp8 (fp8 on a GPU without it: the fp16 roof), FP32
    otherwise (an fp32 GEMM on the FP32 pipes: with TF32 allowed the roof is higher, and the
    trace does not say which was used)."""
    tensor = peaks["tensor"]
    if family in ("gemm", "conv", "attention"):
        if dtype in tensor:
            return tensor[dtype]
        if dtype == "fp8" and "fp16" in tensor:
            return tensor["fp16"]
        if dtype == "fp32" and "fp32" in tensor:  # MI250X's FP32 matrix cores
            return tensor["fp32"]
    return peaks["fp32_tflops"]
