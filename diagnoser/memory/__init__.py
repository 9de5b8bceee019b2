"""Memory family: snapshots and allocator counters -> OOM facts (model.py: what the memory readers fill;
catalogue.py: the facts; owners.py: who holds a block; lifetimes.py, replay.py: allocation history;
analysis.py: the facts per input)."""
