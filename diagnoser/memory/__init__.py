"""Memory family: snapshots and allocator counters -> OOM facts (catalogue.py: the facts; owners.py: who
holds a block; lifetimes.py, replay.py: allocation history; analysis.py: the facts per input)."""
