"""The settings that decide what counts as a change in a comparison, and when two sides' steps measure
the same work (`--set compare.NAME=V`): one module of settings alone, so the catalogue lists them
without importing the comparison."""
from __future__ import annotations

from . import settings

MIN_CHANGE = settings.register("compare.min_change_pct", 5.0, "%",
                               "smallest change of a finding's cost (gain x its base time) counted as improved or regressed")
MIN_COST_SHARE = settings.register("compare.min_cost_change_share_pct", 1.0, "%",
                                   "smallest change of a finding's cost counted, % of the time (or memory) it is a share of")
MIN_KERNEL_SHARE = settings.register("compare.min_kernel_share_pct", 1.0, "%",
                                     "kernels below this share of BEFORE's GPU time are not gated on their duration")
SAME_WORK_SHARE = settings.register(
    "compare.same_step_kernel_share", 0.6, "fraction",
    "steps not both from markers measure the same thing when at least this share of each side's kernel time per step "
    "is in kernels (name, grid, block) both sides launch equally often per step")
SAME_WORK_FACTOR = settings.register(
    "compare.same_step_launch_factor", 1.25, "ratio",
    "a kernel is launched equally often per step on both sides when the larger count is at most this many times the smaller")
# measured on the GPU machine, 10 processes each of two programs (docs/compare.md): GPU work per step within
# 0.4% and 1.0%; the host's work per step 3.0-5.3 ms and 8.6-25.9 ms (the host's speed differs from process to
# process: 5.2 vs 12.5 us a launch), so a host or wall-time change under about 200% is not one pair's to tell
GPU_FLOOR = settings.register("compare.gpu_work_noise_pct", 1.0, "%",
                              "between-run noise of GPU work per step of identical code (regression gate)")
HOST_FLOOR = settings.register("compare.host_work_noise_pct", 200.0, "%",
                               "between-run noise of the host's own work per step of identical code (regression gate)")
WALL_FLOOR = settings.register("compare.step_time_noise_pct", 200.0, "%",
                               "between-run noise of the wall step time of identical code (regression gate)")
KERNEL_FLOOR = settings.register("compare.kernel_noise_pct", 3.0, "%",
                                 "between-run noise of one kernel's time per step (regression gate)")
# the host's time between ops beyond the process's pace (noise_gate.host_delay): on the same reruns (12 processes
# of each program), the 264 pairs of identical processes gave at most 2.48% of the step (mlp; 95% under 1.6%) and
# 0.39% (decode), while a delay of 5% of the step between two ops measured 2.3-10.5%
HOST_DELAY_FLOOR = settings.register("compare.host_delay_noise_pct", 2.5, "%",
                                     "between-run noise of the host time between ops beyond the process's pace, "
                                     "% of the step, of identical code (regression gate)")
