// Kernels of cuda_ops.h. Memory-bound element-wise work next to the GEMMs;
// written for clarity (grid-stride loops, one block per row for norms).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/cuda_ops.h"

namespace kvtier::decoder::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 65535 * 16 ? (b < 1 ? 1 : b) : 65535 * 16);
}

__device__ __forceinline__ float Load(const void* p, Elem t, int64_t i) {
  switch (t) {
    case Elem::kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case Elem::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void Store(void* p, Elem t, int64_t i, float v) {
  switch (t) {
    case Elem::kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case Elem::kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

__device__ __forceinline__ uint64_t SplitMix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void ConvertKernel(const float* src, void* dst, Elem t, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    Store(dst, t, i, src[i]);
}

__global__ void NormalKernel(void* dst, Elem t, int64_t n, uint64_t key, float std) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = SplitMix(key ^ SplitMix(uint64_t(i)));
    // Box-Muller on two 24-bit uniforms; u1 in (0, 1].
    const float u1 = (float((r >> 40) & 0xffffff) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = float((r >> 8) & 0xffffff) * (1.0f / 16777216.0f);
    Store(dst, t, i, std * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

__global__ void ConstKernel(float* dst, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = v;
}

__global__ void EmbedKernel(const void* table, Elem t, const int32_t* tokens, int hidden, float* x) {
  const int64_t base = int64_t(tokens[blockIdx.x]) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    x[int64_t(blockIdx.x) * hidden + i] = Load(table, t, base + i);
}

__global__ void RmsNormKernel(const float* x, const int32_t* src_rows, int dim, const float* w,
                              float eps, float* y) {
  __shared__ double partial[kThreads / 32];  // double, as the CPU path sums
  const int64_t src = src_rows ? src_rows[blockIdx.x] : blockIdx.x;
  const float* xr = x + src * dim;
  double ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += double(xr[i]) * xr[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  double total = 0;
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  const float inv = float(1.0 / sqrt(total / dim + eps));
  float* yr = y + int64_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

__global__ void RopeKernel(float* x, const int32_t* positions, int heads, int head_dim, double theta) {
  const int half = head_dim / 2;
  const int r = blockIdx.x;
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half, j = idx % half;
    const double a = double(positions[r]) * pow(theta, -2.0 * j / head_dim);
    double sd, cd;
    sincos(a, &sd, &cd);
    const float c = float(cd), s = float(sd);
    float* v = x + (int64_t(r) * heads + h) * head_dim;
    const float lo = v[j], hi = v[j + half];
    v[j] = lo * c - hi * s;
    v[j + half] = hi * c + lo * s;
  }
}

__global__ void SwiGluKernel(float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void BiasKernel(float* y, int out, const float* bias, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % out];
}

}  // namespace

cudaError_t ConvertF32(const float* src, void* dst, Elem t, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  ConvertKernel<<<Blocks(n), kThreads, 0, s>>>(src, dst, t, n);
  return cudaGetLastError();
}

cudaError_t FillNormal(void* dst, Elem t, int64_t n, uint64_t seed, uint64_t tensor, float std,
                       cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  NormalKernel<<<Blocks(n), kThreads, 0, s>>>(dst, t, n, seed * 0x9e3779b97f4a7c15ull ^ (tensor << 1 | 1), std);
  return cudaGetLastError();
}

cudaError_t FillConstF32(float* dst, int64_t n, float v, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  ConstKernel<<<Blocks(n), kThreads, 0, s>>>(dst, n, v);
  return cudaGetLastError();
}

cudaError_t EmbedRows(const void* table, Elem t, const int32_t* tokens, int rows, int hidden, float* x,
                      cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  EmbedKernel<<<rows, kThreads, 0, s>>>(table, t, tokens, hidden, x);
  return cudaGetLastError();
}

cudaError_t RmsNorm(const float* x, const int32_t* src_rows, int rows, int dim, const float* w,
                    float eps, float* y, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  RmsNormKernel<<<rows, kThreads, 0, s>>>(x, src_rows, dim, w, eps, y);
  return cudaGetLastError();
}

cudaError_t Rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, float theta,
                 cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  RopeKernel<<<rows, kThreads, 0, s>>>(x, positions, heads, head_dim, double(theta));
  return cudaGetLastError();
}

cudaError_t SwiGlu(float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  SwiGluKernel<<<Blocks(n), kThreads, 0, s>>>(gate, up, n);
  return cudaGetLastError();
}

cudaError_t AddBias(float* y, int rows, int out, const float* bias, cudaStream_t s) {
  if (bias == nullptr || rows <= 0) return cudaSuccess;
  const int64_t n = int64_t(rows) * out;
  BiasKernel<<<Blocks(n), kThreads, 0, s>>>(y, out, bias, n);
  return cudaGetLastError();
}

}  // namespace kvtier::decoder::cuda
