"""What each host API call does, vendor-neutral: one table for CUDA runtime, CUDA driver and HIP.

The host table keeps API names as recorded (`cudaMemcpyAsync`, `cuMemcpyHtoDAsync_v2`,
`hipMemcpyWithStream`, `cudaLaunchKernel_ptsz`); every timeline metric asks `api_kind(name)`
instead of testing names, so no analysis ever tests for a vendor.

Kinds:
  launch        kernel launch (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel, hipExtModuleLaunchKernel)
  graph_launch  graph replay (cudaGraphLaunch, hipGraphLaunch): one call runs many kernels
  copy_async    copy that returns before it finishes (unless from pageable memory: then it waits)
  copy_sync     copy the host waits for: cudaMemcpy, cuMemcpyDtoH, hipMemcpy, hipMemcpyWithStream
  memset        cudaMemset*, hipMemset*, cuMemsetD*
  sync          the host waits for the device: stream / device / event / context synchronize
  malloc, free  device memory from / back to the driver (cudaMalloc, cuMemAlloc, hipMalloc, cudaFree...)
  host_alloc    pinned host memory (cudaHostAlloc, cudaMallocHost, hipHostMalloc and their frees)
  setup         one-time work by nature: driver / context initialisation, module and library loading
  nccl          NCCL calls on the host
  other         everything else (attribute queries, event records, stream creation...)
"""
from __future__ import annotations

import functools
import re

API_KINDS = ("launch", "graph_launch", "copy_async", "copy_sync", "memset", "sync", "malloc", "free",
             "host_alloc", "setup", "nccl", "other")

# Suffixes that name a variant of the same call: driver API versions (_v2), per-thread default
# stream (_ptsz, _ptds), HIP's property-struct revisions (R0600).
_VARIANT = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt|R\d{4})+$")

_EXACT = {
    # graph replay
    "cudaGraphLaunch": "graph_launch", "cuGraphLaunch": "graph_launch", "hipGraphLaunch": "graph_launch",
    # copies the host waits for
    "cudaMemcpy": "copy_sync", "cudaMemcpy2D": "copy_sync", "cudaMemcpy3D": "copy_sync",
    "cudaMemcpyPeer": "copy_sync", "cudaMemcpyToSymbol": "copy_sync", "cudaMemcpyFromSymbol": "copy_sync",
    "cuMemcpy": "copy_sync", "cuMemcpyDtoH": "copy_sync", "cuMemcpyHtoD": "copy_sync",
    "cuMemcpyDtoD": "copy_sync", "cuMemcpy2D": "copy_sync", "cuMemcpy3D": "copy_sync",
    "hipMemcpy": "copy_sync", "hipMemcpyWithStream": "copy_sync", "hipMemcpyDtoH": "copy_sync",
    "hipMemcpyHtoD": "copy_sync", "hipMemcpyDtoD": "copy_sync", "hipMemcpy2D": "copy_sync",
    "hipMemcpy3D": "copy_sync", "hipMemcpyPeer": "copy_sync", "hipMemcpyToSymbol": "copy_sync",
    "hipMemcpyFromSymbol": "copy_sync",
    # host waits for the device
    "cudaStreamSynchronize": "sync", "cudaDeviceSynchronize": "sync", "cudaEventSynchronize": "sync",
    "cudaThreadSynchronize": "sync", "cuStreamSynchronize": "sync", "cuCtxSynchronize": "sync",
    "cuEventSynchronize": "sync", "hipStreamSynchronize": "sync", "hipDeviceSynchronize": "sync",
    "hipEventSynchronize": "sync", "hipCtxSynchronize": "sync",
    # device memory from the driver
    "cudaMalloc": "malloc", "cudaMallocPitch": "malloc", "cudaMalloc3D": "malloc", "cudaMallocManaged": "malloc",
    "cudaMallocArray": "malloc", "cuMemAlloc": "malloc", "cuMemAllocPitch": "malloc", "cuMemAllocManaged": "malloc",
    "cuMemCreate": "malloc", "hipMalloc": "malloc", "hipMallocManaged": "malloc", "hipExtMallocWithFlags": "malloc",
    "hipMallocPitch": "malloc", "hipMalloc3D": "malloc",
    "cudaFree": "free", "cudaFreeArray": "free", "cuMemFree": "free", "cuMemRelease": "free", "hipFree": "free",
    "hipFreeArray": "free",
    # pinned host memory
    "cudaHostAlloc": "host_alloc", "cudaMallocHost": "host_alloc", "cudaFreeHost": "host_alloc",
    "cudaHostRegister": "host_alloc", "cudaHostUnregister": "host_alloc", "cuMemHostAlloc": "host_alloc",
    "cuMemAllocHost": "host_alloc", "cuMemFreeHost": "host_alloc", "cuMemHostRegister": "host_alloc",
    "hipHostMalloc": "host_alloc", "hipHostFree": "host_alloc", "hipHostAlloc": "host_alloc",
    "hipHostRegister": "host_alloc", "hipMallocHost": "host_alloc", "hipFreeHost": "host_alloc",
    # one-time initialisation and loading
    "cuInit": "setup", "hipInit": "setup", "cuCtxCreate": "setup", "cuDevicePrimaryCtxRetain": "setup",
    "cuDevicePrimaryCtxReset": "setup", "cudaInitDevice": "setup", "cudaSetDevice": "setup",
    "hipSetDevice": "setup", "cuCtxSetCurrent": "setup", "hipCtxCreate": "setup",
}
_PATTERNS = [
    ("graph_launch", re.compile(r"^(?:cuda|cu|hip)GraphLaunch")),
    ("launch", re.compile(r"^(?:cudaLaunch|cuLaunch|hipLaunch|hipExtLaunch|hipExtModuleLaunch|hipModuleLaunch|"
                          r"hipHccModuleLaunch|hipLaunchCooperative)")),
    ("copy_async", re.compile(r"^(?:cuda|cu|hip)Memcpy\w*Async$")),
    ("memset", re.compile(r"^(?:cudaMemset|cuMemsetD|hipMemset)")),
    ("setup", re.compile(r"^(?:cu|hip)(?:Module|Library)(?:Load|Unload)|^cudaLibraryLoad|^cuLinkCreate|^nvrtc|"
                         r"^hipModuleGetFunction|^cuModuleGetFunction|^hiprtc")),
    ("nccl", re.compile(r"^nccl", re.I)),
]


@functools.lru_cache(maxsize=8192)
def api_kind(name: str) -> str:
    """The kind of one host API call (see the module doc); `other` when unknown."""
    base = _VARIANT.sub("", name.strip())
    kind = _EXACT.get(base)
    if kind is not None:
        return kind
    for kind, pattern in _PATTERNS:
        if pattern.search(base):
            return kind
    return "other"
