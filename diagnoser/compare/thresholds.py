"""The settings that decide what counts as a change in a comparison (`--set compare.NAME=V`)."""
from __future__ import annotations

from .. import settings

MIN_CHANGE = settings.register("compare.min_change_pct", 5.0, "%",
                               "smallest change of a finding's cost (gain x its base time) counted as improved or regressed")
MIN_COST_SHARE = settings.register("compare.min_cost_change_share_pct", 1.0, "%",
                                   "smallest change of a finding's cost counted, % of the time (or memory) it is a share of")
MIN_KERNEL_SHARE = settings.register("compare.min_kernel_share_pct", 1.0, "%",
                                     "kernels below this share of BEFORE's GPU time are not gated on their duration")
