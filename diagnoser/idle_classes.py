"""Why the GPU sat idle: the classes of GPU idle time (docs/gap_classes.md), one vocabulary for the
timeline that classifies each gap (timeline/gaps.py), the rank comparison that counts a rank's own work
(timeline/ranks.py) and the ledger that counts each idle part of a step once (gain_parts.py).
Imports nothing: every layer may import it."""
from __future__ import annotations

# the classes a gap is given, in the order of their index (timeline/gaps.Gaps.cls)
IDLE_CLASSES = ("data", "host", "sync", "alloc", "launch", "communication", "unexplained")

# the fact a class's share of the step is reported as (communication keeps its short fact name)
IDLE_FACT = {c: f"idle_{c}_pct" for c in IDLE_CLASSES} | {"communication": "idle_comm_pct"}

# a multi-rank run's communication idle split in two: its transfer stays communication, the rest is waiting
# for a peer to arrive (timeline/ranks.py); only the cross-rank analysis measures it
PEER_WAIT = "peer_wait"
PEER_WAIT_FACT = "idle_peer_wait_pct"

# the idle parts of a step a gain is counted on (gain_parts.py): the classes, communication split in two
IDLE_PARTS = ("data", "host", "sync", "alloc", "launch", "communication", PEER_WAIT, "unexplained")

# the idle a rank's own host causes by doing something other than launching the common work; launch
# gaps (the same launches, issued more slowly) and waits in collectives are not the rank's own work
OWN_IDLE_CLASSES = ("data", "host", "sync", "alloc", "unexplained")
