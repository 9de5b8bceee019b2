"""Which PyTorch (ATen) operator launched a kernel, read from the kernel's name, and what to call instead
when that operator piles many updates onto a few rows.

PyTorch's own kernels cannot be edited by its users, so advice about them must name the operator that
launched them (`index_add_`, `scatter_add_`, `index_put_(..., accumulate=True)`, ...) and the call that
replaces it. Nsight Compute prints their names demangled with or without the `at::` namespace
(`void native::indexFuncLargeIndex<...>`, `void <unnamed>::indexing_backward_kernel_small_stride<float>`).
"""
from __future__ import annotations

import re

# (kernel-name pattern, operator(s), what to do when most of its indices are equal)
ATEN_OPS = (
    (r"indexFunc(Small|Large)Index<.*ReduceAdd|indexAdd(Small|Large)Index", "`index_add_` (index_add / index_reduce_)",
     "aggregate the duplicate indices before the atomics: sort and segment-reduce "
     "(`idx, order = idx.sort(); torch.segment_reduce(src[order], 'sum', lengths=torch.unique_consecutive(idx, return_counts=True)[1])`), "
     "count with `torch.bincount(idx, weights=w, minlength=n)` for 1-D sums, or take the hot index out first "
     "(`hot = idx == h; out[h] += src[hot].sum(0); out.index_add_(0, idx[~hot], src[~hot])`)"),
    (r"indexFunc(Small|Large)Index", "`index_copy_` / `index_fill_` / `index_reduce_` (indexFunc kernels)",
     "aggregate the duplicate indices first (sort and segment-reduce, or `torch.bincount` for 1-D sums)"),
    (r"_scatter_gather_elementwise_kernel|_cuda_scatter_gather_internal_kernel", "`scatter_add_` / `scatter_reduce_` (scatter kernels)",
     "aggregate the duplicate indices before scattering: sort and segment-reduce (`torch.segment_reduce` on the sorted runs), "
     "`torch.bincount(idx, weights=w)` for 1-D sums, or reduce the hot index with one `src[idx == h].sum(0)` and scatter the rest"),
    (r"indexing_backward_kernel", "`index_put_(..., accumulate=True)` or the backward of advanced indexing `x[idx]` (indexing_backward_kernel)",
     "PyTorch sorts the indices and one warp sums each run of equal indices, so one long run is summed by a single warp: "
     "take the dominant index out before the op (`keep = idx != h; out.index_put_((idx[keep],), src[keep], accumulate=True); "
     "out[h] += src[~keep].sum(0)`), or segment-reduce the sorted runs (`torch.segment_reduce`) and write each row once"),
    (r"kernelHistogram1D", "`torch.histc` / `torch.bincount` (kernelHistogram1D)",
     "fewer bins per block in global memory: bin in shared memory (smaller `minlength`/bins), or pre-aggregate the hot bin"),
    (r"embedding_backward|compute_grad_weight|sum_and_scatter", "the backward of `nn.Embedding` / `F.embedding`",
     "pass `padding_idx=` for the padding token so its rows are skipped, or `sparse=True`"),
)
ATEN_RES = tuple((re.compile(p), op, fix) for p, op, fix in ATEN_OPS)


def aten_op_of(name: str | None) -> tuple[str, str] | None:
    """(operator, what to do instead) for a PyTorch kernel name; None when no pattern knows it."""
    if not name:
        return None
    for pattern, op, fix in ATEN_RES:
        if pattern.search(name):
            return op, fix
    return None
