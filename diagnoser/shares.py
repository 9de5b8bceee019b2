"""What a share fact is a share of: the unit a rule states its gain in (`gain_of`: step time, GPU time,
trace time, peak memory) and the disjoint parts of that unit the fact is made of. Each share fact says
so in its catalogue entry (`FactSpec.share`), its one definition; gain_parts.py reads them and counts
each part once. Imports only the vocabularies, so every catalogue may import it."""
from __future__ import annotations

from dataclasses import dataclass

from .idle_classes import OWN_IDLE_CLASSES
from .kernel_categories import BUSY_CATEGORIES
from .memory_owners import OWNERS


# the units a gain is stated in (a rule's gain_of)
STEP_TIME, GPU_TIME, TRACE_TIME, PEAK_MEMORY = "step time", "GPU time", "trace time", "peak memory"


@dataclass(frozen=True)
class Share:
    """The parts of `unit` a share fact is made of: fixed `parts`, or the parts the run's fact `by` picks
    (gain_parts.py: `top_kernel_category`, `leak_owner`, `straggler_rank`)."""

    unit: str
    parts: tuple[str, ...] = ()
    by: str = ""
    of_gpu_time: bool = False  # its value is a share of GPU activity time: restated in step time


def busy(*categories: str) -> tuple[str, ...]:
    """Step-time parts: the GPU busy in these kernel categories."""
    return tuple(f"busy:{c}" for c in categories)


def idle(*classes: str) -> tuple[str, ...]:
    """Step-time parts: the GPU idle of these idle classes."""
    return tuple(f"idle:{c}" for c in classes)


def gpu(*categories: str) -> tuple[str, ...]:
    """GPU-time parts: the kernel time of these categories."""
    return tuple(f"gpu:{c}" for c in categories)


def owner(*owners: str) -> tuple[str, ...]:
    """Peak-memory parts: the live memory of these owners."""
    return tuple(f"owner:{o}" for o in owners)


# A rank's own work (rank_own_work_pct): GPU busy plus the idle its host holds up doing something other
# than launching or communicating.
OWN_WORK = busy(*BUSY_CATEGORIES) + idle(*OWN_IDLE_CLASSES)
ALL_OWNERS = owner(*OWNERS)
