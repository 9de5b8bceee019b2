"""What the GPU was busy with: the kernel categories (timeline/kernels.py says which names are which),
one vocabulary for the timeline that classifies kernels, its catalogue (`kernel_CATEGORY_pct`) and the
ledger that counts each busy part of a step once (gain_parts.py). Imports nothing: every layer may
import it."""
from __future__ import annotations

COMMUNICATION = "communication"

# every category, in the order of their code (timeline/kernels.CATEGORY_CODE) and of the charts
KERNEL_CATEGORIES = ("gemm", "attention", "softmax", "normalization", "elementwise", "reduction", "copy",
                     COMMUNICATION, "optimizer", "other")

# the categories of GPU busy time: communication kernels are idle time (the idle classes communication
# and peer_wait), so gpu_busy_pct excludes them
BUSY_CATEGORIES = tuple(c for c in KERNEL_CATEGORIES if c != COMMUNICATION)

# kernels bound by memory bandwidth, not by compute (memory_bound_step_pct)
MEMORY_BOUND_CATEGORIES = ("elementwise", "copy", "normalization", "softmax", "reduction")
