"""Replay of one device's allocator trace: allocated and reserved bytes after every event, lifetimes
of allocations, live blocks and free gaps at any event (used by memory.py; computes no facts)."""
from __future__ import annotations

import numpy as np

SMALL_SEGMENT = 2 << 20  # the allocator's small pool uses 2 MiB segments; requests <= 1 MiB go there


class AllocatorReplay:
    """Allocator state over one device's trace (index i = state after event i)."""

    def __init__(self, snap, device):
        tr = snap.traces[device]
        self.tr, self.n = tr, len(tr)
        act, size = tr.action, tr.size
        free_code = 2 if (act == 2).any() else 1  # free_completed returns the block; older traces lack it
        is_alloc, is_free = act == 0, act == free_code
        addrs, sizes = tr.addr.tolist(), size.tolist()
        self.alloc_idx = np.flatnonzero(is_alloc)
        self.free_at = np.full(self.n, np.iinfo(np.int64).max, np.int64)  # per alloc event index
        live, orphans = {}, []
        for i in np.flatnonzero(is_alloc | is_free).tolist():
            if act[i] == 0:
                live[addrs[i]] = i
            else:
                j = live.pop(addrs[i], None)
                if j is None:
                    orphans.append((i, addrs[i], sizes[i]))  # allocated before the trace window
                else:
                    self.free_at[j] = i
        self.orphans = orphans
        segs = [s for s in snap.segments if s.device == device]
        active = [(b.address, b.size, b.stack) for s in segs for b in s.blocks if b.state.startswith("active")]
        self.preexisting = [b for b in active if b[0] not in live]  # alive for the whole window
        delta = np.where(is_alloc, size, 0) - np.where(is_free, size, 0)
        base = sum(o[2] for o in orphans) + sum(b[1] for b in self.preexisting)
        self.allocated = base + np.cumsum(delta)
        seg_sign = np.select([(act == 3) | (act == 5), (act == 4) | (act == 6)], [1, -1], 0)
        seg_delta = seg_sign * size
        end_reserved = sum(s.total_size for s in segs)
        self.reserved = end_reserved - int(seg_delta.sum()) + np.cumsum(seg_delta)
        self.final_segments = {s.address: s.total_size for s in segs}
        self.seg_sign = seg_sign

    def live_at(self, k):
        """(alloc event indexes alive after event k, [(addr, size, stack)] of blocks older than the trace)."""
        a = self.alloc_idx[self.alloc_idx <= k]
        a = a[self.free_at[a] > k]
        older = [(addr, sz, -1) for i, addr, sz in self.orphans if i > k] + self.preexisting
        return a, older

    def segments_at(self, k):
        segs = dict(self.final_segments)
        for i in np.flatnonzero(self.seg_sign[k + 1:]).tolist()[::-1]:
            i += k + 1
            addr, sz = int(self.tr.addr[i]), int(self.tr.size[i])
            if self.seg_sign[i] > 0:
                segs.pop(addr, None)
            else:
                segs[addr] = sz
        return segs

    def free_blocks_at(self, k, large_pool: bool):
        """Sizes of the gaps between live blocks inside the reserved segments of one pool."""
        a, older = self.live_at(k)
        addr = np.concatenate([self.tr.addr[a], np.array([o[0] for o in older], np.int64)])
        size = np.concatenate([self.tr.size[a], np.array([o[1] for o in older], np.int64)])
        order = np.argsort(addr, kind="stable")
        addr, end = addr[order], addr[order] + size[order]
        gaps = []
        for s, total in sorted(self.segments_at(k).items()):
            if (total == SMALL_SEGMENT) == large_pool:
                continue
            lo, hi = np.searchsorted(addr, s), np.searchsorted(addr, s + total)
            starts = np.concatenate([[s], end[lo:hi]])
            ends = np.concatenate([addr[lo:hi], [s + total]])
            g = ends - starts
            # the allocator does not split off a remainder of <= 1 MiB (large pool) or < 512 B (small
            # pool): such a gap belongs to the block before it, so it is not free memory
            gaps.append(g[g > (SMALL_SEGMENT // 2 if large_pool else 511)])
        return np.concatenate(gaps) if gaps else np.zeros(0, np.int64)
