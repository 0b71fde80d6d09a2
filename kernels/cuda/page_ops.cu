// CUDA page scatter (with int8/fp8 quantization), batched decode scatter,
// gather (dequantize) and whole-page conversion. One warp per (token, head)
// row: lanes split head_dim, a warp max gives the row's scale. Same numeric.h
// conversions as the CPU, so both write identical bytes.
#include "cuda/cuda_common.cuh"

namespace kvtier::kernels {
namespace {

using namespace cuda_internal;

// Writes one row (lane holds elements lane + 32 e) in the page dtype.
__device__ void WriteRowWarp(const PagedKv& kv, int64_t page, int half, uint32_t head,
                             uint32_t slot, const float* x, int lane) {
  uint8_t* dst = kv.Data(page, half, head, slot);
  const uint32_t d = kv.head_dim;
  float amax = 0;
#pragma unroll
  for (int e = 0; e < kMaxElemsPerLane; ++e) {
    if (lane + kWarp * e < d) amax = fmaxf(amax, fabsf(x[e]));
  }
  amax = WarpMax(amax);
  const float scale = kv.HasScales() ? QuantScale(kv.dtype, amax) : 1.f;
  const float inv = scale > 0 ? 1.f / scale : 0.f;
#pragma unroll
  for (int e = 0; e < kMaxElemsPerLane; ++e) {
    const uint32_t i = lane + kWarp * e;
    if (i >= d) continue;
    switch (kv.dtype) {
      case KvDtype::kFp32: reinterpret_cast<float*>(dst)[i] = x[e]; break;
      case KvDtype::kFp16: reinterpret_cast<uint16_t*>(dst)[i] = FloatToHalf(x[e]); break;
      case KvDtype::kBf16: reinterpret_cast<uint16_t*>(dst)[i] = FloatToBf16(x[e]); break;
      case KvDtype::kFp8E4M3: dst[i] = FloatToFp8E4M3(x[e] * inv); break;
      case KvDtype::kInt8: dst[i] = uint8_t(FloatToInt8(x[e], inv)); break;
    }
  }
  if (kv.HasScales() && lane < 4) {
    kv.Scales(page, half, head)[4 * slot + lane] = uint8_t(FloatToBits(scale) >> (8 * lane));
  }
}

__device__ void ReadRowWarp(const PagedKv& kv, int64_t page, int half, uint32_t head,
                            uint32_t slot, float* x, int lane) {
  const uint8_t* src = kv.Data(page, half, head, slot);
  const float s = kv.HasScales() ? LoadF32(kv.Scales(page, half, head) + 4 * slot) : 1.f;
#pragma unroll
  for (int e = 0; e < kMaxElemsPerLane; ++e) {
    const uint32_t i = lane + kWarp * e;
    x[e] = i < kv.head_dim ? LoadElem(kv.dtype, src, i) * s : 0.f;
  }
}

__device__ void LoadRow(const float* src, uint32_t d, float* x, int lane) {
#pragma unroll
  for (int e = 0; e < kMaxElemsPerLane; ++e) {
    const uint32_t i = lane + kWarp * e;
    x[e] = i < d ? src[i] : 0.f;
  }
}

// grid (num_tokens, kv_heads), one warp: token blockIdx.x, head blockIdx.y.
__global__ void ScatterKernel(KvCopyParams p) {
  const PagedKv& kv = p.kv;
  const uint32_t pos = p.start_pos + blockIdx.x, h = blockIdx.y, d = kv.head_dim;
  const int64_t page = p.block_table[pos / kv.tokens_per_page];
  if (!kv.ValidPage(page)) return;  // bounds-safe: nothing written
  const uint64_t off = (uint64_t(blockIdx.x) * kv.kv_heads + h) * d;
  float x[kMaxElemsPerLane];
  LoadRow(p.k + off, d, x, threadIdx.x);
  WriteRowWarp(kv, page, kKeys, h, pos % kv.tokens_per_page, x, threadIdx.x);
  LoadRow(p.v + off, d, x, threadIdx.x);
  WriteRowWarp(kv, page, kValues, h, pos % kv.tokens_per_page, x, threadIdx.x);
}

// grid (num_seqs, kv_heads).
__global__ void ScatterBatchKernel(KvBatchWriteParams p) {
  const PagedKv& kv = p.kv;
  const uint32_t s = blockIdx.x, h = blockIdx.y, d = kv.head_dim;
  const int32_t pos = p.positions[s];
  if (pos < 0 || uint32_t(pos) / kv.tokens_per_page >= p.block_table_stride) return;
  const int64_t page = p.block_tables[uint64_t(s) * p.block_table_stride + pos / kv.tokens_per_page];
  if (!kv.ValidPage(page)) return;
  const uint64_t off = (uint64_t(s) * kv.kv_heads + h) * d;
  float x[kMaxElemsPerLane];
  LoadRow(p.k + off, d, x, threadIdx.x);
  WriteRowWarp(kv, page, kKeys, h, pos % kv.tokens_per_page, x, threadIdx.x);
  LoadRow(p.v + off, d, x, threadIdx.x);
  WriteRowWarp(kv, page, kValues, h, pos % kv.tokens_per_page, x, threadIdx.x);
}

__global__ void GatherKernel(KvCopyParams p) {
  const PagedKv& kv = p.kv;
  const uint32_t pos = p.start_pos + blockIdx.x, h = blockIdx.y, d = kv.head_dim;
  const int64_t page = p.block_table[pos / kv.tokens_per_page];
  const uint64_t off = (uint64_t(blockIdx.x) * kv.kv_heads + h) * d;
  float* dst[2] = {p.k + off, p.v + off};
  for (int half = 0; half < 2; ++half) {
    float x[kMaxElemsPerLane];
    if (kv.ValidPage(page)) ReadRowWarp(kv, page, half, h, pos % kv.tokens_per_page, x, threadIdx.x);
#pragma unroll
    for (int e = 0; e < kMaxElemsPerLane; ++e) {
      const uint32_t i = threadIdx.x + kWarp * e;
      if (i < d) dst[half][i] = kv.ValidPage(page) ? x[e] : NAN;
    }
  }
}

// grid (num_pages * layers, 2 * kv_heads); the warp walks the page's slots.
__global__ void ConvertKernel(PageConvertParams p) {
  PagedKv src = p.src, dst = p.dst;
  const uint32_t pair = blockIdx.x / src.layers;
  src.layer = dst.layer = blockIdx.x % src.layers;
  const int half = blockIdx.y % 2;
  const uint32_t h = blockIdx.y / 2;
  const int64_t sp = p.src_pages[pair], dp = p.dst_pages[pair];
  if (!src.ValidPage(sp) || !dst.ValidPage(dp)) return;
  for (uint32_t t = 0; t < src.tokens_per_page; ++t) {
    float x[kMaxElemsPerLane];
    ReadRowWarp(src, sp, half, h, t, x, threadIdx.x);
    WriteRowWarp(dst, dp, half, h, t, x, threadIdx.x);
  }
}

cudaError_t CheckCopy(const KvCopyParams& p) {
  KVTIER_CUDA_RETURN_IF_ERROR(CheckKv(p.kv));
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.block_table == nullptr || p.k == nullptr || p.v == nullptr ||
      CeilDiv(uint64_t(p.start_pos) + p.num_tokens, p.kv.tokens_per_page) > p.num_blocks)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

cudaError_t ScatterKvCuda(const KvCopyParams& p, cudaStream_t stream) {
  KVTIER_CUDA_RETURN_IF_ERROR(CheckCopy(p));
  if (p.num_tokens == 0) return cudaSuccess;
  ScatterKernel<<<dim3(p.num_tokens, p.kv.kv_heads), kWarp, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t ScatterKvBatchCuda(const KvBatchWriteParams& p, cudaStream_t stream) {
  KVTIER_CUDA_RETURN_IF_ERROR(CheckKv(p.kv));
  if (p.num_seqs == 0) return cudaSuccess;
  if (p.block_tables == nullptr || p.positions == nullptr || p.k == nullptr || p.v == nullptr)
    return cudaErrorInvalidValue;
  ScatterBatchKernel<<<dim3(p.num_seqs, p.kv.kv_heads), kWarp, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t GatherKvCuda(const KvCopyParams& p, cudaStream_t stream) {
  KVTIER_CUDA_RETURN_IF_ERROR(CheckCopy(p));
  if (p.num_tokens == 0) return cudaSuccess;
  GatherKernel<<<dim3(p.num_tokens, p.kv.kv_heads), kWarp, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t ConvertPagesCuda(const PageConvertParams& p, cudaStream_t stream) {
  PagedKv a = p.src, b = p.dst;
  a.layer = b.layer = 0;
  KVTIER_CUDA_RETURN_IF_ERROR(CheckKv(a));
  KVTIER_CUDA_RETURN_IF_ERROR(CheckKv(b));
  if (a.layers != b.layers || a.kv_heads != b.kv_heads || a.head_dim != b.head_dim ||
      a.tokens_per_page != b.tokens_per_page)
    return cudaErrorInvalidValue;
  if (p.num_pages == 0) return cudaSuccess;
  ConvertKernel<<<dim3(p.num_pages * a.layers, 2 * a.kv_heads), kWarp, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
