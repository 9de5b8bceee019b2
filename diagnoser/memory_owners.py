"""Who holds device memory: the owner classes of live memory (memory/owners.py says how an allocation's
stack decides), one vocabulary for the memory analysis, its catalogue (`OWNER_share_pct`) and the
ledger that counts each owner's part of peak memory once (gain_parts.py). Imports nothing."""
from __future__ import annotations

OWNERS = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "unknown")
