"""Kernels with one Speed-of-Light mechanism each (and a healthy twin), for Nsight Compute.

Not a copy of ../shared/gen/kernels.py: other kernels, other shapes, other failure classes
(issue 10). Each job is one launch (the conv jobs: one cuDNN call), inside an NVTX range of its
name, between cudaProfilerStart/Stop, so `ncu --profile-from-start off` sees only these.

    python3 kernel_mechanisms.py --group cuda   # hand-written CUDA kernels (cupy RawModule / NVRTC)
    python3 kernel_mechanisms.py --group conv   # cuDNN convolutions (FP32 with TF32 off, bf16 twin)
    python3 kernel_mechanisms.py --group conv2  # FP32 convolutions of other shapes (implicit GEMM)
    python3 kernel_mechanisms.py --check-source # CPU only: compile SRC with nvcc -cubin, print ptxas
"""
import os
import sys

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import capture_jobs, kernel_arguments  # noqa: E402

SRC = r"""
#define T 32
#define R 8
// 1. Shared-memory transpose, 32x32 tile, 32x8 threads: the column read of an unpadded tile puts
//    a warp's 32 lanes on one bank (32-way conflict); the padded twin is conflict-free.
extern "C" __global__ void transpose_tile_unpadded(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[T][T];
  int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
  for (int j = 0; j < T; j += R) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * T + threadIdx.x; y = blockIdx.x * T + threadIdx.y;
  for (int j = 0; j < T; j += R) out[(size_t)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
extern "C" __global__ void transpose_tile_padded(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[T][T + 1];
  int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
  for (int j = 0; j < T; j += R) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * T + threadIdx.x; y = blockIdx.x * T + threadIdx.y;
  for (int j = 0; j < T; j += R) out[(size_t)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
// 2. A tile kept in shared memory and swept by rows many times (a small dense operator applied
//    in place): lane = row index, so t[lane][k] is one bank for the whole warp without padding.
extern "C" __global__ void tile_sweep_unpadded(const float* __restrict__ in, float* __restrict__ out, int reps) {
  __shared__ float t[T][T];
  int lane = threadIdx.x, w = threadIdx.y;  // 32 x 8
  const float* src = in + (size_t)blockIdx.x * T * T;
  for (int j = w; j < T; j += R) t[j][lane] = src[j * T + lane];
  __syncthreads();
  float acc = 0.f;
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < T; ++k) acc = fmaf(t[lane][(k + w + r) & (T - 1)], 1.0001f, acc);
  out[(size_t)blockIdx.x * T * R + w * T + lane] = acc;
}
extern "C" __global__ void tile_sweep_padded(const float* __restrict__ in, float* __restrict__ out, int reps) {
  __shared__ float t[T][T + 1];
  int lane = threadIdx.x, w = threadIdx.y;
  const float* src = in + (size_t)blockIdx.x * T * T;
  for (int j = w; j < T; j += R) t[j][lane] = src[j * T + lane];
  __syncthreads();
  float acc = 0.f;
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < T; ++k) acc = fmaf(t[lane][(k + w + r) & (T - 1)], 1.0001f, acc);
  out[(size_t)blockIdx.x * T * R + w * T + lane] = acc;
}
// 3. Sum reduction: float4 grid-stride loads, warp shuffles, ONE store per block (out[blockIdx.x]).
extern "C" __global__ void block_sum(const float4* __restrict__ in, float* __restrict__ out, long long n4) {
  __shared__ float part[32];
  float s = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = in[i]; s += (v.x + v.y) + (v.z + v.w);
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
  }
}
// 4. Naive transposes without shared memory: one side of the copy strides by n floats.
extern "C" __global__ void transpose_naive_strided_store(const float* __restrict__ in, float* __restrict__ out, int n) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  out[(size_t)x * n + y] = in[(size_t)y * n + x];   // coalesced load, stride-n store
}
extern "C" __global__ void transpose_naive_strided_load(const float* __restrict__ in, float* __restrict__ out, int n) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  out[(size_t)y * n + x] = in[(size_t)x * n + y];   // stride-n load, coalesced store
}
// 5. Sixteen divisions per element by run-time coefficients (a stencil's "/ dx" terms), FP32 and
//    FP64, grid-stride (many elements per thread); the twins compute the 16 reciprocals once per
//    thread and multiply.
extern "C" __global__ void scale_divide_f32(const float* __restrict__ in, float* __restrict__ out, float base, float step, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float x = in[i], acc = 0.f;
    #pragma unroll
    for (int k = 0; k < 16; ++k) acc += (x + (float)k) / (base + step * (float)k);
    out[i] = acc;
  }
}
extern "C" __global__ void scale_reciprocal_f32(const float* __restrict__ in, float* __restrict__ out, float base, float step, int n) {
  float rd[16];
  #pragma unroll
  for (int k = 0; k < 16; ++k) rd[k] = 1.0f / (base + step * (float)k);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float x = in[i], acc = 0.f;
    #pragma unroll
    for (int k = 0; k < 16; ++k) acc += (x + (float)k) * rd[k];
    out[i] = acc;
  }
}
extern "C" __global__ void scale_divide_f64(const double* __restrict__ in, double* __restrict__ out, double base, double step, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    double x = in[i], acc = 0.0;
    #pragma unroll
    for (int k = 0; k < 16; ++k) acc += (x + (double)k) / (base + step * (double)k);
    out[i] = acc;
  }
}
extern "C" __global__ void scale_reciprocal_f64(const double* __restrict__ in, double* __restrict__ out, double base, double step, int n) {
  double rd[16];
  #pragma unroll
  for (int k = 0; k < 16; ++k) rd[k] = 1.0 / (base + step * (double)k);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    double x = in[i], acc = 0.0;
    #pragma unroll
    for (int k = 0; k < 16; ++k) acc += (x + (double)k) * rd[k];
    out[i] = acc;
  }
}
// 6. A 1-D Jacobi smoother on a block-resident line: two __syncthreads per step, two shared loads
//    and an add between them; the twin does 32 steps per barrier pair on warp shuffles.
extern "C" __global__ void jacobi_block_barrier(const float* __restrict__ in, float* __restrict__ out, int steps) {
  __shared__ float s[1024];
  int t = threadIdx.x;
  float v = in[blockIdx.x * 1024 + t];
  for (int k = 0; k < steps; ++k) {
    s[t] = v;
    __syncthreads();
    v = 0.5f * (s[(t + 1) & 1023] + s[(t + 1023) & 1023]);
    __syncthreads();
  }
  out[blockIdx.x * 1024 + t] = v;
}
extern "C" __global__ void jacobi_warp_shuffle(const float* __restrict__ in, float* __restrict__ out, int steps) {
  __shared__ float s[1024];
  int t = threadIdx.x, lane = t & 31;
  float v = in[blockIdx.x * 1024 + t];
  for (int k = 0; k < steps; k += 32) {
    for (int j = 0; j < 32; ++j)
      v = 0.5f * (__shfl_sync(0xffffffffu, v, (lane + 1) & 31) + __shfl_sync(0xffffffffu, v, (lane + 31) & 31));
    s[t] = v;
    __syncthreads();
    v = 0.5f * (v + s[t ^ 32]);
    __syncthreads();
  }
  out[blockIdx.x * 1024 + t] = v;
}
"""

CUDA_KERNELS = ["transpose_tile_unpadded", "transpose_tile_padded", "tile_sweep_unpadded", "tile_sweep_padded",
                "block_sum", "transpose_naive_strided_store", "transpose_naive_strided_load",
                "scale_divide_f32", "scale_reciprocal_f32", "scale_divide_f64", "scale_reciprocal_f64",
                "jacobi_block_barrier", "jacobi_warp_shuffle"]


def cuda_jobs(scale):
    import cupy as cp
    mod = cp.RawModule(code=SRC, options=("-lineinfo",))
    k = {name: mod.get_function(name) for name in CUDA_KERNELS}
    n = 8192 // scale                        # square matrices n x n fp32 (256 MB at scale 1)
    a = cp.random.rand(n * n, dtype=cp.float32)
    b = cp.empty_like(a)
    tiles = 132 * 64 // scale                # tile_sweep: 64 blocks per SM
    tin = cp.random.rand(tiles * 32 * 32, dtype=cp.float32)
    tout = cp.empty(tiles * 32 * 8, dtype=cp.float32)
    n4 = (1 << 26) // scale                  # block_sum: 1 GiB of float4 at scale 1
    v4 = cp.random.rand(n4 * 4, dtype=cp.float32)
    sums = cp.empty(132 * 8, dtype=cp.float32)
    m = (1 << 26) // scale                   # divide/reciprocal: 64M elements
    x32, y32 = cp.random.rand(m, dtype=cp.float32), cp.empty(m, dtype=cp.float32)
    x64, y64 = cp.random.rand(m, dtype=cp.float64), cp.empty(m, dtype=cp.float64)
    base, step = 3.0 / 7.0, 1.0 / 7.0        # coefficients d_k = base + k * step, known at run time
    dgrid = (132 * 16,)                      # 16 blocks of 256 per SM, ~120 elements per thread
    lines = 132 * 2                          # jacobi: 2 blocks of 1024 threads per SM
    jin = cp.random.rand(lines * 1024, dtype=cp.float32)
    jout = cp.empty_like(jin)
    g2 = (n // 32, n // 32)
    i32 = cp.int32
    return {
        "transpose_tile_unpadded": lambda: k["transpose_tile_unpadded"](g2, (32, 8), (a, b, i32(n))),
        "transpose_tile_padded": lambda: k["transpose_tile_padded"](g2, (32, 8), (a, b, i32(n))),
        "tile_sweep_unpadded": lambda: k["tile_sweep_unpadded"]((tiles,), (32, 8), (tin, tout, i32(32))),
        "tile_sweep_padded": lambda: k["tile_sweep_padded"]((tiles,), (32, 8), (tin, tout, i32(32))),
        "block_sum": lambda: k["block_sum"]((132 * 8,), (256,), (v4, sums, cp.int64(n4))),
        "transpose_naive_strided_store": lambda: k["transpose_naive_strided_store"]((n // 256, n), (256,), (a, b, i32(n))),
        "transpose_naive_strided_load": lambda: k["transpose_naive_strided_load"]((n // 256, n), (256,), (a, b, i32(n))),
        "scale_divide_f32": lambda: k["scale_divide_f32"](dgrid, (256,), (x32, y32, cp.float32(base), cp.float32(step), i32(m))),
        "scale_reciprocal_f32": lambda: k["scale_reciprocal_f32"](dgrid, (256,), (x32, y32, cp.float32(base), cp.float32(step), i32(m))),
        "scale_divide_f64": lambda: k["scale_divide_f64"](dgrid, (256,), (x64, y64, cp.float64(base), cp.float64(step), i32(m))),
        "scale_reciprocal_f64": lambda: k["scale_reciprocal_f64"](dgrid, (256,), (x64, y64, cp.float64(base), cp.float64(step), i32(m))),
        "jacobi_block_barrier": lambda: k["jacobi_block_barrier"]((lines,), (1024,), (jin, jout, i32(4096 // scale))),
        "jacobi_warp_shuffle": lambda: k["jacobi_warp_shuffle"]((lines,), (1024,), (jin, jout, i32(4096 // scale))),
    }, cp.cuda.Device().synchronize


def conv_jobs(scale, device):
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = False
    batch = 32 // scale
    x32 = torch.randn(batch, 128, 56, 56, device=device, requires_grad=True)
    w32 = torch.randn(128, 128, 3, 3, device=device, requires_grad=True)
    xbf = x32.detach().to(torch.bfloat16).contiguous(memory_format=torch.channels_last).requires_grad_()
    wbf = w32.detach().to(torch.bfloat16).contiguous(memory_format=torch.channels_last).requires_grad_()
    g32 = torch.randn(batch, 128, 56, 56, device=device)
    gbf = g32.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)

    def fp32(fn):
        def run():
            torch.backends.cudnn.allow_tf32 = False
            fn()
            torch.backends.cudnn.allow_tf32 = True
        return run

    def fwd_bwd(x, w, g):  # fprop, then dgrad and wgrad through autograd
        x.grad = w.grad = None
        y = F.conv2d(x, w, padding=1)
        torch.autograd.backward(y, g)

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return {
        "conv_fp32_no_tf32": fp32(lambda: fwd_bwd(x32, w32, g32)),
        "conv_bf16": lambda: fwd_bwd(xbf, wbf, gbf),
    }, sync


def conv_shape_jobs(scale, device):
    """More FP32 convolutions with TF32 off, in shapes where cuDNN picks implicit GEMM, not FFT."""
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = False
    batch = 32 // scale
    cl = torch.channels_last
    xa = torch.randn(batch, 128, 56, 56, device=device).contiguous(memory_format=cl).requires_grad_()
    wa = torch.randn(128, 128, 3, 3, device=device).contiguous(memory_format=cl).requires_grad_()
    ga = torch.randn(batch, 128, 56, 56, device=device).contiguous(memory_format=cl)
    xb = torch.randn(batch, 256, 28, 28, device=device)
    wb = torch.randn(512, 256, 1, 1, device=device)
    xc = torch.randn(batch, 64, 112, 112, device=device)
    wc = torch.randn(128, 64, 3, 3, device=device)

    def fp32(fn):
        def run():
            torch.backends.cudnn.allow_tf32 = False
            fn()
            torch.backends.cudnn.allow_tf32 = True
        return run

    def fwd_bwd():
        xa.grad = wa.grad = None
        torch.autograd.backward(F.conv2d(xa, wa, padding=1), ga)

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return {
        "conv_fp32_channels_last": fp32(fwd_bwd),
        "conv_fp32_1x1": fp32(lambda: F.conv2d(xb, wb)),
        "conv_fp32_stride2": fp32(lambda: F.conv2d(xc, wc, stride=2, padding=1)),
    }, sync


def main():
    a = kernel_arguments(["cuda", "conv", "conv2"], SRC)
    make = {"cuda": lambda: cuda_jobs(a.scale), "conv": lambda: conv_jobs(a.scale, a.device),
            "conv2": lambda: conv_shape_jobs(a.scale, a.device)}[a.group]
    jobs, sync = make()
    capture_jobs(jobs, sync, a)


if __name__ == "__main__":
    main()
