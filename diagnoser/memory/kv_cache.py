"""KV-cache allocations among the blocks live at the OOM (or the peak): recognised from their stacks, or from
their shapes as a preallocated cache (issue 29).

A KV cache is one K and one V tensor per layer, each [batch, heads, positions, head_dim] (or one block pool
of them), made once before decoding and kept for the process's life. A snapshot records no shapes, only
sizes and stacks, so two kinds of evidence are read:
  frames  a Python frame of the allocation names a KV cache: transformers' `cache_utils.py`
          (DynamicCache / StaticCache), vLLM's cache engine (`_allocate_kv_cache`), SGLang's `memory_pool.py`,
          or a user function or file with kv_cache / past_key_values in its name;
  shape   outside any model call, optimizer step or module construction, an even number (K and V) of at
          least KV_MIN_TENSORS equally sized tensors is allocated back to back and stays alive: a cache
          preallocated layer by layer (what a class like `KVCache.__init__` in the user's own file does).
Pure functions over the replay and the owners (lifetimes.AllocationOwners)."""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from functools import lru_cache

from .. import settings

KV_FRAME = re.compile(r"(?i)(^|[/_.])(kv_?cache|cache_utils\.py|cache_engine|memory_pool|past_key_values?)"
                      r"|allocate_kv|init_kv|kv_pool|KVCache|StaticCache|DynamicCache|PagedAttention")
KV_MIN_TENSORS = settings.register(
    "memory.kv_min_tensors", 2, "count",
    "equally sized tensors (an even number: K and V per layer) allocated back to back outside any model call "
    "and alive at the OOM that are read as a preallocated KV cache when no frame names one")
GIB = float(1 << 30)


@lru_cache(maxsize=4096)
def names_kv_cache(stack) -> bool:
    """A Python frame of the stack (file or function) names a KV cache."""
    return any(f.filename.endswith(".py") and (KV_FRAME.search(f.filename.replace("\\", "/").rsplit("/", 1)[-1])
                                               or KV_FRAME.search(f.name)) for f in stack)


def kv_cache_blocks(rep, stacks, own, live, pos) -> tuple[list[int], str]:
    """(indexes into `live` of the KV-cache blocks, evidence "frames" | "shape" | "") at one moment.

    live: alloc event indexes alive; pos: their positions in own's per-alloc lists."""
    sizes = rep.tr.size[live].tolist()
    named = [i for i, p in enumerate(pos) if own.stack_ids[p] >= 0 and names_kv_cache(stacks[own.stack_ids[p]])]
    if named:
        return named, "frames"
    # shape: in an inference process (no gradient or optimizer state alive), equal sizes allocated back to
    # back (consecutive allocations, nothing else allocated between them) outside any phase
    if any(own.owners[p] in ("gradients", "optimizer_state") for p in pos):
        return [], ""
    outside = [i for i, p in enumerate(pos) if own.phases[p] == "unknown"]
    runs, cur = [], []
    for i in sorted(outside, key=lambda i: pos[i]):
        if cur and sizes[i] == sizes[cur[-1]] and pos[i] == pos[cur[-1]] + 1:
            cur.append(i)
        else:
            cur = [i]
            runs.append(cur)
    best = max((r for r in runs if len(r) >= KV_MIN_TENSORS.value and len(r) % 2 == 0),
               key=lambda r: (len(r) * sizes[r[0]], -int(live[r[0]])), default=None)
    return (best, "shape") if best else ([], "")


def kv_cache_facts(sink, rep, stacks, own, live, pos, total) -> None:
    """kv_cache_* facts of the blocks live at one moment (size and share 0 when no KV cache is seen)."""
    idx, evidence = kv_cache_blocks(rep, stacks, own, live, pos)
    if total <= 0:
        return
    if not idx:  # measured: no KV-cache tensor among the live blocks
        sink.add("kv_cache_gib", 0.0, "GiB")
        sink.add("kv_cache_share_pct", 0.0, "%")
        return
    sizes = rep.tr.size[live].tolist()
    b = sum(sizes[i] for i in idx)
    common = Counter(sizes[i] for i in idx).most_common(1)[0]
    by_site = defaultdict(int)
    for i in idx:
        by_site[own.sites[pos[i]]] += sizes[i]
    site = max(sorted(by_site), key=lambda s: by_site[s])
    sink.add("kv_cache_gib", b / GIB, "GiB")
    sink.add("kv_cache_share_pct", 100.0 * b / total, "%")
    limit = next((f.value for f in sink.facts if f.name == "memory_limit_gib" and f.subject is None), None)
    if limit:  # at an OOM: the cache against the memory it had to fit in
        sink.add("kv_cache_limit_pct", 100.0 * b / GIB / limit, "%")
    sink.add("kv_cache_tensor_count", len(idx), "count")
    sink.add("kv_cache_tensor_mib", common[0] / float(1 << 20), "MiB")
    sink.add("kv_cache_equal_tensor_count", common[1], "count")
    sink.add("kv_cache_site", site, "")
    sink.add("kv_cache_evidence", evidence, "")
