"""The colour of each category, one palette for every chart of the report and compare pages.

A known category always gets the same colour class (`p0`..`p9`, CSS variables in _style.css), in
whichever chart and whatever order it appears: memory_bound is orange in the single-run SOL chart and
in the compare page's before -> after chart, like the roofline's memory-bound region (`r-memory`);
compute_bound is blue like `r-compute`. Kernel categories (timeline/kernels.KERNEL_CATEGORIES) and SOL
classes (ncu/analysis.sol_class) never share a chart, so they may share colours. Names with no fixed
colour (memory owners, custom idle classes) take the free classes in order of first appearance;
catch-all names ("other", "unknown", "none") are grey.
"""
from __future__ import annotations

PALETTE = 10
GREY = "p9"
NEUTRAL = ("other", "unknown", "none")  # drawn grey so real categories keep the colours

CATEGORY_COLOURS: dict[str, str] = {
    # kernel categories (timeline/kernels.py)
    "gemm": "p0", "attention": "p6", "softmax": "p3", "normalization": "p5", "elementwise": "p1",
    "reduction": "p2", "copy": "p8", "communication": "p7", "optimizer": "p4",
    # SOL classes (ncu/analysis.sol_class), coloured like the roofline's regions
    "compute_bound": "p0", "memory_bound": "p1", "latency_bound": "p8", "near_speed_of_light": "p4",
}


def palette(names) -> dict[str, str]:
    """Colour class per name: the fixed one for a known category, grey for catch-alls, else the next
    class in order of first appearance (cycling over p0..p8)."""
    out: dict[str, str] = {}
    free = 0
    for name in names:
        if name in out:
            continue
        key = str(name).split(" (")[0]
        if key in NEUTRAL:
            out[name] = GREY
        elif key in CATEGORY_COLOURS:
            out[name] = CATEGORY_COLOURS[key]
        else:
            out[name] = f"p{free % (PALETTE - 1)}"
            free += 1
    return out
