"""Nsight Compute workloads for issue 21: shared-memory conflicts judged by direction, and hot-spot
atomics in PyTorch's own (aten) kernels. Each job has one root cause by construction and a twin.

Not a copy of kernel_mechanisms.py or ../shared/gen/kernels.py: other kernels, types and sizes.
Each job runs once inside an NVTX range of its name between cudaProfilerStart/Stop, so
`ncu --profile-from-start off` sees only these launches.

    python3 kernel_conflicts_atomics.py --group conflicts   # hand-written CUDA (cupy RawModule / NVRTC)
    python3 kernel_conflicts_atomics.py --group atomics     # torch index_add_ / scatter_add_ / index_put_
    python3 kernel_conflicts_atomics.py --check-source      # CPU only: nvcc -cubin for sm_90, ptxas -v
    GEN_DEVICE=cpu python3 kernel_conflicts_atomics.py --group atomics --scale 64   # CPU dry run

conflicts (cupy):
  transpose_f64_unpadded / _padded   32x32 tile of doubles, 32x8 threads; the column read of
                                     `double tile[32][32]` puts a warp on one bank pair (loads conflicted,
                                     stores clean); the twin pads the row to 33
  aos_field_unpadded / _padded       records of 128 floats staged whole in shared memory (clean row
                                     stores, 16 per thread), then ONE field of 32 records read by warp 0
                                     (a 32-way conflicted column load): loads conflicted, stores clean and
                                     dominant, so the kernel-wide average is low; DRAM streams the records
  transpose_loop_unpadded / _padded  1024-thread blocks (32x32), each looping over 16 tiles with two
                                     __syncthreads per tile: the warps wait at the barrier while the
                                     conflicted column reads drain
atomics (torch, PyTorch's kernels):
  index_add_hot / _spread            out.index_add_(0, idx, src), 4M x 16 rows into 65536 rows; hot: 95% of
                                     idx are the same row (a padding id); spread: uniform
  scatter_add_hot / _spread          out.scatter_add_(0, idx, src) on a 2-D index, same split
  index_put_acc_hot / _spread        out.index_put_((idx,), src, accumulate=True) (PyTorch sorts the
                                     indices, then one warp walks each run of equal indices)
  hist_index_add_hot / hist_bincount a histogram of 16M labels (95% one label): counts.index_add_(0,
                                     labels, ones) vs torch.bincount(labels)
"""
import os
import sys

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import capture_jobs, kernel_arguments  # noqa: E402

SRC = r"""
#define T 32
#define R 8
extern "C" __global__ void transpose_f64_unpadded(const double* __restrict__ in, double* __restrict__ out, int n) {
  __shared__ double tile[T][T];
  int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
  for (int j = 0; j < T; j += R) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * T + threadIdx.x; y = blockIdx.x * T + threadIdx.y;
  for (int j = 0; j < T; j += R) out[(size_t)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
extern "C" __global__ void transpose_f64_padded(const double* __restrict__ in, double* __restrict__ out, int n) {
  __shared__ double tile[T][T + 1];
  int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
  for (int j = 0; j < T; j += R) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * T + threadIdx.x; y = blockIdx.x * T + threadIdx.y;
  for (int j = 0; j < T; j += R) out[(size_t)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
// Records of F floats, 32 per block, staged whole (coalesced, clean row stores); warp 0 reads one field.
#define F 128
extern "C" __global__ void aos_field_unpadded(const float* __restrict__ rec, float* __restrict__ out, int field) {
  __shared__ float s[32][F];
  const float* src = rec + (size_t)blockIdx.x * 32 * F;
  for (int i = threadIdx.x; i < 32 * F; i += blockDim.x) s[i / F][i % F] = src[i];
  __syncthreads();
  if (threadIdx.x < 32) out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x][field];
}
extern "C" __global__ void aos_field_padded(const float* __restrict__ rec, float* __restrict__ out, int field) {
  __shared__ float s[32][F + 1];
  const float* src = rec + (size_t)blockIdx.x * 32 * F;
  for (int i = threadIdx.x; i < 32 * F; i += blockDim.x) s[i / F][i % F] = src[i];
  __syncthreads();
  if (threadIdx.x < 32) out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x][field];
}
// 1024 threads per block, a loop over `tiles` tiles of a batch of square matrices, two barriers a tile.
extern "C" __global__ void transpose_loop_unpadded(const float* __restrict__ in, float* __restrict__ out, int n, int tiles) {
  __shared__ float tile[T][T];
  int per_row = n / T;
  for (int t = 0; t < tiles; ++t) {
    int id = blockIdx.x * tiles + t, bx = id % per_row, by = id / per_row;
    tile[threadIdx.y][threadIdx.x] = in[(size_t)(by * T + threadIdx.y) * n + bx * T + threadIdx.x];
    __syncthreads();
    out[(size_t)(bx * T + threadIdx.y) * n + by * T + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
    __syncthreads();
  }
}
extern "C" __global__ void transpose_loop_padded(const float* __restrict__ in, float* __restrict__ out, int n, int tiles) {
  __shared__ float tile[T][T + 1];
  int per_row = n / T;
  for (int t = 0; t < tiles; ++t) {
    int id = blockIdx.x * tiles + t, bx = id % per_row, by = id / per_row;
    tile[threadIdx.y][threadIdx.x] = in[(size_t)(by * T + threadIdx.y) * n + bx * T + threadIdx.x];
    __syncthreads();
    out[(size_t)(bx * T + threadIdx.y) * n + by * T + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
    __syncthreads();
  }
}
"""

CONFLICT_KERNELS = ["transpose_f64_unpadded", "transpose_f64_padded", "aos_field_unpadded", "aos_field_padded",
                    "transpose_loop_unpadded", "transpose_loop_padded"]


def conflict_jobs(scale):
    import cupy as cp
    mod = cp.RawModule(code=SRC, options=("-lineinfo",))
    k = {name: mod.get_function(name) for name in CONFLICT_KERNELS}
    n = 6144 // scale                                  # doubles: 6144^2 x 8 B = 288 MiB
    a64 = cp.random.rand(n * n, dtype=cp.float64)
    b64 = cp.empty_like(a64)
    blocks = 132 * 96 // scale                         # aos: 32 records of 512 B per block (207 MB)
    rec = cp.random.rand(blocks * 32 * 128, dtype=cp.float32)
    field = cp.empty(blocks * 32, dtype=cp.float32)
    m = 4096 // scale                                  # transpose_loop: 4096^2 floats, 16 tiles per block
    tiles = 16
    a32 = cp.random.rand(m * m, dtype=cp.float32)
    b32 = cp.empty_like(a32)
    loop_grid = ((m // 32) * (m // 32) // tiles,)
    i32 = cp.int32
    g2 = (n // 32, n // 32)
    return {
        "transpose_f64_unpadded": lambda: k["transpose_f64_unpadded"](g2, (32, 8), (a64, b64, i32(n))),
        "transpose_f64_padded": lambda: k["transpose_f64_padded"](g2, (32, 8), (a64, b64, i32(n))),
        "aos_field_unpadded": lambda: k["aos_field_unpadded"]((blocks,), (256,), (rec, field, i32(5))),
        "aos_field_padded": lambda: k["aos_field_padded"]((blocks,), (256,), (rec, field, i32(5))),
        "transpose_loop_unpadded": lambda: k["transpose_loop_unpadded"](loop_grid, (32, 32), (a32, b32, i32(m), i32(tiles))),
        "transpose_loop_padded": lambda: k["transpose_loop_padded"](loop_grid, (32, 32), (a32, b32, i32(m), i32(tiles))),
    }, cp.cuda.Device().synchronize


def atomic_jobs(scale, device):
    import torch
    g = torch.Generator(device="cpu").manual_seed(0)
    rows, width, dst_rows = (1 << 22) // scale, 16, 65536 // scale
    pad_id = 7

    def indices(n, hot, high):
        idx = torch.randint(0, high, (n,), generator=g)
        if hot:  # 95% of the entries are one id (padding tokens, a default class)
            idx[torch.rand(n, generator=g) < 0.95] = pad_id
        return idx.to(device)

    src = torch.randn(rows, width, generator=g).to(device)
    out = torch.zeros(dst_rows, width, device=device)
    idx_hot, idx_spread = indices(rows, True, dst_rows), indices(rows, False, dst_rows)
    idx2_hot = idx_hot[:, None].expand(rows, width).contiguous()
    idx2_spread = idx_spread[:, None].expand(rows, width).contiguous()
    labels_n = (1 << 24) // scale
    labels_hot = indices(labels_n, True, 1000)
    ones = torch.ones(labels_n, device=device)
    counts = torch.zeros(1000, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return {
        "index_add_hot": lambda: out.index_add_(0, idx_hot, src),
        "index_add_spread": lambda: out.index_add_(0, idx_spread, src),
        "scatter_add_hot": lambda: out.scatter_add_(0, idx2_hot, src),
        "scatter_add_spread": lambda: out.scatter_add_(0, idx2_spread, src),
        "index_put_acc_hot": lambda: out.index_put_((idx_hot,), src, accumulate=True),
        "index_put_acc_spread": lambda: out.index_put_((idx_spread,), src, accumulate=True),
        "hist_index_add_hot": lambda: counts.index_add_(0, labels_hot, ones),
        "hist_bincount": lambda: torch.bincount(labels_hot, minlength=1000),
    }, sync


def main():
    a = kernel_arguments(["conflicts", "atomics"], SRC)
    jobs, sync = conflict_jobs(a.scale) if a.group == "conflicts" else atomic_jobs(a.scale, a.device)
    capture_jobs(jobs, sync, a, timed=True)


if __name__ == "__main__":
    main()
